package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
)

func TestTokens(t *testing.T) {
	e := newEnv(t, envOpts{api: func(c *Config) {
		c.WriteToken, c.AdminToken = "w-secret", "a-secret"
	}})
	e.srv.Router().Handle("/v1/admin/ping", e.srv.RequireAdmin(e.srv.Handler(func(w http.ResponseWriter, _ *http.Request) error {
		writeJSON(w, http.StatusOK, map[string]string{"pong": "yes"})
		return nil
	}))).Methods("POST")

	writes := []struct{ method, path, body string }{
		{"PUT", "/v1/likes/p/u", ""},
		{"DELETE", "/v1/likes/p/u", ""},
		{"POST", "/v1/likes", `{"item":"p","userId":"u"}`},
		{"DELETE", "/v1/likes/p", `{"userId":"u"}`},
		{"POST", "/v1/counters/c/incr", `{"by":1}`},
	}
	for _, w := range writes {
		for _, auth := range []string{"", "Bearer wrong", "Basic dzpzZWNyZXQ=", "Bearer", "w-secret"} {
			r := e.do(w.method, w.path, w.body, "Authorization", auth)
			r.isError(t, http.StatusUnauthorized, frontdoor.CodeUnauthorized)
			if r.header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s: 401 without WWW-Authenticate", w.method, w.path)
			}
		}
	}
	if e.likes("p") != 0 || e.counter("c") != 0 {
		t.Fatal("an unauthorized write changed state")
	}

	e.do("PUT", "/v1/likes/p/u", "", "Authorization", "Bearer w-secret").ok(t)
	e.do("POST", "/v1/counters/c/incr", "", "Authorization", "bearer a-secret").ok(t) // admin may write
	if e.likes("p") != 1 || e.counter("c") != 1 {
		t.Fatal("authorized writes not applied")
	}
	// Reads stay open.
	e.do("GET", "/v1/likes/p", "").ok(t)
	e.do("GET", "/v1/counters/c", "").ok(t)

	e.do("POST", "/v1/admin/ping", "").isError(t, http.StatusUnauthorized, frontdoor.CodeUnauthorized)
	e.do("POST", "/v1/admin/ping", "", "Authorization", "Bearer w-secret").isError(t, http.StatusUnauthorized, frontdoor.CodeUnauthorized)
	e.do("POST", "/v1/admin/ping", "", "Authorization", "Bearer a-secret").ok(t)
	// The auth posture is the admin's to see, not an anonymous caller's
	// nor a writer's.
	for _, auth := range []string{"", "Bearer w-secret", "Bearer wrong"} {
		if b := e.do("GET", "/v1/status", "", "Authorization", auth).ok(t); b["auth"] != nil || b["edge"] != nil {
			t.Fatalf("status with %q shows auth %v edge %v", auth, b["auth"], b["edge"])
		}
	}
	if b := e.do("GET", "/v1/status", "", "Authorization", "Bearer a-secret").ok(t); fmt.Sprint(b["auth"]) != "map[admin:true read:false write:true]" {
		t.Fatalf("status auth: %v", b["auth"])
	}
}

// Several tokens per role are all valid (rotation: old and new at once),
// a read token guards the reads and higher roles' tokens open
// it, probes and metrics stay open, /v1/status says what is guarded, and
// no token ever appears in an answer or in the log.
func TestReadTokenAndRotation(t *testing.T) {
	e := newEnv(t, envOpts{api: func(c *Config) {
		c.ReadToken, c.WriteToken, c.AdminToken = "r-old r-new", "w-old w-new", "a-secret"
	}})
	for _, tok := range []string{"w-old", "w-new", "a-secret"} {
		e.do("POST", "/v1/counters/c/incr", "", "Authorization", "Bearer "+tok).ok(t)
	}
	for _, tok := range []string{"r-old", "r-new", "r-old r-new", "r-new,w-new"} {
		e.do("POST", "/v1/counters/c/incr", "", "Authorization", "Bearer "+tok).isError(t, http.StatusUnauthorized, frontdoor.CodeUnauthorized)
	}
	for _, path := range []string{"/v1/counters/c", "/v1/likes/p", "/v1/status", "/v1/budgets/b", "/v1/uniques/u", "/v1/trending"} {
		e.do("GET", path, "").isError(t, http.StatusUnauthorized, frontdoor.CodeUnauthorized)
		e.do("GET", path, "", "Authorization", "Bearer r-wrong").isError(t, http.StatusUnauthorized, frontdoor.CodeUnauthorized)
		for _, tok := range []string{"r-old", "r-new", "w-new", "a-secret"} {
			e.do("GET", path, "", "Authorization", "Bearer "+tok).ok(t)
		}
	}
	if got := e.counter("c"); got != 3 {
		t.Fatalf("counter %d, want 3", got)
	}
	e.do("GET", "/healthz", "").ok(t)
	if r := e.do("GET", "/metrics", ""); r.status != http.StatusOK {
		t.Fatalf("/metrics: %d", r.status)
	}
	if b := e.do("GET", "/v1/status", "", "Authorization", "Bearer r-new").ok(t); b["auth"] != nil {
		t.Fatalf("status shows a reader auth %v", b["auth"])
	}
	b := e.do("GET", "/v1/status", "", "Authorization", "Bearer a-secret").ok(t)
	if fmt.Sprint(b["auth"]) != "map[admin:true read:true write:true]" {
		t.Fatalf("status auth: %v", b["auth"])
	}
	r := e.do("GET", "/v1/status", "", "Authorization", "Bearer not-a-token")
	for _, secret := range []string{"r-old", "r-new", "w-old", "w-new", "a-secret", "not-a-token"} {
		if strings.Contains(r.raw, secret) {
			t.Fatalf("answer shows a token: %s", r.raw)
		}
		if strings.Contains(e.logs.String(), secret) {
			t.Fatalf("log shows a token %q", secret)
		}
	}
}

func TestNoTokensMeansOpen(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.do("PUT", "/v1/likes/p/u", "", "Authorization", "Bearer anything").ok(t)
}

func TestPanicRecovered(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.srv.Router().HandleFunc("/test/panic", func(http.ResponseWriter, *http.Request) {
		panic("boom")
	})
	r := e.do("GET", "/test/panic", "")
	r.isError(t, http.StatusInternalServerError, frontdoor.CodeInternal)
	if strings.Contains(r.raw, "boom") {
		t.Errorf("panic value leaked to the client: %s", r.raw)
	}
	logs := e.logs.String()
	if !strings.Contains(logs, "handler panicked") || !strings.Contains(logs, "boom") || !strings.Contains(logs, "goroutine") {
		t.Errorf("panic not logged with its stack:\n%s", logs)
	}
	// Still serving.
	e.do("GET", "/healthz", "").ok(t)
	e.do("PUT", "/v1/likes/p/u", "").ok(t)
}

func TestReadyz(t *testing.T) {
	e := newEnv(t, envOpts{hold: true})
	r := e.do("GET", "/readyz", "")
	r.isError(t, http.StatusServiceUnavailable, frontdoor.CodeNotReady)
	if r.header.Get("Retry-After") == "" {
		t.Error("503 not_ready without Retry-After")
	}
	e.do("GET", "/healthz", "").ok(t) // alive while not ready
	e.do("PUT", "/v1/likes/p/u", "").isError(t, http.StatusServiceUnavailable, frontdoor.CodeNotReady)
	e.do("POST", "/v1/counters/c/incr", "").isError(t, http.StatusServiceUnavailable, frontdoor.CodeNotReady)
	e.do("GET", "/v1/likes/p", "").ok(t) // reads are served
	if e.likes("p") != 0 || e.counter("c") != 0 {
		t.Fatal("a write was applied while holding writes")
	}
	if b := e.do("GET", "/v1/status", "").ok(t); b["accepting"] != false {
		t.Fatalf("status: %v", b)
	}

	e.rep.AcceptWrites()
	if b := e.do("GET", "/readyz", "").ok(t); b["status"] != "ready" {
		t.Fatalf("%v", b)
	}
	e.do("PUT", "/v1/likes/p/u", "").ok(t)
}

func TestClosedReplica(t *testing.T) {
	e := newEnv(t, envOpts{})
	if err := e.rep.Close(); err != nil {
		t.Fatal(err)
	}
	r := e.do("PUT", "/v1/likes/p/u", "")
	r.isError(t, http.StatusServiceUnavailable, frontdoor.CodeShuttingDown)
	if r.header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, envOpts{reg: reg})
	e.do("PUT", "/v1/likes/p/u", "").ok(t)
	e.do("GET", "/v1/nope/x", "")
	r := e.send(req{method: "GET", path: "/metrics"})
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	for _, want := range []string{
		`tally_http_requests_total{code="200",method="PUT",route="/v1/likes/{item}/{user}"} 1`,
		`tally_http_requests_total{code="404",method="GET",route="unmatched"} 1`,
		`tally_http_request_duration_seconds_bucket{method="PUT",route="/v1/likes/{item}/{user}"`,
		`tally_http_requests_in_flight`,
		`tally_ops_total{kind="like"} 1`, // the replica's, on the shared registry
	} {
		if !strings.Contains(r.raw, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// A second Server on the same registry is refused, not a panic.
	if _, err := New(Config{Replica: e.rep, Registry: reg}); err == nil {
		t.Error("second Server on one registry: no error")
	}
}

// TestClassify checks the mapping of replica and context errors, including
// those hard to provoke through a real replica.
func TestClassify(t *testing.T) {
	e := newEnv(t, envOpts{})
	cases := []struct {
		err    error
		status int
		code   string
	}{
		{region.ErrNotReady, 503, frontdoor.CodeNotReady},
		{region.ErrClosed, 503, frontdoor.CodeShuttingDown},
		{fmt.Errorf("%w: disk on fire", region.ErrFailed), 503, frontdoor.CodeStorageFailed},
		{region.ErrOverflow, 422, frontdoor.CodeOverflow},
		{fmt.Errorf("%w: bad kind", region.ErrInvalid), 400, frontdoor.CodeInvalid},
		{fmt.Errorf("wait for commit: %w", context.DeadlineExceeded), 503, frontdoor.CodeTimeout},
		{fmt.Errorf("queue for writer: %w", context.Canceled), 503, frontdoor.CodeTimeout},
		{errors.New("pebble: /secret/path corrupt"), 500, frontdoor.CodeInternal},
	}
	for _, c := range cases {
		w := httptest.NewRecorder()
		e.srv.writeError(w, httptest.NewRequest("GET", "/x", nil), c.err)
		if w.Code != c.status || !strings.Contains(w.Body.String(), `"code":"`+c.code+`"`) {
			t.Errorf("%v: %d %s, want %d %s", c.err, w.Code, w.Body, c.status, c.code)
		}
		if strings.Contains(w.Body.String(), "secret") || strings.Contains(w.Body.String(), "disk on fire") {
			t.Errorf("%v: internals leaked: %s", c.err, w.Body)
		}
	}
	if !strings.Contains(e.logs.String(), "/secret/path corrupt") {
		t.Error("internal error not logged")
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without a Replica: no error")
	}
}

func TestSetTokensTakesEffectAtOnce(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.do("POST", "/v1/counters/c/incr", "").ok(t) // open
	e.srv.SetTokens("", "w-1", "")
	e.do("POST", "/v1/counters/c/incr", "").isError(t, http.StatusUnauthorized, frontdoor.CodeUnauthorized)
	e.do("POST", "/v1/counters/c/incr", "", "Authorization", "Bearer w-1").ok(t)
	e.do("GET", "/v1/counters/c", "").ok(t) // reads still open
	e.srv.SetTokens("r-1", "w-1 w-2", "a-1")
	e.do("POST", "/v1/counters/c/incr", "", "Authorization", "Bearer w-2").ok(t)
	e.do("GET", "/v1/counters/c", "").isError(t, http.StatusUnauthorized, frontdoor.CodeUnauthorized)
	e.do("PUT", "/v1/admin/links/a/b", `{"up":true}`, "Authorization", "Bearer w-2").isError(t, http.StatusUnauthorized, frontdoor.CodeUnauthorized)
	e.srv.SetTokens("", "w-2", "")
	e.do("POST", "/v1/counters/c/incr", "", "Authorization", "Bearer w-1").isError(t, http.StatusUnauthorized, frontdoor.CodeUnauthorized)
	if got := e.counter("c"); got != 3 {
		t.Fatalf("counter %d, want 3", got)
	}
	if b := e.do("GET", "/v1/status", "").ok(t); fmt.Sprint(b["auth"]) != "map[admin:false read:false write:true]" {
		t.Fatalf("status auth: %v", b["auth"])
	}
}

func TestDrainingFailsReadinessOnly(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.do("GET", "/readyz", "").ok(t)
	e.srv.SetDraining(true)
	e.do("GET", "/readyz", "").isError(t, http.StatusServiceUnavailable, frontdoor.CodeDraining)
	e.do("GET", "/healthz", "").ok(t)
	e.do("PUT", "/v1/likes/p/u", "").ok(t) // still served while load balancers move away
	if b := e.do("GET", "/v1/status", "").ok(t); b["edge"].(map[string]any)["draining"] != true {
		t.Fatalf("status edge: %v", b["edge"])
	}
}
