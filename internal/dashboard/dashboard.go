// Package dashboard is the dashboard of a local deployment (tallyd local):
// one page that shows every region's view of an item and a counter, how
// far each replica is from its peers, the links between regions, a chart
// of the likes each region booked over the last minutes, the trending
// items and a budget as each region sees it, with buttons to like, grant
// and spend from a region and to cut or heal a link.
//
// It is its own HTTP server, not part of any replica's API: it reads the
// regions' routes server-side (so the page needs no CORS) and forwards the
// page's actions to them, adding the write or admin token the deployment
// was given. Whoever can reach the dashboard can therefore cut links
// without a token. So it listens on loopback by default, every action needs
// a header that a cross-site page cannot send without a CORS preflight
// (never granted), and the Host header must be an IP address or localhost,
// which defeats DNS rebinding.
package dashboard

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/api"
)

//go:embed dashboard.html
var dashboardHTML []byte

const (
	// DefaultAddr is where a local deployment serves the dashboard.
	DefaultAddr = "127.0.0.1:8080"
	// Header must be on every POST (any value).
	Header = "X-Tally-Dashboard"
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

// Target is one region the dashboard watches.
type Target struct {
	Region  string `json:"region"`
	Replica string `json:"replica"`
	URL     string `json:"url"` // base URL of its HTTP API, no trailing slash
}

// Config configures a Dashboard.
type Config struct {
	Regions []Target
	// WriteToken and AdminToken are sent to the regions on likes and link
	// changes; empty means none (the admin token also opens write routes).
	WriteToken, AdminToken string
	// Listen is the host:port the dashboard is served on; with it the Host
	// check also admits that host by name.
	Listen string
}

// Dashboard is the dashboard's http.Handler. It starts no goroutines that
// outlive a request.
type Dashboard struct {
	cfg    Config
	client *http.Client
	mux    *http.ServeMux
}

func New(cfg Config) *Dashboard {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // the regions are local; never route them through $HTTP_PROXY
	tr.MaxIdleConnsPerHost = 2 * dashBurstWorkers
	d := &Dashboard{cfg: cfg, client: &http.Client{Transport: tr}, mux: http.NewServeMux()}
	d.mux.HandleFunc("GET /{$}", d.index)
	d.mux.HandleFunc("GET /api/overview", d.overview)
	d.mux.HandleFunc("GET /api/series", d.series)
	d.mux.HandleFunc("GET /api/trending", d.trending)
	d.mux.HandleFunc("POST /api/links/{a}/{b}", d.setLink)
	d.mux.HandleFunc("POST /api/like", d.like)
	d.mux.HandleFunc("POST /api/burst", d.burst)
	d.mux.HandleFunc("POST /api/incr", d.incr)
	d.mux.HandleFunc("POST /api/budget", d.budget)
	d.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		dashError(w, http.StatusNotFound, "no route %s %s", r.Method, r.URL.Path)
	})
	return d
}

// closeIdle drops the kept-alive connections to the regions.
func (d *Dashboard) closeIdle() { d.client.CloseIdleConnections() }

func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !d.hostAllowed(r.Host) {
		dashError(w, http.StatusForbidden, "unexpected Host %q: open the dashboard by IP address or localhost", r.Host)
		return
	}
	if r.Method == http.MethodPost && r.Header.Get(Header) == "" {
		dashError(w, http.StatusForbidden, "actions need the %s header (the dashboard page sends it)", Header)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	d.mux.ServeHTTP(w, r)
}

func (d *Dashboard) hostAllowed(hostport string) bool {
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

func (d *Dashboard) index(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; frame-ancestors 'none'")
	_, _ = w.Write(dashboardHTML)
}

// RegionOverview is one region's view. A part that could not be read is
// absent and its error is in Errors under the part's name.
type RegionOverview struct {
	Target
	Reachable   bool            `json:"reachable"`
	Likes       json.RawMessage `json:"likes,omitempty"`
	Counter     json.RawMessage `json:"counter,omitempty"`
	Convergence json.RawMessage `json:"convergence,omitempty"`
	Status      json.RawMessage `json:"status,omitempty"`
	// Milestones is the region's GET /v1/milestones?limit=dashMilestones;
	// absent when milestones are off (the region answers 404).
	Milestones json.RawMessage `json:"milestones,omitempty"`
	// Budget is the region's GET /v1/budgets/{budget}.
	Budget json.RawMessage   `json:"budget,omitempty"`
	Errors map[string]string `json:"errors,omitempty"`
}

// Overview answers GET /api/overview: every region's view and the links.
type Overview struct {
	At         time.Time        `json:"at"`
	Item       string           `json:"item"`
	Counter    string           `json:"counter"`
	Budget     string           `json:"budget"`
	Regions    []RegionOverview `json:"regions"`
	Links      []api.Link       `json:"links"`
	LinksError string           `json:"links_error,omitempty"`
}

// GET /api/overview?item=post1&counter=views&budget=gift-cards: every
// region's view, read concurrently.
func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request) {
	item, counter, budget := r.FormValue("item"), r.FormValue("counter"), r.FormValue("budget")
	if item == "" {
		item = "post1"
	}
	if counter == "" {
		counter = "views"
	}
	if budget == "" {
		budget = "gift-cards"
	}
	out := Overview{Item: item, Counter: counter, Budget: budget, Regions: make([]RegionOverview, len(d.cfg.Regions)), Links: []api.Link{}}
	parts := []struct {
		name, path string
		dst        func(*RegionOverview) *json.RawMessage
		optional   bool // a 404 means the region has it off: no error
	}{
		{"likes", "/v1/likes/" + url.PathEscape(item), func(o *RegionOverview) *json.RawMessage { return &o.Likes }, false},
		{"counter", "/v1/counters/" + url.PathEscape(counter), func(o *RegionOverview) *json.RawMessage { return &o.Counter }, false},
		{"convergence", "/v1/convergence", func(o *RegionOverview) *json.RawMessage { return &o.Convergence }, false},
		{"status", "/v1/status", func(o *RegionOverview) *json.RawMessage { return &o.Status }, false},
		{"milestones", "/v1/milestones?limit=" + strconv.Itoa(dashMilestones), func(o *RegionOverview) *json.RawMessage { return &o.Milestones }, true},
		{"budget", "/v1/budgets/" + url.PathEscape(budget), func(o *RegionOverview) *json.RawMessage { return &o.Budget }, false},
	}
	var (
		mu sync.Mutex // protects the Errors maps and Reachable
		wg sync.WaitGroup
	)
	for i, reg := range d.cfg.Regions {
		o := &out.Regions[i]
		o.Target = reg
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
func (d *Dashboard) links(ctx context.Context) ([]api.Link, error) {
	var errs []error
	for _, reg := range d.cfg.Regions {
		body, _, err := d.get(ctx, reg.URL+"/v1/admin/links", d.cfg.AdminToken)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", reg.Region, err))
			continue
		}
		var v struct {
			Links []api.Link `json:"links"`
		}
		if err := json.Unmarshal(body, &v); err != nil {
			errs = append(errs, fmt.Errorf("%s: links: %w", reg.Region, err))
			continue
		}
		if v.Links == nil {
			v.Links = []api.Link{}
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
func (d *Dashboard) setLink(w http.ResponseWriter, r *http.Request) {
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
	dashError(w, http.StatusBadGateway, "no region answered: %v", strings.ReplaceAll(errors.Join(errs...).Error(), "\n", "; "))
}

// POST /api/like?region=us&item=post1[&user=alice]: a like at one region,
// by a random user if none is given.
func (d *Dashboard) like(w http.ResponseWriter, r *http.Request) {
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
func (d *Dashboard) incr(w http.ResponseWriter, r *http.Request) {
	reg, ok := d.region(w, r)
	if !ok {
		return
	}
	key := r.FormValue("counter")
	if key == "" {
		dashError(w, http.StatusBadRequest, "want counter=...")
		return
	}
	by, ok := formInt[int64](w, r, "by", 1, math.MinInt64, math.MaxInt64)
	if !ok {
		return
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
func (d *Dashboard) burst(w http.ResponseWriter, r *http.Request) {
	reg, ok := d.region(w, r)
	if !ok {
		return
	}
	item := r.FormValue("item")
	if item == "" {
		dashError(w, http.StatusBadRequest, "want item=...")
		return
	}
	n, ok := formInt(w, r, "n", dashDefaultBurst, 1, dashMaxBurst)
	if !ok {
		return
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

func (d *Dashboard) writeToken() string {
	if d.cfg.WriteToken != "" {
		return d.cfg.WriteToken
	}
	return d.cfg.AdminToken
}

// formInt reads the integer form value name, def if absent. One that is
// not an integer in [lo, hi] is answered 400, and ok is false.
func formInt[T int | int64](w http.ResponseWriter, r *http.Request, name string, def, lo, hi T) (v T, ok bool) {
	s := r.FormValue(name)
	if s == "" {
		return def, true
	}
	x, err := strconv.ParseInt(s, 10, 64)
	if err != nil || x < int64(lo) || x > int64(hi) {
		dashError(w, http.StatusBadRequest, "%s %q: want an integer from %d to %d", name, s, lo, hi)
		return 0, false
	}
	return T(x), true
}

// region finds the ?region= parameter's region or answers 404.
func (d *Dashboard) region(w http.ResponseWriter, r *http.Request) (Target, bool) {
	name := r.FormValue("region")
	var names []string
	for _, reg := range d.cfg.Regions {
		if reg.Region == name {
			return reg, true
		}
		names = append(names, reg.Region)
	}
	dashError(w, http.StatusNotFound, "unknown region %q: regions are %s", name, strings.Join(names, ", "))
	return Target{}, false
}

func likeURL(reg Target, item, user string) string {
	return reg.URL + "/v1/likes/" + url.PathEscape(item) + "/" + url.PathEscape(user)
}

func randomUser() string { return fmt.Sprintf("dash-%012x", rand.Uint64()>>16) }

// get reads one route of a region and returns its JSON body if it
// answered 200. reached says whether the region answered at all.
func (d *Dashboard) get(ctx context.Context, u, token string) (json.RawMessage, bool, error) {
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
func (d *Dashboard) forward(ctx context.Context, method, u, token, body string) (int, json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, dashWriteTimeout)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	return d.do(ctx, method, u, token, rd)
}

func (d *Dashboard) do(ctx context.Context, method, u, token string, body io.Reader) (int, json.RawMessage, error) {
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

// Server serves a Dashboard on its own listener. Its serve loop
// is its only goroutine; Close stops and joins it.
type Server struct {
	d      *Dashboard
	log    hclog.Logger
	ln     net.Listener
	srv    *http.Server
	cancel context.CancelFunc // cancels in-flight requests (a burst)
	done   chan struct{}      // closed when the serve loop returns

	closeOnce sync.Once
}

// Start listens on addr and serves d until Close. ctx bounds the listen
// only; requests in flight are cancelled by Close.
func Start(ctx context.Context, addr string, d *Dashboard, log hclog.Logger) (*Server, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dashboard: listen on %s: %w", addr, err)
	}
	base, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &Server{
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

// Addr is the bound address (the real port when asked for port 0).
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops the dashboard: it cancels in-flight requests, waits briefly
// for them, and joins the serve loop. A nil server is fine; Close is
// idempotent.
func (s *Server) Close() {
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
