package httpapi

import (
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tally-dev/tally/frontdoor"
)

// slow is a rate so low that no token bucket refills during a test: a test
// sees exactly its burst.
const slow = 0.001

func limited(t *testing.T, r resp, by string) {
	t.Helper()
	r.isError(t, http.StatusTooManyRequests, frontdoor.CodeRateLimited)
	secs, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || secs < 1 {
		t.Fatalf("Retry-After %q: want whole seconds >= 1", r.header.Get("Retry-After"))
	}
	if !strings.Contains(r.raw, "per "+by) {
		t.Fatalf("429 does not say it is per %s: %s", by, r.raw)
	}
}

func TestClientOverLimitIsRefusedWhileOthersAreServed(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, envOpts{reg: reg, api: func(c *Config) {
		c.Limits = []Limit{{Class: frontdoor.ClassWrite, Client: slow, ClientBurst: 3}}
	}})
	for range 3 {
		e.do("POST", "/v1/counters/c/incr", "", "Authorization", "Bearer alice-app").ok(t)
	}
	r := e.do("POST", "/v1/counters/c/incr", "", "Authorization", "Bearer alice-app")
	limited(t, r, "client")
	if secs, _ := strconv.Atoi(r.header.Get("Retry-After")); secs < 900 {
		t.Fatalf("Retry-After %d s: one token at %v/s takes about %v s", secs, slow, 1/slow)
	}
	// Another client (another token, or no token: the address) is served.
	e.do("POST", "/v1/counters/c/incr", "", "Authorization", "Bearer bob-app").ok(t)
	e.do("POST", "/v1/counters/c/incr", "").ok(t)
	// Reads are another class, unlimited here; so are probes.
	e.do("GET", "/v1/counters/c", "", "Authorization", "Bearer alice-app").ok(t)
	e.do("GET", "/readyz", "", "Authorization", "Bearer alice-app").ok(t)
	if got := e.counter("c"); got != 5 {
		t.Fatalf("counter %d, want 5: the refused increment must not apply", got)
	}
	if got := testutil.ToFloat64(e.srv.limitMetrics.limited.WithLabelValues(frontdoor.ClassWrite, "client")); got != 1 {
		t.Fatalf("tally_http_limited_total{write,client} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(e.srv.limitMetrics.tracked.WithLabelValues(frontdoor.ClassWrite, "client")); got != 3 {
		t.Fatalf("token buckets held %v, want 3 (alice-app, bob-app, the address)", got)
	}
}

func TestUserOverLimitIsRefusedOnEveryLikeRoute(t *testing.T) {
	e := newEnv(t, envOpts{api: func(c *Config) {
		c.Limits = []Limit{{Class: frontdoor.ClassWrite, User: slow, UserBurst: 4}}
	}})
	e.do("PUT", "/v1/likes/p1/alice", "").ok(t)
	e.do("DELETE", "/v1/likes/p1/alice", "").ok(t)
	e.do("POST", "/v1/likes", `{"videoId":"p2","userId":"alice"}`).ok(t)
	e.do("DELETE", "/v1/likes/p2", `{"userId":"alice"}`).ok(t)
	for _, q := range []req{
		{method: "PUT", path: "/v1/likes/p3/alice"},
		{method: "POST", path: "/v1/likes", body: strings.NewReader(`{"videoId":"p3","userId":"alice"}`)},
		{method: "DELETE", path: "/v1/likes/p3", body: strings.NewReader(`{"userId":"alice"}`)},
	} {
		limited(t, e.send(q), "user")
	}
	e.do("PUT", "/v1/likes/p3/bob", "").ok(t) // same client, another user
	if n, _ := e.rep.Likes().Count("p3"); n.Value != 1 {
		t.Fatalf("p3 has %d likes, want 1 (bob's)", n.Value)
	}
}

func TestEventBatchTakesOneTokenPerEvent(t *testing.T) {
	e := newEnv(t, envOpts{api: func(c *Config) {
		c.Limits = []Limit{{Class: frontdoor.ClassWrite, Client: slow, ClientBurst: 10}}
	}})
	batch := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteString(`{"type":"incr","key":"k","by":1}` + "\n")
		}
		return b.String()
	}
	e.do("POST", "/v1/events", batch(8), "Content-Type", "application/x-ndjson").ok(t)
	limited(t, e.do("POST", "/v1/events", batch(5), "Content-Type", "application/x-ndjson"), "client")
	e.do("POST", "/v1/events", batch(1), "Content-Type", "application/x-ndjson").ok(t)
	if got := e.counter("k"); got != 9 {
		t.Fatalf("counter %d, want 9: the refused batch must apply nothing", got)
	}
	// A batch larger than the whole token bucket still passes on a full one.
	e.srv.SetLimits([]Limit{{Class: frontdoor.ClassWrite, Client: slow, ClientBurst: 10}})
	e.do("POST", "/v1/events", batch(30), "Content-Type", "application/x-ndjson").ok(t)
}

func TestScanClassAndReload(t *testing.T) {
	e := newEnv(t, envOpts{api: func(c *Config) {
		c.Limits = []Limit{{Class: frontdoor.ClassScan, Client: slow, ClientBurst: 1}}
	}})
	e.do("GET", "/v1/trending", "").ok(t)
	limited(t, e.do("GET", "/v1/trending", ""), "client")
	limited(t, e.do("GET", "/v1/users/alice/likes", ""), "client")
	for range 5 { // a lookup is class read, unlimited here
		e.do("GET", "/v1/counters/c", "").ok(t)
	}
	st := e.do("GET", "/v1/status", "").ok(t)
	if got := fmt.Sprint(st["edge"].(map[string]any)["limits"]); got != "[map[class:scan client:0.001 client_burst:1]]" {
		t.Fatalf("status edge.limits: %s", got)
	}
	// A reload replaces the limits, and every token bucket starts full.
	if err := e.srv.SetLimits([]Limit{{Class: frontdoor.ClassRead, Client: slow, ClientBurst: 2}}); err != nil {
		t.Fatal(err)
	}
	e.do("GET", "/v1/trending", "").ok(t)
	e.do("GET", "/v1/counters/c", "").ok(t)
	e.do("GET", "/v1/likes/p", "").ok(t)
	limited(t, e.do("GET", "/v1/status", ""), "client")
	if err := e.srv.SetLimits(nil); err != nil {
		t.Fatal(err)
	}
	e.do("GET", "/v1/status", "").ok(t)
}

func TestLimitValidation(t *testing.T) {
	for _, l := range []Limit{
		{Class: "writes", Client: 1},
		{Class: frontdoor.ClassWrite, Client: -1},
		{Class: frontdoor.ClassWrite, Client: math.Inf(1)},
		{Class: frontdoor.ClassWrite, Client: math.NaN()},
		{Class: frontdoor.ClassWrite, Client: 1, ClientBurst: -1},
		{Class: frontdoor.ClassRead, User: 1},
	} {
		if err := l.Validate(); err == nil {
			t.Errorf("%+v: no error", l)
		}
	}
	e := newEnv(t, envOpts{})
	if err := e.srv.SetLimits([]Limit{{Class: frontdoor.ClassWrite, Client: 1}, {Class: frontdoor.ClassWrite, User: 1}}); err == nil {
		t.Error("a class given twice: no error")
	}
	if err := (Limit{Class: frontdoor.ClassScan, Client: 2.5}).Validate(); err != nil {
		t.Errorf("a valid limit: %v", err)
	}
}

func TestRouteClasses(t *testing.T) {
	for _, c := range []struct{ method, route, want string }{
		{"PUT", "/v1/likes/{item}/{user}", frontdoor.ClassWrite},
		{"POST", "/v1/events", frontdoor.ClassWrite},
		{"POST", "/v1/budgets/{key}/spend", frontdoor.ClassWrite},
		{"GET", "/v1/likes/{item}", frontdoor.ClassRead},
		{"GET", "/v1/status", frontdoor.ClassRead},
		{"GET", "/v1/series", frontdoor.ClassScan},
		{"POST", "/v1/feed", frontdoor.ClassScan},
		{"GET", "/v1/audit", frontdoor.ClassScan},
		{"PUT", "/v1/admin/links/{a}/{b}", ""},
		{"PUT", "/v1/blocks/{user}", ""},
		{"GET", "/v1/blocks", ""},
		{"GET", "/metrics", ""},
		{"GET", "/readyz", ""},
		{"GET", unmatched, ""},
	} {
		if got := routeClass(c.method, c.route); got != c.want {
			t.Errorf("%s %s: class %q, want %q", c.method, c.route, got, c.want)
		}
	}
}

// TestTokenBucketTableStaysBounded fills a small table: full token buckets
// are forgotten, and while none is, new keys share one token bucket.
func TestTokenBucketTableStaysBounded(t *testing.T) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"})
	bs := newTokenBuckets(1, 1, g)
	bs.max = 3
	now := time.Unix(1000, 0)
	for _, k := range []string{"a", "b", "c"} {
		if w := bs.take(k, 1, now); w != 0 {
			t.Fatalf("%s: first take waits %v", k, w)
		}
	}
	// The table is full of empty token buckets: d and e share the overflow one.
	if w := bs.take("d", 1, now); w != 0 {
		t.Fatalf("d: %v", w)
	}
	if w := bs.take("e", 1, now); w <= 0 {
		t.Fatal("e shares d's overflow token bucket and must wait")
	}
	if len(bs.m) != 3 || testutil.ToFloat64(g) != 3 {
		t.Fatalf("table %d, gauge %v: want 3", len(bs.m), testutil.ToFloat64(g))
	}
	// Two seconds on, every token bucket is full again: the sweep drops them.
	later := now.Add(2 * time.Second)
	if w := bs.take("f", 1, later); w != 0 {
		t.Fatalf("f: %v", w)
	}
	if len(bs.m) != 1 || testutil.ToFloat64(g) != 1 {
		t.Fatalf("after the sweep the table holds %d (gauge %v), want 1 (f)", len(bs.m), testutil.ToFloat64(g))
	}
	if w := bs.take("a", 1, later); w != 0 {
		t.Fatalf("a was forgotten with a full token bucket, so it starts full: waits %v", w)
	}
}

// Behind a trusted proxy a client is the address the proxy forwarded for;
// without one, X-Forwarded-For is ignored (any client can send it).
func TestTrustedProxyForwardsTheClientAddress(t *testing.T) {
	limit := []Limit{{Class: frontdoor.ClassWrite, Client: slow, ClientBurst: 1}}
	e := newEnv(t, envOpts{api: func(c *Config) {
		c.Limits = limit
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8")}
	}})
	xff := func(v string) []string { return []string{"X-Forwarded-For", v} }
	e.do("POST", "/v1/counters/c/incr", "", xff("203.0.113.7")...).ok(t)
	limited(t, e.do("POST", "/v1/counters/c/incr", "", xff("203.0.113.7")...), "client")
	e.do("POST", "/v1/counters/c/incr", "", xff("198.51.100.1")...).ok(t)
	// A client that prepends a forged hop is still keyed on what the
	// proxy saw; hops through further trusted proxies are skipped.
	limited(t, e.do("POST", "/v1/counters/c/incr", "", xff("192.0.2.99, 203.0.113.7")...), "client")
	limited(t, e.do("POST", "/v1/counters/c/incr", "", xff("203.0.113.7, 10.1.2.3")...), "client")
	// No header: the proxy's own address, one more client.
	e.do("POST", "/v1/counters/c/incr", "").ok(t)

	plain := newEnv(t, envOpts{api: func(c *Config) { c.Limits = limit }})
	plain.do("POST", "/v1/counters/c/incr", "", xff("203.0.113.7")...).ok(t)
	limited(t, plain.do("POST", "/v1/counters/c/incr", "", xff("198.51.100.1")...), "client")
}
