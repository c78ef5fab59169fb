// Package dashboard is the dashboard of a local deployment (tallyd local):
// one page that shows every region's view of an item and a counter, how
// far each replica is from its peers, the links between regions, a chart
// of the likes each region booked over the last minutes, the trending
// items and a budget as each region sees it, with buttons to like, grant
// and spend from a region and to cut or heal a link.
//
// It is its own HTTP server, not part of any replica's API: it reads the
// regions' routes server-side through tally's client (so the page needs no
// CORS) and sends the page's actions to them, with the write or admin
// token the deployment was given. Whoever can reach the dashboard can therefore cut links
// without a token. So it listens on loopback by default, every action needs
// a header that a cross-site page cannot send without a CORS preflight
// (never granted), and the Host header must be an IP address or localhost,
// which defeats DNS rebinding.
package dashboard

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
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
	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/shard"
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
	cfg  Config
	http *http.Client // every region's clients share its connections
	// regions are the clients of cfg.Regions, in the same order.
	regions []regionClients
	mux     *http.ServeMux
}

// regionClients are one region's clients: reads and writes go with the
// write token, link changes with the admin token.
type regionClients struct {
	api, admin *client.Client
}

func New(cfg Config) *Dashboard {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // the regions are local; never route them through $HTTP_PROXY
	tr.MaxIdleConnsPerHost = 2 * dashBurstWorkers
	d := &Dashboard{cfg: cfg, http: &http.Client{Transport: tr}, mux: http.NewServeMux()}
	for _, reg := range cfg.Regions {
		d.regions = append(d.regions, regionClients{api: d.newClient(reg, d.writeToken()), admin: d.newClient(reg, cfg.AdminToken)})
	}
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

// newClient is a client of reg's API. A URL the client refuses gets one
// whose every call fails, so that region shows its error.
func (d *Dashboard) newClient(reg Target, token string) *client.Client {
	c, err := client.New(client.Config{BaseURL: reg.URL, Token: token, HTTP: d.http, MaxAnswerBytes: dashMaxBody})
	if err != nil {
		c, _ = client.New(client.Config{BaseURL: "http://invalid.invalid", HTTP: &http.Client{Transport: failing{err}}})
	}
	return c
}

// failing is a transport whose every request fails with err.
type failing struct{ err error }

func (f failing) RoundTrip(*http.Request) (*http.Response, error) { return nil, f.err }

// closeIdle drops the kept-alive connections to the regions.
func (d *Dashboard) closeIdle() { d.http.CloseIdleConnections() }

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
	Reachable   bool             `json:"reachable"`
	Likes       *api.Likes       `json:"likes,omitempty"`
	Counter     *api.Counter     `json:"counter,omitempty"`
	Convergence *api.Convergence `json:"convergence,omitempty"`
	Status      *api.Status      `json:"status,omitempty"`
	// Milestones is the region's GET /v1/milestones?limit=dashMilestones;
	// absent when milestones are off (the region answers 404).
	Milestones *api.Milestones `json:"milestones,omitempty"`
	// Budget is the region's GET /v1/budgets/{budget}.
	Budget *api.Budget `json:"budget,omitempty"`
	// Shards is the region's shard map as the replica answers it.
	Shards *api.ShardMap     `json:"shards,omitempty"`
	Errors map[string]string `json:"errors,omitempty"`
}

// Overview answers GET /api/overview: every region's view and the links.
type Overview struct {
	At      time.Time `json:"at"`
	Item    string    `json:"item"`
	Counter string    `json:"counter"`
	Budget  string    `json:"budget"`
	// Regions are the watched replicas' views, one per replica (a sharded
	// region has several).
	Regions []RegionOverview `json:"regions"`
	// Summary is one entry a region, from its replicas' views.
	Summary    []RegionSummary `json:"summary"`
	Links      []api.Link      `json:"links"`
	LinksError string          `json:"links_error,omitempty"`
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
	type read = func(ctx context.Context, c *client.Client, o *RegionOverview) error
	parts := []struct {
		name     string
		read     read
		optional bool // a 404 means the region has it off: no error
	}{
		{"likes", func(ctx context.Context, c *client.Client, o *RegionOverview) error {
			return into(&o.Likes)(c.Likes(ctx, item))
		}, false},
		{"counter", func(ctx context.Context, c *client.Client, o *RegionOverview) error {
			return into(&o.Counter)(c.Counter(ctx, counter))
		}, false},
		{"convergence", func(ctx context.Context, c *client.Client, o *RegionOverview) error {
			return into(&o.Convergence)(c.Convergence(ctx))
		}, false},
		{"status", func(ctx context.Context, c *client.Client, o *RegionOverview) error {
			return into(&o.Status)(c.Status(ctx))
		}, false},
		{"milestones", func(ctx context.Context, c *client.Client, o *RegionOverview) error {
			return into(&o.Milestones)(c.Milestones(ctx, dashMilestones))
		}, true},
		{"budget", func(ctx context.Context, c *client.Client, o *RegionOverview) error {
			return into(&o.Budget)(c.Budget(ctx, budget))
		}, false},
		{"shards", func(ctx context.Context, c *client.Client, o *RegionOverview) error {
			m, err := c.Shards(ctx)
			if err == nil {
				o.Shards = &m
			}
			return err
		}, false},
	}
	var (
		mu sync.Mutex // protects the overviews
		wg sync.WaitGroup
	)
	for i, reg := range d.cfg.Regions {
		o := &out.Regions[i]
		o.Target = reg
		for _, p := range parts {
			wg.Go(func() {
				var part RegionOverview
				ctx, cancel := context.WithTimeout(r.Context(), dashReadTimeout)
				err := p.read(ctx, d.regions[i].api, &part)
				cancel()
				mu.Lock()
				defer mu.Unlock()
				o.Reachable = o.Reachable || answered(err)
				if p.optional && client.StatusCode(err) == http.StatusNotFound {
					return // off in that region: nothing to show
				}
				if err != nil {
					if o.Errors == nil {
						o.Errors = map[string]string{}
					}
					o.Errors[p.name] = regionError(err).Error()
					return
				}
				o.merge(&part)
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
	out.Summary = summarize(out.Regions)
	out.At = time.Now().UTC()
	dashJSON(w, http.StatusOK, out)
}

// RegionSummary is one region as a whole, from the views of its
// watched replicas.
type RegionSummary struct {
	Region string `json:"region"`
	// Replicas are the region's watched replicas, in the order watched;
	// Reachable how many of them answered.
	Replicas  []string `json:"replicas"`
	Reachable int      `json:"reachable"`
	// Likes and Counter are the region's counts: one replica's answer,
	// not a sum. Every replica of a region answers the region's whole
	// count (a sharded region's replica asks a holder of the key's
	// shard), so adding them would count each like once a replica. The
	// first exact answer in order is taken, else the first approx one.
	Likes   *api.Likes   `json:"likes,omitempty"`
	Counter *api.Counter `json:"counter,omitempty"`
	// Budget and Milestones are the region's too, by the same rule: one
	// replica's answer (a budget's exact answer, synced milestones
	// preferred), so a sharded region shows one budget row and one
	// milestone total, not one a replica.
	Budget     *api.Budget     `json:"budget,omitempty"`
	Milestones *api.Milestones `json:"milestones,omitempty"`
	// Shards are the region's shards by how many of their copies are up,
	// as the first replica with a shard map sees them; absent where the
	// region is not sharded.
	Shards *ShardStates `json:"shards,omitempty"`
}

// ShardStates counts a sharded region's shards by their holders' state.
type ShardStates struct {
	Shards int `json:"shards"`
	Copies int `json:"copies"`
	// Up: every copy's holder is up; Degraded: some are; Down: none is
	// (the shard's keys cannot be read or written in this region).
	Up       int `json:"up"`
	Degraded int `json:"degraded"`
	Down     int `json:"down"`
}

// summarize folds the replicas' views into one summary a region, in the
// order the regions are first watched.
func summarize(views []RegionOverview) []RegionSummary {
	out := []RegionSummary{}
	at := map[string]int{}
	for _, v := range views {
		i, ok := at[v.Region]
		if !ok {
			i = len(out)
			at[v.Region] = i
			out = append(out, RegionSummary{Region: v.Region, Replicas: []string{}})
		}
		s := &out[i]
		s.Replicas = append(s.Replicas, v.Replica)
		if v.Reachable {
			s.Reachable++
		}
		if v.Likes != nil && (s.Likes == nil || s.Likes.Approx && !v.Likes.Approx) {
			s.Likes = v.Likes
		}
		if v.Counter != nil && (s.Counter == nil || s.Counter.Approx && !v.Counter.Approx) {
			s.Counter = v.Counter
		}
		if v.Budget != nil && (s.Budget == nil || s.Budget.Approx && !v.Budget.Approx) {
			s.Budget = v.Budget
		}
		if v.Milestones != nil && (s.Milestones == nil || !s.Milestones.Synced && v.Milestones.Synced) {
			s.Milestones = v.Milestones
		}
		if s.Shards == nil && v.Shards != nil && len(v.Shards.Replicas) > 1 {
			s.Shards = shardStates(v.Shards)
		}
	}
	return out
}

// shardStates counts m's shards by how many of their holders are up. A
// holding lists its shards as runs ("0-340", "342"), each run read as the
// shards in it; nil if a holding cannot be read (no states rather than
// wrong ones).
func shardStates(m *api.ShardMap) *ShardStates {
	up, held := make([]int, m.Shards), make([]int, m.Shards)
	for _, h := range m.Replicas {
		set, err := shard.ParseRanges(h.Shards)
		if err != nil {
			return nil
		}
		for sh := range m.Shards {
			if sh < shard.Count && set.Has(sh) {
				held[sh]++
				if h.State == "up" {
					up[sh]++
				}
			}
		}
	}
	st := &ShardStates{Shards: m.Shards, Copies: m.Copies}
	for sh := range m.Shards {
		switch {
		case held[sh] > 0 && up[sh] == held[sh]:
			st.Up++
		case up[sh] > 0:
			st.Degraded++
		default: // no holder up, or none at all
			st.Down++
		}
	}
	return st
}

// into returns a function that stores an answer in *dst if there was no
// error, and returns the error.
func into[T any](dst **T) func(T, error) error {
	return func(v T, err error) error {
		if err == nil {
			*dst = &v
		}
		return err
	}
}

// merge copies the parts part has into o.
func (o *RegionOverview) merge(part *RegionOverview) {
	o.Likes = cmp.Or(part.Likes, o.Likes)
	o.Counter = cmp.Or(part.Counter, o.Counter)
	o.Convergence = cmp.Or(part.Convergence, o.Convergence)
	o.Status = cmp.Or(part.Status, o.Status)
	o.Milestones = cmp.Or(part.Milestones, o.Milestones)
	o.Budget = cmp.Or(part.Budget, o.Budget)
	o.Shards = cmp.Or(part.Shards, o.Shards)
}

// links reads the link list from the first region that answers.
func (d *Dashboard) links(ctx context.Context) ([]api.Link, error) {
	var errs []error
	for i, reg := range d.cfg.Regions {
		rctx, cancel := context.WithTimeout(ctx, dashReadTimeout)
		v, err := d.regions[i].admin.Links(rctx)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", reg.Region, regionError(err)))
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
// first region that answers, passing its answer on.
func (d *Dashboard) setLink(w http.ResponseWriter, r *http.Request) {
	up, err := strconv.ParseBool(r.FormValue("up"))
	if err != nil {
		dashError(w, http.StatusBadRequest, "want up=true or up=false, got %q", r.FormValue("up"))
		return
	}
	var errs []error
	for i, reg := range d.cfg.Regions {
		ctx, cancel := context.WithTimeout(r.Context(), dashWriteTimeout)
		l, err := d.regions[i].admin.SetLink(ctx, r.PathValue("a"), r.PathValue("b"), up)
		cancel()
		if !answered(err) {
			errs = append(errs, fmt.Errorf("%s: %w", reg.Region, regionError(err)))
			continue
		}
		passOn(w, reg, l, err)
		return
	}
	dashError(w, http.StatusBadGateway, "no region answered: %v", strings.ReplaceAll(errors.Join(errs...).Error(), "\n", "; "))
}

// POST /api/like?region=us&item=post1[&user=alice]: a like at one region,
// by a random user if none is given.
func (d *Dashboard) like(w http.ResponseWriter, r *http.Request) {
	i, reg, ok := d.region(w, r)
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
	ctx, cancel := context.WithTimeout(r.Context(), dashWriteTimeout)
	defer cancel()
	l, err := d.regions[i].api.Like(ctx, item, user)
	passOn(w, reg, l, err)
}

// POST /api/incr?region=us&counter=views[&by=1]
func (d *Dashboard) incr(w http.ResponseWriter, r *http.Request) {
	i, reg, ok := d.region(w, r)
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
	ctx, cancel := context.WithTimeout(r.Context(), dashWriteTimeout)
	defer cancel()
	res, err := d.regions[i].api.Incr(ctx, key, by, client.IncrOptions{})
	passOn(w, reg, res, err)
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
	i, reg, ok := d.region(w, r)
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
				ctx, cancel := context.WithTimeout(r.Context(), dashWriteTimeout)
				_, err := d.regions[i].api.Like(ctx, item, randomUser())
				cancel()
				if err != nil {
					err = regionError(err)
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

// region finds the ?region= parameter's target, and its index in
// cfg.Regions, or answers 404. The parameter names a replica, or a region
// (its first replica): a sharded region has several.
func (d *Dashboard) region(w http.ResponseWriter, r *http.Request) (int, Target, bool) {
	name := r.FormValue("region")
	var names []string
	for i, reg := range d.cfg.Regions {
		if reg.Replica == name {
			return i, reg, true
		}
	}
	for i, reg := range d.cfg.Regions {
		if reg.Region == name {
			return i, reg, true
		}
		names = append(names, reg.Region)
	}
	dashError(w, http.StatusNotFound, "unknown region %q: regions are %s", name, strings.Join(names, ", "))
	return 0, Target{}, false
}

func randomUser() string { return fmt.Sprintf("dash-%012x", rand.Uint64()>>16) }

// answered says whether a region answered a call at all (err is nil or
// an HTTP error).
func answered(err error) bool { return err == nil || client.StatusCode(err) != 0 }

// statusError is a region's non-2xx answer.
type statusError struct {
	status int
	msg    string
}

func (e *statusError) Error() string { return e.msg }

// regionError describes a region's error for the page: a non-2xx answer
// by its status and tally's code and message (a *statusError), a call
// that reached no answer by its cause, without the URL (the page shows
// the region anyway).
func regionError(err error) error {
	var ce *client.Error
	if errors.As(err, &ce) {
		if ce.Code == "" {
			return &statusError{ce.Status, fmt.Sprintf("%d %s", ce.Status, http.StatusText(ce.Status))}
		}
		return &statusError{ce.Status, fmt.Sprintf("%d %s: %s", ce.Status, ce.Code, ce.Message)}
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return uerr.Err
	}
	return err
}

// passOn answers the page with a region's answer to an action: v, or
// the region's error with its status and code, or 502 if it did not
// answer.
func passOn(w http.ResponseWriter, reg Target, v any, err error) {
	var ce *client.Error
	switch {
	case err == nil:
		dashJSON(w, http.StatusOK, v)
	case errors.As(err, &ce) && ce.Code != "":
		dashJSON(w, ce.Status, api.Error{Error: ce.Message, Code: ce.Code})
	case errors.As(err, &ce):
		dashError(w, ce.Status, "%s: %v", reg.Region, regionError(err))
	default:
		dashError(w, http.StatusBadGateway, "%s: %v", reg.Region, regionError(err))
	}
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
