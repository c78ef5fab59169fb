package main

// The dashboard of `tallyd local`: one page that shows every
// region's view of an item and a counter, how far each replica is from its
// peers, and the links between regions, with buttons to like from a region
// and to cut or heal a link.
//
// It is its own HTTP server, not part of any replica's API: it reads the
// regions' routes server-side (so the page needs no CORS) and forwards the
// page's actions to them, adding the write or admin token `local` was
// given. Whoever can reach the dashboard can therefore cut links without a
// token. So it listens on loopback by default, every action needs a header
// that a cross-site page cannot send without a CORS preflight (never
// granted), and the Host header must be an IP address or localhost, which
// defeats DNS rebinding.

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/httpapi"
)

//go:embed dashboard.html
var dashboardHTML []byte

const (
	defaultDashboardAddr = "127.0.0.1:8080"
	// dashboardHeader must be on every POST (any value).
	dashboardHeader = "X-Tally-Dashboard"
	// dashReadTimeout bounds one read from a region, so a hung region shows
	// as an error instead of stalling the page.
	dashReadTimeout = 2 * time.Second
	// dashWriteTimeout bounds one forwarded write; a like waits for its
	// durable commit, a write to a recovering replica for its 503.
	dashWriteTimeout = 10 * time.Second
	dashDefaultBurst = 100
	dashMaxBurst     = 1000
	dashBurstWorkers = 8
	dashMaxBody      = 1 << 20
	// dashMilestones is how many of the newest milestones a region shows.
	dashMilestones = 8
)

// dashboardAddr is the --dashboard flag: where the dashboard listens, ""
// for none. It remembers whether it was given so that `local --port 0`
// (any free ports) also moves a defaulted dashboard to a free port rather
// than claiming 8080.
type dashboardAddr struct {
	Addr  string
	Given bool
}

func (d *dashboardAddr) String() string { return d.Addr }

// Set implements flag.Value.
func (d *dashboardAddr) Set(s string) error {
	if s != "" {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return fmt.Errorf("want host:port, or \"\" for no dashboard: %w", err)
		}
	}
	d.Addr, d.Given = s, true
	return nil
}

// listenAddr is where to listen given local's --port, "" for no dashboard.
func (d dashboardAddr) listenAddr(port int) string {
	if port == 0 && !d.Given && d.Addr != "" {
		if host, _, err := net.SplitHostPort(d.Addr); err == nil {
			return net.JoinHostPort(host, "0")
		}
	}
	return d.Addr
}

// dashRegion is one region the dashboard watches.
type dashRegion struct {
	Region  string `json:"region"`
	Replica string `json:"replica"`
	URL     string `json:"url"` // base URL of its HTTP API, no trailing slash
}

// dashboardConfig configures a dashboard handler.
type dashboardConfig struct {
	Regions []dashRegion
	// WriteToken and AdminToken are sent to the regions on likes and link
	// changes; empty means none (the admin token also opens write routes).
	WriteToken, AdminToken string
	// Listen is the host:port the dashboard is served on; with it the Host
	// check also admits that host by name.
	Listen string
}

// dashboard is the dashboard's http.Handler. It starts no goroutines that
// outlive a request.
type dashboard struct {
	cfg    dashboardConfig
	client *http.Client
	mux    *http.ServeMux
}

func newDashboard(cfg dashboardConfig) *dashboard {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // the regions are local; never route them through $HTTP_PROXY
	tr.MaxIdleConnsPerHost = 2 * dashBurstWorkers
	d := &dashboard{cfg: cfg, client: &http.Client{Transport: tr}, mux: http.NewServeMux()}
	d.mux.HandleFunc("GET /{$}", d.index)
	d.mux.HandleFunc("GET /api/overview", d.overview)
	d.mux.HandleFunc("POST /api/links/{a}/{b}", d.setLink)
	d.mux.HandleFunc("POST /api/like", d.like)
	d.mux.HandleFunc("POST /api/burst", d.burst)
	d.mux.HandleFunc("POST /api/incr", d.incr)
	d.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		dashError(w, http.StatusNotFound, "no route %s %s", r.Method, r.URL.Path)
	})
	return d
}

// closeIdle drops the kept-alive connections to the regions.
func (d *dashboard) closeIdle() { d.client.CloseIdleConnections() }

func (d *dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !d.hostAllowed(r.Host) {
		dashError(w, http.StatusForbidden, "unexpected Host %q: open the dashboard by IP address or localhost", r.Host)
		return
	}
	if r.Method == http.MethodPost && r.Header.Get(dashboardHeader) == "" {
		dashError(w, http.StatusForbidden, "actions need the %s header (the dashboard page sends it)", dashboardHeader)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	d.mux.ServeHTTP(w, r)
}

func (d *dashboard) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if net.ParseIP(host) != nil || strings.EqualFold(host, "localhost") {
		return true
	}
	listen, _, _ := net.SplitHostPort(d.cfg.Listen)
	return listen != "" && strings.EqualFold(host, listen)
}

func (d *dashboard) index(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; frame-ancestors 'none'")
	_, _ = w.Write(dashboardHTML)
}

// regionOverview is one region's view. A part that could not be read is
// absent and its error is in Errors under the part's name.
type regionOverview struct {
	dashRegion
	Reachable   bool            `json:"reachable"`
	Likes       json.RawMessage `json:"likes,omitempty"`
	Counter     json.RawMessage `json:"counter,omitempty"`
	Convergence json.RawMessage `json:"convergence,omitempty"`
	Status      json.RawMessage `json:"status,omitempty"`
	// Milestones is the region's GET /v1/milestones?limit=dashMilestones;
	// absent when milestones are off (the region answers 404).
	Milestones json.RawMessage   `json:"milestones,omitempty"`
	Errors     map[string]string `json:"errors,omitempty"`
}

type overviewResponse struct {
	At         time.Time        `json:"at"`
	Item       string           `json:"item"`
	Counter    string           `json:"counter"`
	Regions    []regionOverview `json:"regions"`
	Links      []httpapi.Link   `json:"links"`
	LinksError string           `json:"links_error,omitempty"`
}

// GET /api/overview?item=post1&counter=views: every region's view, read
// concurrently.
func (d *dashboard) overview(w http.ResponseWriter, r *http.Request) {
	item, counter := r.FormValue("item"), r.FormValue("counter")
	if item == "" {
		item = "post1"
	}
	if counter == "" {
		counter = "views"
	}
	out := overviewResponse{Item: item, Counter: counter, Regions: make([]regionOverview, len(d.cfg.Regions)), Links: []httpapi.Link{}}
	parts := []struct {
		name, path string
		dst        func(*regionOverview) *json.RawMessage
		optional   bool // a 404 means the region has it off: no error
	}{
		{"likes", "/v1/likes/" + url.PathEscape(item), func(o *regionOverview) *json.RawMessage { return &o.Likes }, false},
		{"counter", "/v1/counters/" + url.PathEscape(counter), func(o *regionOverview) *json.RawMessage { return &o.Counter }, false},
		{"convergence", "/v1/convergence", func(o *regionOverview) *json.RawMessage { return &o.Convergence }, false},
		{"status", "/v1/status", func(o *regionOverview) *json.RawMessage { return &o.Status }, false},
		{"milestones", "/v1/milestones?limit=" + strconv.Itoa(dashMilestones), func(o *regionOverview) *json.RawMessage { return &o.Milestones }, true},
	}
	var (
		mu sync.Mutex // protects the Errors maps and Reachable
		wg sync.WaitGroup
	)
	for i, reg := range d.cfg.Regions {
		o := &out.Regions[i]
		o.dashRegion = reg
		for _, p := range parts {
			wg.Go(func() {
				body, reached, err := d.get(r.Context(), reg.URL+p.path, "")
				mu.Lock()
				defer mu.Unlock()
				o.Reachable = o.Reachable || reached
				var st *statusError
				if p.optional && errors.As(err, &st) && st.status == http.StatusNotFound {
					return // off in that region: nothing to show
				}
				if err != nil {
					if o.Errors == nil {
						o.Errors = map[string]string{}
					}
					o.Errors[p.name] = err.Error()
					return
				}
				*p.dst(o) = body
			})
		}
	}
	wg.Go(func() {
		links, err := d.links(r.Context())
		if err != nil {
			out.LinksError = err.Error()
			return
		}
		out.Links = links
	})
	wg.Wait()
	out.At = time.Now().UTC()
	dashJSON(w, http.StatusOK, out)
}

// links reads the link list from the first region that answers.
func (d *dashboard) links(ctx context.Context) ([]httpapi.Link, error) {
	var errs []error
	for _, reg := range d.cfg.Regions {
		body, _, err := d.get(ctx, reg.URL+"/v1/admin/links", d.cfg.AdminToken)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", reg.Region, err))
			continue
		}
		var v struct {
			Links []httpapi.Link `json:"links"`
		}
		if err := json.Unmarshal(body, &v); err != nil {
			errs = append(errs, fmt.Errorf("%s: links: %w", reg.Region, err))
			continue
		}
		if v.Links == nil {
			v.Links = []httpapi.Link{}
		}
		return v.Links, nil
	}
	if len(errs) == 0 {
		return nil, errors.New("no regions")
	}
	return nil, errors.Join(errs...)
}

// POST /api/links/{a}/{b}?up=true|false: cut or heal a link through the
// first region that answers, passing its answer through.
func (d *dashboard) setLink(w http.ResponseWriter, r *http.Request) {
	up, err := strconv.ParseBool(r.FormValue("up"))
	if err != nil {
		dashError(w, http.StatusBadRequest, "want up=true or up=false, got %q", r.FormValue("up"))
		return
	}
	path := "/v1/admin/links/" + url.PathEscape(r.PathValue("a")) + "/" + url.PathEscape(r.PathValue("b"))
	body := fmt.Sprintf(`{"up":%t}`, up)
	var errs []error
	for _, reg := range d.cfg.Regions {
		st, resp, err := d.forward(r.Context(), http.MethodPut, reg.URL+path, d.cfg.AdminToken, body)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", reg.Region, err))
			continue
		}
		dashRaw(w, st, resp)
		return
	}
	dashError(w, http.StatusBadGateway, "no region answered: %v", oneLine(errors.Join(errs...)))
}

// POST /api/like?region=us&item=post1[&user=alice]: a like at one region,
// by a random user if none is given.
func (d *dashboard) like(w http.ResponseWriter, r *http.Request) {
	reg, ok := d.region(w, r)
	if !ok {
		return
	}
	item, user := r.FormValue("item"), r.FormValue("user")
	if item == "" {
		dashError(w, http.StatusBadRequest, "want item=...")
		return
	}
	if user == "" {
		user = randomUser()
	}
	st, body, err := d.forward(r.Context(), http.MethodPut, likeURL(reg, item, user), d.writeToken(), "")
	if err != nil {
		dashError(w, http.StatusBadGateway, "%s: %v", reg.Region, err)
		return
	}
	dashRaw(w, st, body)
}

// POST /api/incr?region=us&counter=views[&by=1]
func (d *dashboard) incr(w http.ResponseWriter, r *http.Request) {
	reg, ok := d.region(w, r)
	if !ok {
		return
	}
	key := r.FormValue("counter")
	if key == "" {
		dashError(w, http.StatusBadRequest, "want counter=...")
		return
	}
	by := int64(1)
	if s := r.FormValue("by"); s != "" {
		var err error
		if by, err = strconv.ParseInt(s, 10, 64); err != nil {
			dashError(w, http.StatusBadRequest, "by %q: want an integer", s)
			return
		}
	}
	st, body, err := d.forward(r.Context(), http.MethodPost, reg.URL+"/v1/counters/"+url.PathEscape(key)+"/incr",
		d.writeToken(), fmt.Sprintf(`{"by":%d}`, by))
	if err != nil {
		dashError(w, http.StatusBadGateway, "%s: %v", reg.Region, err)
		return
	}
	dashRaw(w, st, body)
}

type burstResponse struct {
	Region string `json:"region"`
	Item   string `json:"item"`
	Sent   int    `json:"sent"`
	OK     int    `json:"ok"`
	Failed int    `json:"failed"`
	Error  string `json:"error,omitempty"` // the first failure
	Ms     int64  `json:"ms"`
}

// POST /api/burst?region=us&item=post1[&n=100]: n likes by fresh random
// users at one region, a few at a time. It answers when all are done.
func (d *dashboard) burst(w http.ResponseWriter, r *http.Request) {
	reg, ok := d.region(w, r)
	if !ok {
		return
	}
	item := r.FormValue("item")
	if item == "" {
		dashError(w, http.StatusBadRequest, "want item=...")
		return
	}
	n := dashDefaultBurst
	if s := r.FormValue("n"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 || n > dashMaxBurst {
			dashError(w, http.StatusBadRequest, "n %q: want 1..%d", s, dashMaxBurst)
			return
		}
	}
	start := time.Now()
	out := burstResponse{Region: reg.Region, Item: item, Sent: n}
	var (
		mu   sync.Mutex // protects out
		wg   sync.WaitGroup
		jobs = make(chan struct{})
	)
	for range min(n, dashBurstWorkers) {
		wg.Go(func() {
			for range jobs {
				st, body, err := d.forward(r.Context(), http.MethodPut, likeURL(reg, item, randomUser()), d.writeToken(), "")
				if err == nil && st != http.StatusOK {
					err = upstreamError(st, body)
				}
				mu.Lock()
				if err != nil {
					out.Failed++
					if out.Error == "" {
						out.Error = err.Error()
					}
				} else {
					out.OK++
				}
				mu.Unlock()
			}
		})
	}
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	wg.Wait()
	out.Ms = time.Since(start).Milliseconds()
	st := http.StatusOK
	if out.OK == 0 {
		st = http.StatusBadGateway
	}
	dashJSON(w, st, out)
}

func (d *dashboard) writeToken() string {
	if d.cfg.WriteToken != "" {
		return d.cfg.WriteToken
	}
	return d.cfg.AdminToken
}

// region finds the ?region= parameter's region or answers 404.
func (d *dashboard) region(w http.ResponseWriter, r *http.Request) (dashRegion, bool) {
	name := r.FormValue("region")
	var names []string
	for _, reg := range d.cfg.Regions {
		if reg.Region == name {
			return reg, true
		}
		names = append(names, reg.Region)
	}
	dashError(w, http.StatusNotFound, "unknown region %q: regions are %s", name, strings.Join(names, ", "))
	return dashRegion{}, false
}

func likeURL(reg dashRegion, item, user string) string {
	return reg.URL + "/v1/likes/" + url.PathEscape(item) + "/" + url.PathEscape(user)
}

func randomUser() string { return fmt.Sprintf("dash-%012x", rand.Uint64()>>16) }

// get reads one route of a region and returns its JSON body if it
// answered 200. reached says whether the region answered at all.
func (d *dashboard) get(ctx context.Context, u, token string) (json.RawMessage, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, dashReadTimeout)
	defer cancel()
	st, raw, err := d.do(ctx, http.MethodGet, u, token, nil)
	if err != nil {
		return nil, false, err
	}
	if st != http.StatusOK {
		return nil, true, upstreamError(st, raw)
	}
	return raw, true, nil
}

// forward sends one write to a region and returns its status and JSON
// body, whatever the status; err means it did not answer with JSON.
func (d *dashboard) forward(ctx context.Context, method, u, token, body string) (int, json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, dashWriteTimeout)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	return d.do(ctx, method, u, token, rd)
}

func (d *dashboard) do(ctx context.Context, method, u, token string, body io.Reader) (int, json.RawMessage, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the URL is the region's, which the page shows anyway
		}
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, dashMaxBody))
	if err != nil {
		return 0, nil, err
	}
	if !json.Valid(raw) {
		return 0, nil, fmt.Errorf("%s: not JSON: %.80q", resp.Status, raw)
	}
	return resp.StatusCode, raw, nil
}

// statusError is a region's non-200 answer.
type statusError struct {
	status int
	msg    string
}

func (e *statusError) Error() string { return e.msg }

// upstreamError describes a region's non-200 answer by its JSON error.
func upstreamError(status int, body []byte) error {
	var e struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return &statusError{status, fmt.Sprintf("%d %s: %s", status, e.Code, e.Error)}
	}
	return &statusError{status, fmt.Sprintf("%d %s", status, http.StatusText(status))}
}

func dashJSON(w http.ResponseWriter, status int, v any) {
	raw, err := json.Marshal(v)
	if err != nil {
		dashError(w, http.StatusInternalServerError, "encode: %v", err)
		return
	}
	dashRaw(w, status, raw)
}

func dashRaw(w http.ResponseWriter, status int, raw []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(raw)
	if len(raw) == 0 || raw[len(raw)-1] != '\n' {
		_, _ = w.Write([]byte("\n"))
	}
}

func dashError(w http.ResponseWriter, status int, format string, args ...any) {
	raw, _ := json.Marshal(map[string]string{"error": fmt.Sprintf(format, args...)})
	dashRaw(w, status, raw)
}

// dashboardServer serves a dashboard on its own listener. Its serve loop
// is its only goroutine; Close stops and joins it.
type dashboardServer struct {
	d      *dashboard
	log    hclog.Logger
	ln     net.Listener
	srv    *http.Server
	cancel context.CancelFunc // cancels in-flight requests (a burst)
	done   chan struct{}      // closed when the serve loop returns

	closeOnce sync.Once
}

// startDashboard listens on addr and serves d until Close.
func startDashboard(ctx context.Context, addr string, d *dashboard, log hclog.Logger) (*dashboardServer, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dashboard: listen on %s: %w", addr, err)
	}
	base, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &dashboardServer{
		d: d, log: log, ln: ln, cancel: cancel, done: make(chan struct{}),
		srv: &http.Server{
			Handler:           d,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			IdleTimeout:       2 * time.Minute,
			MaxHeaderBytes:    64 << 10,
			BaseContext:       func(net.Listener) context.Context { return base },
			ErrorLog:          log.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug}),
		},
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("stopped serving", "error", err)
		}
	}()
	return s, nil
}

// startLocalDashboard starts the dashboard of a `local` deployment on
// --dashboard, or returns nil if that is empty.
func startLocalDashboard(ctx context.Context, lc localConfig, cfgs []Config, nodes []*node, log hclog.Logger) (*dashboardServer, error) {
	addr := lc.Dashboard.listenAddr(lc.Port)
	if addr == "" {
		return nil, nil
	}
	dcfg := dashboardConfig{WriteToken: lc.WriteToken, AdminToken: lc.AdminToken, Listen: addr}
	for i, n := range nodes {
		dcfg.Regions = append(dcfg.Regions, dashRegion{Region: cfgs[i].Region, Replica: cfgs[i].Replica, URL: "http://" + n.Addr().String()})
	}
	return startDashboard(ctx, addr, newDashboard(dcfg), log.Named("dashboard"))
}

// Addr is the bound address (the real port when asked for port 0).
func (s *dashboardServer) Addr() net.Addr { return s.ln.Addr() }

// Close stops the dashboard: it cancels in-flight requests, waits briefly
// for them, and joins the serve loop. A nil server is fine; Close is
// idempotent.
func (s *dashboardServer) Close() {
	if s == nil {
		return
	}
	s.closeOnce.Do(func() {
		s.cancel()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.srv.Shutdown(ctx); err != nil {
			s.log.Warn("requests did not finish; closing their connections", "error", err)
			_ = s.srv.Close()
		}
		<-s.done
		s.d.closeIdle()
	})
}
