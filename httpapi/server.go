// Package httpapi serves tally's HTTP API for one replica: routes, JSON,
// validation, errors.
//
// Every response is JSON. Every error is {"error": "...", "code": "..."} with
// a stable machine code (see errors.go). Input is checked before it reaches
// the replica: ids are validated, bodies are size-limited and decoded
// strictly, so a malformed request gets a 4xx and never changes state
// (docs/architecture.md, Guarantees 9).
//
// The Server owns no goroutines and no listener: it is an http.Handler that
// package node mounts on an http.Server. It reads replication's state
// (peers, staleness, convergence) from the Replication in its
// Config, nil for a standalone replica, and milestones and numbering
// through Config hooks.
package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/mux"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/internal/base/authguard"
	"github.com/tally-dev/tally/internal/base/failpoint"
	"github.com/tally-dev/tally/internal/base/version"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/shard"
)

// Purchases runs a cashback wherever its keys are held
// (purchase.Coordinator).
type Purchases interface {
	Cashback(ctx context.Context, op region.Op) (region.Result, error)
}

// Config configures a Server.
type Config struct {
	// Replica answers every request. Required.
	Replica *region.Replica
	// Logger for request logs (Debug), handler errors and panics. Default: a
	// null logger.
	Logger hclog.Logger
	// Registry receives the HTTP metrics and is served at /metrics. Default:
	// a fresh registry (so /metrics shows only this Server's metrics).
	Registry *prometheus.Registry
	// MaxBodyBytes caps a request body; larger bodies get 413. Default 1 MiB.
	MaxBodyBytes int64
	// RequestTimeout bounds how long a write waits for its durable commit
	// before answering 503 "timeout". Default 10s.
	RequestTimeout time.Duration
	// WriteToken, if set, is required as `Authorization: Bearer <token>` on
	// write routes (likes, unlikes, increments). The admin token is accepted
	// there too. Default: writes are open. Each token setting may list
	// several tokens separated by spaces, all valid (for rotation).
	WriteToken string
	// AdminToken, if set, is required on routes wrapped with RequireAdmin.
	// Default: admin routes are open, but only on a listener that is not
	// Edge.Public, or with Edge.OpenAdmin.
	AdminToken string
	// ReadToken, if set, is required on every route but the write routes
	// (RequireWrite) and the public ones (Public: probes, metrics),
	// whatever its method (write and admin tokens are accepted too).
	// Default: reads are open.
	ReadToken string
	// Limits are the rate limits per route class (see Limit). Default:
	// none. SetLimits replaces them.
	Limits []Limit
	// TrustedProxies are the addresses (prefixes) of proxies in front of
	// the replica whose X-Forwarded-For names the client a rate limit
	// keys on. Default: none (the header is ignored).
	TrustedProxies []netip.Prefix
	// AuthGuard slows token guessing: a wrong bearer token takes from
	// its address's bucket, and an address that failed too often waits
	// before its token is checked, then is refused (internal/base/authguard).
	// The node shares one with RESP's AUTH. Default: one of this
	// Server's own.
	AuthGuard *authguard.Guard
	// Edge says how the listener is protected, for /v1/status: the HTTP
	// server is node's, not the Server's.
	Edge Edge
	// Version is reported by /v1/status. Default version.Version().
	Version string
	// Shards, in a sharded region, routes requests to the holders of
	// their key's shard and answers GET /v1/shards. Default: nil, this
	// replica holds every shard.
	Shards Shards
	// Purchases, in a sharded region, runs a cashback whose balances this
	// replica does not hold all three of (package purchase). Nil: such a
	// cashback is refused with shard_not_held.
	Purchases Purchases
	// Hot are the items split into parts (shard.Hot): a like goes to the
	// user's part, a read of the item sums them. Every replica of the
	// deployment must have the same. Default: none.
	Hot shard.Hot
	// Replication, if set, makes reads honest about peers (approx), adds
	// peers to /v1/status, gates /readyz on recovery and serves
	// /v1/convergence. Nil: a standalone replica.
	Replication Replication
	// Links, if set, serves /v1/admin/links (local deployments only).
	Links LinkAdmin
	// Replicas, in a local deployment, serves /v1/admin/replicas.
	Replicas ReplicaAdmin
	// ChaosClock, if set, serves PUT /v1/admin/chaos/clock, which offsets
	// the replica's wall clock. Only a chaos build sets it.
	ChaosClock func(offset time.Duration)
	// Failpoints arms the API's share of two deliberate bugs of the chaos
	// suite (failpoints.go): ack-unheld-writes and split-user-two-parts.
	// Honoured only in a chaos build; nil, the default and what production
	// passes, arms none. One opaque handle, not a field per bug: the
	// server is built from its Config alone.
	Failpoints *failpoint.Set
	// Milestones, if set, serves GET /v1/milestones.
	Milestones MilestoneFeed
	// Numbering, if set, adds like numbering to /v1/status.
	Numbering func() []api.SequenceStatus
	// RESP, if set, adds the Redis protocol listener to /v1/status.
	RESP func() *api.RESPStatus
	// Events, if set, adds the event log's publishing to /v1/status.
	Events func() *api.EventLog
	// Sequence, if set, serves GET /v1/sequences/{name}: the allocator's
	// state of a sequence, read from its KV now.
	Sequence func(ctx context.Context, name string) (*api.Sequence, error)
	// DataDirs are the data directories of the deployment this process
	// knows: this replica's, and in a local deployment the root holding
	// every replica's. POST /v1/admin/backup refuses a dir inside any of
	// them, symlinks resolved. Default: none.
	DataDirs []string
}

// Edge is how the replica's listener is protected.
type Edge struct {
	TLS            bool // HTTPS
	ClientCerts    bool // a client certificate from the configured CA is required
	InsecureListen bool // the operator opted in to a non-loopback listener without TLS or a write token
	// Public: the listener reaches beyond this host. Without an admin
	// token, its admin routes then answer 401 unless OpenAdmin is set,
	// and /v1/status shows its auth posture to no caller.
	Public bool
	// OpenAdmin: the operator opted in to admin routes without a token on
	// a public listener (insecure_open_admin).
	OpenAdmin bool
}

func (c *Config) ensureDefaults() {
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
	if c.AuthGuard == nil {
		c.AuthGuard = authguard.New(authguard.Config{})
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = frontdoor.DefaultMaxBodyBytes
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = frontdoor.DefaultRequestTimeout
	}
	if c.Version == "" {
		c.Version = version.Version()
	}
}

// Validate reports every problem with c at once.
func (c Config) Validate() error {
	var errs []error
	if c.Replica == nil {
		errs = append(errs, errors.New("httpapi: Replica is required"))
	}
	if c.MaxBodyBytes < 0 {
		errs = append(errs, errors.New("httpapi: MaxBodyBytes < 0"))
	}
	if c.RequestTimeout < 0 {
		errs = append(errs, errors.New("httpapi: RequestTimeout < 0"))
	}
	return errors.Join(errs...)
}

// Server is the HTTP API of one replica. It implements http.Handler and is
// safe for concurrent use.
type Server struct {
	cfg     Config
	rep     *region.Replica
	log     hclog.Logger
	router  *mux.Router
	metrics *httpMetrics
	started time.Time
	// eventsPool recycles POST /v1/events working memory (*eventsBatch).
	eventsPool *sync.Pool
	// auth holds the tokens of each role; SetTokens swaps it.
	auth atomic.Pointer[authTokens]
	// limiter holds the rate limits; SetLimits swaps it.
	limiter      atomic.Pointer[limiter]
	limitMetrics *limitMetrics
	// openapi is the API's OpenAPI document, served at /v1/openapi.json:
	// built from the route table on the first request (a few ms, which
	// most servers never need to spend), so it is the table of this binary
	// (and equal to docs/openapi.json, which a test holds to it).
	openapi struct {
		once sync.Once
		doc  []byte
		err  error
	}
	// draining is set by SetDraining: /readyz fails so load balancers
	// move away before the listener closes.
	draining atomic.Bool
}

// authTokens are the tokens of each role (Config.ReadToken, ...), split.
type authTokens struct {
	read, write, admin [][]byte
}

// New builds the Server and registers its metrics on cfg.Registry.
func New(cfg Config) (*Server, error) {
	cfg.ensureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newHTTPMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	lm, err := newLimitMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:          cfg,
		rep:          cfg.Replica,
		log:          cfg.Logger.Named("http"),
		metrics:      m,
		started:      time.Now(),
		eventsPool:   newEventsPool(),
		limitMetrics: lm,
	}
	s.SetTokens(cfg.ReadToken, cfg.WriteToken, cfg.AdminToken)
	if err := s.SetLimits(cfg.Limits); err != nil {
		return nil, err
	}
	s.router = s.newRouter()
	return s, nil
}

// Handler adapts a handler that returns an error to http.Handler: a nil
// error means the handler wrote its response; otherwise the error becomes a
// JSON error response (see errors.go for the mapping). Later layers use it
// so their routes answer errors the same way.
func (s *Server) Handler(h func(http.ResponseWriter, *http.Request) error) http.Handler {
	return handlerFunc(h).with(s)
}

// ServeHTTP serves one request through the recovery, logging and metrics
// wrapper and then the router.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.instrument(w, r, s.router)
}

// seg is the pattern of one path variable. It admits empty segments so that
// "/v1/likes//bob" reaches the handler and gets a 400 naming the empty id
// instead of a bare 404.
const seg = `:[^/]*}`

func (s *Server) newRouter() *mux.Router {
	rt := mux.NewRouter()
	// Match on the escaped path and unescape each variable ourselves, so
	// "a%2Fb" is one (invalid) id rather than two path segments, and do not
	// clean paths: a 301 redirect of a PUT helps nobody.
	rt.UseEncodedPath()
	rt.SkipClean(true)
	rt.NotFoundHandler = s.Handler(func(http.ResponseWriter, *http.Request) error {
		return errNotFound
	})
	rt.MethodNotAllowedHandler = s.Handler(s.methodNotAllowed)
	rt.Use(s.routeLabel, s.requireRead, s.limitClient, s.requireJSONBody, s.clientTimeout, s.servedBy)

	item, user, key := "{item"+seg, "{user"+seg, "{key"+seg
	w := s.RequireWrite

	// The read of a like count first: the router tries routes in order,
	// each a regexp, and this is the most frequent request. No other
	// route's path has one segment after /v1/likes/, so no other route
	// can match what it matches.
	rt.Handle("/v1/likes/"+item, s.Handler(s.getLikes)).Methods(http.MethodGet)

	// Windows first: a GET of /v1/likes/{item}/window is the window, not
	// the like of a user named "window".
	rt.Handle("/v1/likes/"+item+"/window", s.Handler(s.getKeyWindow(region.KindLikes, "item"))).Methods(http.MethodGet)
	rt.Handle("/v1/likes/"+item+"/series", s.Handler(s.getKeySeries(region.KindLikes, "item"))).Methods(http.MethodGet)
	rt.Handle("/v1/counters/"+key+"/window", s.Handler(s.getKeyWindow(region.KindCounters, "key"))).Methods(http.MethodGet)
	rt.Handle("/v1/counters/"+key+"/series", s.Handler(s.getKeySeries(region.KindCounters, "key"))).Methods(http.MethodGet)
	rt.Handle("/v1/window", s.Handler(s.getWindow)).Methods(http.MethodGet)
	rt.Handle("/v1/series", s.Handler(s.getSeries)).Methods(http.MethodGet)
	rt.Handle("/v1/trending", s.Handler(s.getTrending)).Methods(http.MethodGet)

	rt.Handle("/v1/likes/"+item+"/"+user, w(s.Handler(s.putLike))).Methods(http.MethodPut)
	rt.Handle("/v1/likes/"+item+"/"+user, w(s.Handler(s.deleteLike))).Methods(http.MethodDelete)
	rt.Handle("/v1/likes/"+item+"/"+user, s.Handler(s.getLiked)).Methods(http.MethodGet)
	rt.Handle("/v1/likes/"+item+"/"+user+"/history", s.Handler(s.getHistory)).Methods(http.MethodGet)
	rt.Handle("/v1/likes/"+item+"/"+user+"/toggle", w(s.Handler(s.toggleLike))).Methods(http.MethodPost)
	rt.Handle("/v1/likes", w(s.Handler(s.postLike))).Methods(http.MethodPost)
	rt.Handle("/v1/likes/"+item, w(s.Handler(s.deleteLikeBody))).Methods(http.MethodDelete)
	rt.Handle("/v1/likers/"+item, s.Handler(s.getLikers)).Methods(http.MethodGet)
	rt.Handle("/v1/users/"+user+"/likes", s.Handler(s.getUserLikes)).Methods(http.MethodGet)
	rt.Handle("/v1/feed", s.Handler(s.feed)).Methods(http.MethodGet, http.MethodPost)

	rt.Handle("/v1/counters/"+key+"/incr", w(s.Handler(s.incr))).Methods(http.MethodPost)
	rt.Handle("/v1/counters/"+key, s.Handler(s.getCounter)).Methods(http.MethodGet)
	rt.Handle("/v1/events", w(s.Handler(s.postEvents))).Methods(http.MethodPost)
	rt.Handle("/v1/uniques/"+key, w(s.Handler(s.postUniques))).Methods(http.MethodPost)
	rt.Handle("/v1/uniques/"+key, s.Handler(s.getUniques)).Methods(http.MethodGet)
	rt.Handle("/v1/uniques", s.Handler(s.getUniquesUnion)).Methods(http.MethodGet)
	rt.Handle("/v1/budgets/"+key+"/grant", w(s.Handler(s.grantBudget))).Methods(http.MethodPost)
	rt.Handle("/v1/budgets/"+key+"/spend", w(s.Handler(s.spendBudget))).Methods(http.MethodPost)
	rt.Handle("/v1/budgets/"+key, s.Handler(s.getBudget)).Methods(http.MethodGet)
	rt.Handle("/v1/cashback", w(s.Handler(s.postCashback))).Methods(http.MethodPost)

	rt.Handle("/healthz", s.Public(s.Handler(s.healthz))).Methods(http.MethodGet, http.MethodHead)
	rt.Handle("/readyz", s.Public(s.Handler(s.readyz))).Methods(http.MethodGet, http.MethodHead)
	rt.Handle("/v1/status", s.Handler(s.status)).Methods(http.MethodGet)
	rt.Handle("/v1/convergence", s.Handler(s.convergence)).Methods(http.MethodGet)
	rt.Handle("/v1/shards", s.Handler(s.getShards)).Methods(http.MethodGet)
	rt.Handle("/v1/milestones", s.Handler(s.getMilestones)).Methods(http.MethodGet)
	rt.Handle("/v1/sequences/{name"+seg, s.Handler(s.getSequence)).Methods(http.MethodGet)
	rt.Handle("/v1/audit", s.RequireAdmin(s.Handler(s.getAudit))).Methods(http.MethodGet)
	rt.Handle("/v1/blocks/"+user, s.RequireAdmin(s.Handler(s.putBlock))).Methods(http.MethodPut)
	rt.Handle("/v1/blocks/"+user, s.RequireAdmin(s.Handler(s.deleteBlock))).Methods(http.MethodDelete)
	rt.Handle("/v1/blocks/"+user, s.RequireAdmin(s.Handler(s.getBlock))).Methods(http.MethodGet)
	rt.Handle("/v1/blocks", s.RequireAdmin(s.Handler(s.getBlocks))).Methods(http.MethodGet)
	rt.Handle("/v1/types/{name"+seg, s.RequireAdmin(s.Handler(s.putType))).Methods(http.MethodPut)
	rt.Handle("/v1/types/{name"+seg, s.Handler(s.getType)).Methods(http.MethodGet)
	rt.Handle("/v1/types/{name"+seg+"/total", s.Handler(s.getTypeTotal)).Methods(http.MethodGet)
	rt.Handle("/v1/types/{name"+seg+"/window", s.Handler(s.getTypeWindow)).Methods(http.MethodGet)
	rt.Handle("/v1/types", s.Handler(s.getTypes)).Methods(http.MethodGet)
	rt.Handle("/v1/admin/budgets/handoff", s.RequireAdmin(s.Handler(s.putHandoff))).Methods(http.MethodPut)
	rt.Handle("/v1/admin/budgets/handoff", s.RequireAdmin(s.Handler(s.getHandoff))).Methods(http.MethodGet)
	rt.Handle("/v1/admin/budgets/handoff", s.RequireAdmin(s.Handler(s.deleteHandoff))).Methods(http.MethodDelete)
	rt.Handle("/v1/admin/backup", s.RequireAdmin(s.Handler(s.postBackup))).Methods(http.MethodPost)
	rt.Handle("/v1/admin/import", s.RequireAdmin(s.Handler(s.postImport))).Methods(http.MethodPost)
	rt.Handle("/v1/admin/links", s.RequireAdmin(s.Handler(s.getLinks))).Methods(http.MethodGet)
	rt.Handle("/v1/admin/replicas", s.RequireAdmin(s.Handler(s.getReplicas))).Methods(http.MethodGet)
	rt.Handle("/v1/admin/replicas/{replica"+seg, s.RequireAdmin(s.Handler(s.putReplica))).Methods(http.MethodPut)
	rt.Handle("/v1/admin/shards/{region"+seg, s.RequireAdmin(s.Handler(s.putShards))).Methods(http.MethodPut)
	rt.Handle("/v1/admin/links/{a"+seg+"/{b"+seg, s.RequireAdmin(s.Handler(s.putLink))).Methods(http.MethodPut)
	if s.cfg.ChaosClock != nil {
		rt.Handle("/v1/admin/chaos/clock", s.RequireAdmin(s.Handler(s.putChaosClock))).Methods(http.MethodPut)
	}
	rt.Handle("/v1/openapi.json", s.Handler(s.getOpenAPI)).Methods(http.MethodGet)
	rt.Handle("/metrics", s.Public(promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{
		ErrorLog: s.log.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Warn}),
	}))).Methods(http.MethodGet)
	return rt
}

// Route is one route the Server serves: a method and a path template
// whose variables are named without their patterns, e.g. GET
// "/v1/likes/{item}/{user}".
type Route struct {
	Method, Path string
}

// routeVar matches a path variable of a router template, with its pattern.
var routeVar = regexp.MustCompile(`\{([^}:]+)(:[^}]*)?\}`)

// Routes lists every route the router serves, in registration order, read
// from the router itself: a route added to newRouter (or through
// Router() in a test) is listed without being written down twice.
func (s *Server) Routes() ([]Route, error) {
	var out []Route
	err := s.router.Walk(func(rt *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		tpl, err := rt.GetPathTemplate()
		if err != nil {
			return err
		}
		methods, err := rt.GetMethods()
		if err != nil {
			return fmt.Errorf("httpapi: route %s has no methods: %w", tpl, err)
		}
		for _, m := range methods {
			out = append(out, Route{Method: m, Path: routeVar.ReplaceAllString(tpl, "{$1}")})
		}
		return nil
	})
	return out, err
}

// allowedMethods lists the methods some route accepts for r's path, for the
// Allow header of a 405. It asks the router itself, so routes added later
// through Router() are included.
func (s *Server) allowedMethods(r *http.Request) []string {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPut, http.MethodPost, http.MethodDelete, http.MethodPatch} {
		probe := r.Clone(r.Context())
		probe.Method = m
		var match mux.RouteMatch
		if s.router.Match(probe, &match) && match.MatchErr == nil {
			allow = append(allow, m)
		}
	}
	return allow
}
