package httpapi

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"github.com/tally-dev/tally/frontdoor"
)

// adminRoutes are every route that needs the admin role. The test below
// finds them from the router itself, so a new admin route that is not
// guarded, or a guard dropped from one, fails it.
var adminRoutes = []string{
	"DELETE /v1/admin/budgets/handoff",
	"DELETE /v1/blocks/{user}",
	"GET /v1/admin/budgets/handoff",
	"GET /v1/admin/links",
	"GET /v1/admin/replicas",
	"GET /v1/audit",
	"GET /v1/blocks",
	"GET /v1/blocks/{user}",
	"POST /v1/admin/backup",
	"POST /v1/admin/import",
	"PUT /v1/admin/budgets/handoff",
	"PUT /v1/admin/chaos/clock",
	"PUT /v1/admin/links/{a}/{b}",
	"PUT /v1/admin/replicas/{replica}",
	"PUT /v1/admin/shards/{region}",
	"PUT /v1/blocks/{user}",
	"PUT /v1/types/{name}",
}

// guardedRoutes calls every route of e's router once, anonymously, and
// returns those that answered 401 unauthorized ("METHOD template").
func guardedRoutes(t *testing.T, e *env) []string {
	t.Helper()
	var guarded []string
	err := e.srv.Router().Walk(func(rt *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		tpl, err := rt.GetPathTemplate()
		if err != nil {
			return err
		}
		methods, err := rt.GetMethods()
		if err != nil {
			return err
		}
		clean := routeVar.ReplaceAllString(tpl, "{$1}")
		path := routeVar.ReplaceAllString(tpl, "x")
		for _, m := range methods {
			if m == http.MethodHead {
				continue // headers only: the health routes' HEAD, public as their GET (head_test.go)
			}
			r := e.do(m, path, "")
			if r.status == http.StatusUnauthorized {
				if r.body["code"] != frontdoor.CodeUnauthorized {
					t.Errorf("%s %s: 401 with code %v", m, path, r.body["code"])
				}
				guarded = append(guarded, m+" "+clean)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(guarded)
	return guarded
}

// On a public listener without an admin token every admin route is
// closed to everyone (a replica whose configuration check was bypassed
// still opens nothing), and only admin routes are; on a loopback
// listener, or with the operator's opt-out, they stay open as before.
func TestAdminRoutesAllGuarded(t *testing.T) {
	chaos := func(time.Duration) {}
	e := newEnv(t, envOpts{api: func(c *Config) { c.Edge.Public, c.ChaosClock = true, chaos }})
	got := guardedRoutes(t, e)
	if !slices.Equal(got, adminRoutes) {
		t.Fatalf("routes closed on a public listener without an admin token:\n%s\nwant:\n%s",
			strings.Join(got, "\n"), strings.Join(adminRoutes, "\n"))
	}
	for _, r := range got {
		if !strings.Contains(r, "/admin/") && !strings.Contains(r, "/blocks") && !strings.Contains(r, "/audit") && r != "PUT /v1/types/{name}" {
			t.Errorf("%s is guarded but not listed as admin", r)
		}
	}
	if b := e.do("GET", "/v1/status", "").ok(t); b["auth"] != nil || b["edge"] != nil {
		t.Fatalf("public status shows auth %v edge %v", b["auth"], b["edge"])
	}

	e = newEnv(t, envOpts{api: func(c *Config) { c.Edge.Public, c.AdminToken, c.ChaosClock = true, "a-1", chaos }})
	if got := guardedRoutes(t, e); !slices.Equal(got, adminRoutes) {
		t.Fatalf("routes guarded by the admin token:\n%s", strings.Join(got, "\n"))
	}
	e.do("PUT", "/v1/blocks/alice", "", "Authorization", "Bearer a-1").ok(t)
	if b := e.do("GET", "/v1/status", "", "Authorization", "Bearer a-1").ok(t); b["auth"] == nil || b["edge"] == nil {
		t.Fatalf("the admin's status lacks auth or edge: %v", b)
	}

	for _, o := range []func(*Config){
		func(c *Config) {}, // loopback, as tallyd local
		func(c *Config) { c.Edge.Public, c.Edge.OpenAdmin = true, true }, // the opt-out
	} {
		e := newEnv(t, envOpts{api: func(c *Config) { o(c); c.ChaosClock = chaos }})
		if got := guardedRoutes(t, e); len(got) != 0 {
			t.Fatalf("guarded without tokens: %v", got)
		}
	}
	// On loopback without an admin token every caller is a local
	// operator and sees the posture.
	e = newEnv(t, envOpts{})
	if b := e.do("GET", "/v1/status", "").ok(t); b["auth"] == nil || b["edge"] == nil {
		t.Fatalf("loopback status lacks auth or edge: %v", b)
	}
}

// publicRouteList are the only routes that answer without a token when read
// and write tokens are set: the probes and the metrics.
var publicRouteList = []string{"GET /healthz", "GET /metrics", "GET /readyz", "HEAD /healthz", "HEAD /readyz"}

// allRoutes lists every route of e's router ("METHOD template").
func allRoutes(t *testing.T, e *env) []string {
	t.Helper()
	rs, err := e.srv.Routes()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rs {
		out = append(out, r.Method+" "+r.Path)
	}
	slices.Sort(out)
	return out
}

// With read and write tokens set, every route but the probes and the
// metrics answers 401 to a caller without a token, whatever its method:
// a read by POST (/v1/feed) is a read. The test walks the router, so a
// route added later is covered, and a route is read-guarded unless it is
// registered as a write or public one.
func TestEveryRouteNeedsAToken(t *testing.T) {
	chaos := func(time.Duration) {}
	e := newEnv(t, envOpts{api: func(c *Config) {
		c.ReadToken, c.WriteToken, c.ChaosClock = "r-1", "w-1", chaos
	}})
	e.srv.Router().Handle("/v1/later", e.srv.Handler(func(w http.ResponseWriter, _ *http.Request) error {
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
		return nil
	})).Methods(http.MethodPost)
	all := allRoutes(t, e)
	want := slices.DeleteFunc(slices.Clone(all), func(r string) bool { return slices.Contains(publicRouteList, r) })
	if len(want) != len(all)-len(publicRouteList) {
		t.Fatalf("the router lacks a public route of %v", publicRouteList)
	}
	if got := guardedRoutes(t, e); !slices.Equal(got, want) {
		var open []string
		for _, r := range want {
			if !slices.Contains(got, r) {
				open = append(open, r)
			}
		}
		t.Fatalf("routes open without a token while read and write tokens are set:\n%s", strings.Join(open, "\n"))
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if r := e.do("GET", p, ""); r.status != http.StatusOK {
			t.Errorf("GET %s without a token: %d, want 200", p, r.status)
		}
		if p != "/metrics" {
			if st, _ := head(t, e, p); st != http.StatusOK {
				t.Errorf("HEAD %s without a token: %d, want 200", p, st)
			}
		}
	}

	// The feed by POST: 401 without a token or with a wrong one, 200
	// with the read token (or a higher one).
	body := `{"user":"bob","items":["a","b"]}`
	if r := e.do("POST", "/v1/feed", body); r.status != http.StatusUnauthorized || r.body["code"] != frontdoor.CodeUnauthorized {
		t.Fatalf("POST /v1/feed without a token: %d %v", r.status, r.body)
	}
	if r := e.do("POST", "/v1/feed", body, "Authorization", "Bearer nope"); r.status != http.StatusUnauthorized {
		t.Fatalf("POST /v1/feed with a wrong token: %d", r.status)
	}
	e.do("POST", "/v1/feed", body, "Authorization", "Bearer r-1").ok(t)
	e.do("POST", "/v1/feed", body, "Authorization", "Bearer w-1").ok(t)
	if r := e.do("POST", "/v1/later", "{}", "Authorization", "Bearer r-1"); r.status != http.StatusOK {
		t.Fatalf("a route added later, with the read token: %d", r.status)
	}
	// A read token does not open a write.
	if r := e.do("PUT", "/v1/likes/a/bob", "", "Authorization", "Bearer r-1"); r.status != http.StatusUnauthorized {
		t.Fatalf("PUT a like with the read token: %d", r.status)
	}
}
