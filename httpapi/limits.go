package httpapi

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tally-dev/tally/frontdoor"
	"golang.org/x/time/rate"
)

// Abuse limits: token buckets per route class, keyed by client (its
// bearer token, else its address) and, on the like routes, by user. Each
// replica keeps its own token buckets: a client spread over R regions gets R
// times the rate.

// Limit is the token buckets of one route class. A rate of 0 is no limit.
type Limit struct {
	// Class is frontdoor.ClassWrite, frontdoor.ClassRead or frontdoor.ClassScan.
	Class string
	// Client is each client's rate, requests per second (for POST
	// /v1/events, events per second); ClientBurst how many it may send at
	// once (default: one second's worth, at least 1).
	Client      float64
	ClientBurst int
	// User is each user's rate on the like routes (PUT, POST and DELETE of
	// a like), which name the user; UserBurst as ClientBurst.
	User      float64
	UserBurst int
}

// Validate reports what is wrong with l.
func (l Limit) Validate() error {
	switch l.Class {
	case frontdoor.ClassWrite, frontdoor.ClassRead, frontdoor.ClassScan:
	default:
		return fmt.Errorf("limit class %q: want %s", l.Class, strings.Join(frontdoor.LimitClasses, ", "))
	}
	if !(l.Client >= 0 && l.User >= 0) || math.IsInf(l.Client, 0) || math.IsInf(l.User, 0) || l.ClientBurst < 0 || l.UserBurst < 0 {
		return fmt.Errorf("limit %s: rates and bursts must be finite and >= 0", l.Class)
	}
	if l.User > 0 && l.Class != frontdoor.ClassWrite {
		return fmt.Errorf("limit %s: per-user limits apply to the like routes, class %s", l.Class, frontdoor.ClassWrite)
	}
	return nil
}

// burst is the token-bucket size for a rate: the given burst, else one second's
// worth, at least 1.
func burst(r float64, b int) int {
	if b > 0 {
		return b
	}
	return max(1, int(math.Ceil(r)))
}

// maxTokenBuckets bounds each token-bucket table (a token bucket costs
// about 150 bytes with its key, so a full table about 40 MB). When it is
// full, token buckets that are full again (idle long enough that
// forgetting them changes nothing: a second or so at the usual bursts)
// are dropped; if none is, new clients share one token bucket until some are. Only more distinct
// clients or users than this within a refill time meet the shared one.
const maxTokenBuckets = 1 << 18

// tokenBuckets is one table of token buckets (a class, by client or by user).
type tokenBuckets struct {
	rate  rate.Limit
	burst int
	max   int // keys held at most (maxTokenBuckets)
	gauge prometheus.Gauge

	mu        sync.Mutex
	m         map[string]*rate.Limiter
	overflow  *rate.Limiter // shared by new keys while m is full
	lastSweep time.Time
}

func newTokenBuckets(r float64, b int, gauge prometheus.Gauge) *tokenBuckets {
	bs := &tokenBuckets{rate: rate.Limit(r), burst: burst(r, b), max: maxTokenBuckets, gauge: gauge, m: map[string]*rate.Limiter{}}
	bs.overflow = rate.NewLimiter(bs.rate, bs.burst)
	gauge.Set(0)
	return bs
}

// take takes n tokens (capped at the burst, so a batch larger than the
// burst can pass on a full token bucket) for key. It returns 0, or how long
// until the tokens will be there (nothing taken).
func (bs *tokenBuckets) take(key string, n int, now time.Time) time.Duration {
	n = min(n, bs.burst)
	bs.mu.Lock()
	defer bs.mu.Unlock()
	lim := bs.m[key]
	if lim == nil {
		if len(bs.m) >= bs.max {
			bs.sweep(now)
		}
		if len(bs.m) >= bs.max {
			lim = bs.overflow
		} else {
			lim = rate.NewLimiter(bs.rate, bs.burst)
			bs.m[key] = lim
			bs.gauge.Set(float64(len(bs.m)))
		}
	}
	res := lim.ReserveN(now, n)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return d
	}
	return 0
}

// sweep drops full token buckets, at most once a second (a table full of busy
// clients is not scanned on every new one).
func (bs *tokenBuckets) sweep(now time.Time) {
	if now.Sub(bs.lastSweep) < time.Second {
		return
	}
	bs.lastSweep = now
	for k, lim := range bs.m {
		if lim.TokensAt(now) >= float64(bs.burst) {
			delete(bs.m, k)
		}
	}
	bs.gauge.Set(float64(len(bs.m)))
}

// limiter is one configuration of limits: the tables of each class.
// SetLimits swaps it whole, so a reload starts every token bucket full.
type limiter struct {
	limits map[string]Limit
	client map[string]*tokenBuckets
	user   map[string]*tokenBuckets
}

// limitMetrics are the limiter's metrics.
type limitMetrics struct {
	limited *prometheus.CounterVec // by class, by (client | user)
	tracked *prometheus.GaugeVec   // token buckets held, by class, by
}

func newLimitMetrics(reg prometheus.Registerer) (*limitMetrics, error) {
	m := &limitMetrics{
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_http_limited_total",
			Help: "Requests refused with 429 by a rate limit, by route class and by what the token bucket is keyed on (client or user).",
		}, []string{"class", "by"}),
		tracked: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tally_http_limit_buckets",
			Help: "Token buckets held by the rate limits, by route class and key (client or user).",
		}, []string{"class", "by"}),
	}
	for _, c := range []prometheus.Collector{m.limited, m.tracked} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("httpapi: register limit metrics: %w", err)
		}
	}
	return m, nil
}

func newLimiter(limits []Limit, m *limitMetrics) (*limiter, error) {
	l := &limiter{limits: map[string]Limit{}, client: map[string]*tokenBuckets{}, user: map[string]*tokenBuckets{}}
	for _, lim := range limits {
		if err := lim.Validate(); err != nil {
			return nil, fmt.Errorf("httpapi: %w", err)
		}
		if _, dup := l.limits[lim.Class]; dup {
			return nil, fmt.Errorf("httpapi: limit %s given twice", lim.Class)
		}
		l.limits[lim.Class] = lim
		if lim.Client > 0 {
			l.client[lim.Class] = newTokenBuckets(lim.Client, lim.ClientBurst, m.tracked.WithLabelValues(lim.Class, "client"))
		}
		if lim.User > 0 {
			l.user[lim.Class] = newTokenBuckets(lim.User, lim.UserBurst, m.tracked.WithLabelValues(lim.Class, "user"))
		}
	}
	return l, nil
}

// SetLimits replaces the rate limits (a reload). Every token bucket starts full.
func (s *Server) SetLimits(limits []Limit) error {
	l, err := newLimiter(limits, s.limitMetrics)
	if err != nil {
		return err
	}
	for _, c := range frontdoor.LimitClasses { // a class no longer limited holds no token buckets
		// Every class's refusals are exported from 0, so that a rate over
		// them is defined before the first 429.
		s.limitMetrics.limited.WithLabelValues(c, "client")
		s.limitMetrics.limited.WithLabelValues(c, "user")
		if l.client[c] == nil {
			s.limitMetrics.tracked.WithLabelValues(c, "client").Set(0)
		}
		if l.user[c] == nil {
			s.limitMetrics.tracked.WithLabelValues(c, "user").Set(0)
		}
	}
	s.limiter.Store(l)
	return nil
}

// Limits are the rate limits in force.
func (s *Server) Limits() []Limit {
	l := s.limiter.Load()
	var out []Limit
	for _, c := range frontdoor.LimitClasses {
		if lim, ok := l.limits[c]; ok {
			lim.ClientBurst, lim.UserBurst = 0, 0
			if b := l.client[c]; b != nil {
				lim.ClientBurst = b.burst
			}
			if b := l.user[c]; b != nil {
				lim.UserBurst = b.burst
			}
			out = append(out, lim)
		}
	}
	return out
}

// scanRoutes are the route templates of class scan (any method).
var scanRoutes = map[string]bool{
	"/v1/likes/{item}/window": true, "/v1/likes/{item}/series": true,
	"/v1/counters/{key}/window": true, "/v1/counters/{key}/series": true,
	"/v1/window": true, "/v1/series": true, "/v1/trending": true,
	"/v1/likers/{item}": true, "/v1/users/{user}/likes": true, "/v1/feed": true,
	"/v1/likes/{item}/{user}/history": true, "/v1/uniques": true, "/v1/audit": true,
	"/v1/convergence": true, "/v1/milestones": true,
}

// routeClass is the limit class of a request to a route template, "" for
// routes no limit applies to: probes, metrics, the admin routes.
func routeClass(method, route string) string {
	switch {
	case !strings.HasPrefix(route, "/v1/"), strings.HasPrefix(route, "/v1/admin/"),
		route == "/v1/blocks", strings.HasPrefix(route, "/v1/blocks/"):
		return "" // an operator's routes, behind the admin token
	case scanRoutes[route]:
		return frontdoor.ClassScan
	case method == http.MethodGet || method == http.MethodHead:
		return frontdoor.ClassRead
	default:
		return frontdoor.ClassWrite
	}
}

// clientKey names the client a request's token buckets belong to: its bearer
// token if it sent one (every holder of a token is one client), else its
// address. A request from a trusted proxy (Config.TrustedProxies) is
// keyed by the address the proxy says it came from: the rightmost entry
// of X-Forwarded-For that is not itself a trusted proxy. Without trusted
// proxies the header is ignored, since any client can send it.
func (s *Server) clientKey(r *http.Request) string {
	if t, ok := bearer(r); ok {
		return tokenClient(t)
	}
	return addrClient(s.clientAddr(r))
}

// clientAddr is the address (host) a request came from: its peer's, or
// for a trusted proxy's request, the address the proxy says it came from
// (see clientKey).
func (s *Server) clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if len(s.cfg.TrustedProxies) > 0 && s.trusted(host) {
		hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
		for i := len(hops) - 1; i >= 0; i-- {
			hop := strings.TrimSpace(hops[i])
			if _, err := netip.ParseAddr(hop); err != nil {
				break // a malformed hop: trust nothing further left
			}
			host = hop
			if !s.trusted(hop) {
				break
			}
		}
	}
	return host
}

// tokenClient and addrClient are the token-bucket keys of a client known
// by its token and by its address (a host).
func tokenClient(token string) string { return "t " + token }
func addrClient(host string) string   { return "a " + host }

// trusted reports whether addr is one of Config.TrustedProxies.
func (s *Server) trusted(addr string) bool {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	a = a.Unmap()
	for _, p := range s.cfg.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// limited answers 429 with Retry-After (whole seconds, rounded up).
func (s *Server) limited(class, by string, wait time.Duration) error {
	s.limitMetrics.limited.WithLabelValues(class, by).Inc()
	secs := int(math.Ceil(wait.Seconds()))
	return &apiError{Status: http.StatusTooManyRequests, Code: frontdoor.CodeRateLimited, RetryAfter: max(1, secs),
		Msg: fmt.Sprintf("over this replica's %s limit per %s; retry in %d s", class, by, max(1, secs))}
}

// limitClient is router middleware: it takes one token from the client's
// token bucket of the route's class, or answers 429.
func (s *Server) limitClient(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l := s.limiter.Load()
		if len(l.client) > 0 {
			class := routeClass(r.Method, s.metrics.label(mux.CurrentRoute(r)))
			if bs := l.client[class]; bs != nil {
				if wait := bs.take(s.clientKey(r), 1, time.Now()); wait > 0 {
					s.writeError(w, r, s.limited(class, "client", wait))
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// limitEvents takes the rest of a batch's n events from the client's
// write token bucket (the request took one). A batch costs at most the
// whole token bucket, so one larger than it passes on a full one.
func (s *Server) limitEvents(r *http.Request, n int) error {
	if bs := s.limiter.Load().client[frontdoor.ClassWrite]; bs != nil && min(n, bs.burst) > 1 {
		if wait := bs.take(s.clientKey(r), min(n, bs.burst)-1, time.Now()); wait > 0 {
			return s.limited(frontdoor.ClassWrite, "client", wait)
		}
	}
	return nil
}

// LimitClient takes one request of class (frontdoor.ClassWrite, frontdoor.ClassRead,
// frontdoor.ClassScan) from a client's token bucket, as the HTTP API does for each
// request: another front door of the replica (package resp) calls it per
// command, so a client's requests over both share one limit. The client
// is its token if it authenticated with one (every holder of a token is
// one client, as over HTTP), else its address (host:port or host; the
// port is dropped). The error, code rate_limited, says when to retry.
func (s *Server) LimitClient(class, token, addr string) error {
	bs := s.limiter.Load().client[class]
	if bs == nil {
		return nil
	}
	key := tokenClient(token)
	if token == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		key = addrClient(host)
	}
	if wait := bs.take(key, 1, time.Now()); wait > 0 {
		return s.limited(class, "client", wait)
	}
	return nil
}

// LimitUser takes one write of user from the per-user write limit, as a
// like or unlike over HTTP does: another front door of the replica
// (package resp) calls it so a user's likes share one limit. The error,
// code rate_limited, says when to retry (Describe).
func (s *Server) LimitUser(user string) error { return s.limitUser(user) }

// limitUser takes a token from user's write token bucket, or returns a 429.
func (s *Server) limitUser(user string) error {
	if bs := s.limiter.Load().user[frontdoor.ClassWrite]; bs != nil {
		if wait := bs.take(user, 1, time.Now()); wait > 0 {
			return s.limited(frontdoor.ClassWrite, "user", wait)
		}
	}
	return nil
}
