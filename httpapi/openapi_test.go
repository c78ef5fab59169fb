package httpapi

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"github.com/tally-dev/tally/internal/base/openapi"
	"github.com/tally-dev/tally/region"
)

// regenerate is what to run when the checked-in document is stale.
const regenerate = "make openapi (go run ./internal/openapigen -w docs/openapi.json)"

// document parses the document this package builds.
func document(t *testing.T) *openapi.Document {
	t.Helper()
	raw, err := OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	d, err := openapi.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// routerOperations walks e's router: every route as "METHOD /template".
func routerOperations(t *testing.T, e *env) []string {
	t.Helper()
	var out []string
	err := e.srv.Router().Walk(func(rt *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		tpl, err := rt.GetPathTemplate()
		if err != nil {
			return err
		}
		methods, err := rt.GetMethods()
		if err != nil {
			return err
		}
		for _, m := range methods {
			out = append(out, m+" "+routeVar.ReplaceAllString(tpl, "{$1}"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// Every route of the router has its operation in the document, and every
// operation its route. The server is built with every optional route on
// (links, the chaos clock).
func TestOpenAPICoversEveryRoute(t *testing.T) {
	e := newEnv(t, envOpts{api: func(c *Config) {
		c.Links = &fakeLinks{up: map[[2]string]bool{}}
		c.ChaosClock = func(time.Duration) {}
	}})
	routes, ops := routerOperations(t, e), document(t).Operations()
	for _, r := range routes {
		if !slices.Contains(ops, r) {
			t.Errorf("route %s has no operation in the OpenAPI document: add it to operations() in httpapi/openapi.go, then %s", r, regenerate)
		}
	}
	for _, o := range ops {
		if !slices.Contains(routes, o) {
			t.Errorf("operation %s has no route in the router", o)
		}
	}
}

// docs/openapi.json is what the generator makes now, and the server
// serves the same bytes.
func TestOpenAPIDocumentCurrent(t *testing.T) {
	want, err := OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../docs/openapi.json")
	if err != nil {
		t.Fatalf("%v: run %s", err, regenerate)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		i := 0
		for i < len(gl) && i < len(wl) && gl[i] == wl[i] {
			i++
		}
		line := func(ls []string) string {
			if i < len(ls) {
				return strings.TrimSpace(ls[i])
			}
			return "(end of file)"
		}
		t.Fatalf("docs/openapi.json differs from the route table and the api structs (first at line %d: %q, now %q): run %s",
			i+1, line(gl), line(wl), regenerate)
	}
	e := newEnv(t, envOpts{})
	if r := e.do("GET", "/v1/openapi.json", ""); r.status != http.StatusOK || r.raw != string(want) {
		t.Fatalf("GET /v1/openapi.json: %d, %d bytes; want the document's %d", r.status, len(r.raw), len(want))
	}
}

// A route's role in the document is the token the router asks for: with
// only a write token set, exactly the write routes answer 401; with only
// a read token, exactly the read routes (whatever their method) and the
// admin routes. The admin routes are TestAdminRoutesAllGuarded's. Every
// operation states its security: none for a public one (the probes and
// the metrics), the bearer token for one with a role.
func TestOpenAPIRoles(t *testing.T) {
	raw, err := OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]struct {
			Role     string              `json:"x-tally-role"`
			Security *[]map[string][]any `json:"security"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var write, read, admin []string
	for path, ops := range doc.Paths {
		for m, op := range ops {
			name := strings.ToUpper(m) + " " + path
			switch {
			case op.Security == nil:
				t.Errorf("%s: no security in the document", name)
			case op.Role == "" && len(*op.Security) != 0:
				t.Errorf("%s: public, but its security is %v", name, *op.Security)
			case op.Role != "" && !slices.ContainsFunc(*op.Security, func(r map[string][]any) bool { _, ok := r["bearer"]; return ok }):
				t.Errorf("%s: role %s, but its security %v has no bearer token", name, op.Role, *op.Security)
			}
			switch op.Role {
			case "write":
				write = append(write, name)
			case "read":
				read = append(read, name)
			case "admin":
				// The read guard stands before the admin guard, on
				// every method: with only a read token, an admin route
				// (open on loopback without an admin token) needs it.
				admin = append(admin, name)
				read = append(read, name)
			}
		}
	}
	slices.Sort(write)
	slices.Sort(read)
	slices.Sort(admin)
	chaos := func(time.Duration) {}
	links := &fakeLinks{up: map[[2]string]bool{}}
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
		want []string
	}{
		{"write", func(c *Config) { c.WriteToken = "w" }, write},
		{"read", func(c *Config) { c.ReadToken = "r" }, read},
		{"admin", func(c *Config) { c.AdminToken = "a" }, admin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{api: func(c *Config) { tc.cfg(c); c.ChaosClock, c.Links = chaos, links }})
			if got := guardedRoutes(t, e); !slices.Equal(got, tc.want) {
				t.Fatalf("routes that answer 401 with only a %s token:\n%s\nthe document's %s routes:\n%s",
					tc.name, strings.Join(got, "\n"), tc.name, strings.Join(tc.want, "\n"))
			}
		})
	}
}

// The document's event is what the scanner reads: the same field names.
func TestOpenAPIEventFields(t *testing.T) {
	var bits uint
	et := reflect.TypeFor[event]()
	for i := range et.NumField() {
		name, _, _ := strings.Cut(et.Field(i).Tag.Get("json"), ",")
		bit, _ := (&rawEvent{}).field([]byte(name))
		if bit == 0 {
			t.Errorf("the document's event field %q is not read by the scanner", name)
		}
		bits |= bit
	}
	if all := uint(fID<<1 - 1); bits != all {
		t.Errorf("the scanner reads fields the document's event lacks (bits %b of %b)", bits, all)
	}
}

// Every Code constant of the front doors (package frontdoor) is in the
// document's error codes.
func TestOpenAPIErrorCodes(t *testing.T) {
	listed := map[string]bool{}
	for _, c := range errorCodes {
		listed[c.Code] = true
	}
	names, err := filepath.Glob("../frontdoor/*.go")
	if err != nil || len(names) == 0 {
		t.Fatal("no files in ../frontdoor:", err)
	}
	n := 0
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(node ast.Node) bool {
			vs, ok := node.(*ast.ValueSpec)
			if !ok || len(vs.Names) != 1 || len(vs.Values) != 1 || !strings.HasPrefix(vs.Names[0].Name, "Code") {
				return true
			}
			lit, ok := vs.Values[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			code, _ := strconv.Unquote(lit.Value)
			n++
			if !listed[code] {
				t.Errorf("%s (%q) is not in errorCodes (httpapi/openapi.go)", vs.Names[0].Name, code)
			}
			return true
		})
	}
	if n != len(errorCodes) {
		t.Errorf("%d Code constants, %d documented codes", n, len(errorCodes))
	}
}

// A handler's answer has the shape the document gives its route and
// status: the real server, on a real replica, for a representative set of
// routes, answers and errors, each body checked against its schema.
func TestOpenAPIResponsesMatch(t *testing.T) {
	d := document(t)
	e := newEnv(t, envOpts{approx: []region.ApproxRule{{Prefix: "hot:", Error: 0.01}}, api: func(c *Config) {
		c.Links = &fakeLinks{up: map[[2]string]bool{{"eu", "us"}: true}}
		c.ChaosClock = func(time.Duration) {}
	}})
	noLists := newEnv(t, envOpts{noLists: true, noLog: true})
	fresh := newEnv(t, envOpts{})
	for _, tc := range []struct {
		e                  *env
		method, path, body string
		route              string // the operation; "" is path
		status             int
		header             []string
	}{
		// Likes.
		{method: "PUT", path: "/v1/likes/post1/alice", route: "/v1/likes/{item}/{user}"},
		{method: "PUT", path: "/v1/likes/post1/bob", route: "/v1/likes/{item}/{user}"},
		{method: "DELETE", path: "/v1/likes/post1/bob", route: "/v1/likes/{item}/{user}"},
		{method: "GET", path: "/v1/likes/post1", route: "/v1/likes/{item}"},
		{method: "GET", path: "/v1/likes/nothing", route: "/v1/likes/{item}"},
		{method: "GET", path: "/v1/likes/post1/alice", route: "/v1/likes/{item}/{user}"},
		{method: "GET", path: "/v1/likes/post1/nobody", route: "/v1/likes/{item}/{user}"},
		{method: "GET", path: "/v1/likes/post1/alice/history", route: "/v1/likes/{item}/{user}/history"},
		{method: "POST", path: "/v1/likes", body: `{"videoId":"v1","userId":"carol"}`},
		{method: "DELETE", path: "/v1/likes/v1", body: `{"userId":"carol"}`, route: "/v1/likes/{item}"},
		{method: "GET", path: "/v1/likers/post1", route: "/v1/likers/{item}"},
		{method: "GET", path: "/v1/likers/nothing", route: "/v1/likers/{item}"},
		{method: "GET", path: "/v1/users/alice/likes", route: "/v1/users/{user}/likes"},
		{method: "GET", path: "/v1/feed?user=alice&items=post1,v1"},
		{method: "POST", path: "/v1/feed", body: `{"user":"alice","items":["post1"]}`},
		// Counters and batches.
		{method: "POST", path: "/v1/counters/views/incr", body: `{"by":3,"idempotency_key":"k1"}`, route: "/v1/counters/{key}/incr"},
		{method: "POST", path: "/v1/counters/views/incr", body: `{"by":3,"idempotency_key":"k1"}`, route: "/v1/counters/{key}/incr"},
		{method: "POST", path: "/v1/counters/hot:a/incr", body: `{"by":1000}`, route: "/v1/counters/{key}/incr"},
		{method: "GET", path: "/v1/counters/views", route: "/v1/counters/{key}"},
		{method: "GET", path: "/v1/counters/hot:a", route: "/v1/counters/{key}"},
		{method: "POST", path: "/v1/events", body: `[{"type":"like","item":"p2","user":"u"},{"type":"incr","key":"hot:b","by":5},` +
			`{"type":"incr","key":"c","by":2,"idempotency_key":"e1"},{"type":"like","item":"bad id","user":"u"}]`},
		// Windows, series, trending.
		{method: "GET", path: "/v1/counters/views/window?last=60s", route: "/v1/counters/{key}/window"},
		{method: "GET", path: "/v1/counters/hot:a/window?last=60s", route: "/v1/counters/{key}/window"},
		{method: "GET", path: "/v1/likes/post1/window?last=10m", route: "/v1/likes/{item}/window"},
		{method: "GET", path: "/v1/window?kind=counters&last=60s", route: "/v1/window"},
		{method: "GET", path: "/v1/counters/hot:a/series?last=10m&step=1m&by=region", route: "/v1/counters/{key}/series"},
		{method: "GET", path: "/v1/likes/post1/series?last=10m&step=1m", route: "/v1/likes/{item}/series"},
		{method: "GET", path: "/v1/series?kind=likes&key=post1&key=*&last=1h&step=10m", route: "/v1/series"},
		{method: "GET", path: "/v1/trending?window=10m&kind=counters", route: "/v1/trending"},
		{method: "GET", path: "/v1/trending?window=all", route: "/v1/trending"},
		// Unique counts.
		{method: "POST", path: "/v1/uniques/visitors", body: `{"ids":["a","b"]}`, route: "/v1/uniques/{key}"},
		{method: "GET", path: "/v1/uniques/visitors", route: "/v1/uniques/{key}"},
		{method: "GET", path: "/v1/uniques/visitors?last=24h&by=region", route: "/v1/uniques/{key}"},
		{method: "GET", path: "/v1/uniques?keys=visitors,other", route: "/v1/uniques"},
		// Budgets.
		{method: "POST", path: "/v1/budgets/promo/grant", body: `{"by":10}`, route: "/v1/budgets/{key}/grant"},
		{method: "POST", path: "/v1/budgets/promo/spend", body: `{"by":4,"idempotency_key":"s1"}`, route: "/v1/budgets/{key}/spend"},
		{method: "POST", path: "/v1/budgets/promo/spend", body: `{"by":100}`, route: "/v1/budgets/{key}/spend", status: 409},
		{method: "GET", path: "/v1/budgets/promo", route: "/v1/budgets/{key}"},
		{method: "POST", path: "/v1/cashback", body: `{"budget":"promo","merchant":"m","user":"u","amount":2,"idempotency_key":"c1"}`, status: 409},
		{method: "POST", path: "/v1/budgets/m/grant", body: `{"by":2}`, route: "/v1/budgets/{key}/grant"},
		{method: "POST", path: "/v1/cashback", body: `{"budget":"promo","merchant":"m","user":"u","amount":2,"idempotency_key":"c1"}`},
		{method: "GET", path: "/v1/admin/budgets/handoff"},
		// The replica.
		{method: "GET", path: "/healthz"},
		{method: "GET", path: "/readyz"},
		{method: "GET", path: "/v1/status"},
		{method: "GET", path: "/v1/convergence"},
		{method: "GET", path: "/v1/audit"},
		{method: "PUT", path: "/v1/blocks/mallory", route: "/v1/blocks/{user}"},
		{method: "GET", path: "/v1/blocks/mallory", route: "/v1/blocks/{user}"},
		{method: "GET", path: "/v1/blocks/nobody", route: "/v1/blocks/{user}"},
		{method: "GET", path: "/v1/blocks"},
		{method: "DELETE", path: "/v1/blocks/mallory", route: "/v1/blocks/{user}"},
		{method: "PUT", path: "/v1/admin/budgets/handoff", body: `{"to":"eu-1"}`, status: 409},
		{method: "DELETE", path: "/v1/admin/budgets/handoff"},
		{method: "PUT", path: "/v1/admin/chaos/clock", body: `{"offset_ms":0}`},
		{method: "GET", path: "/v1/admin/links"},
		{method: "PUT", path: "/v1/admin/links/us/eu", body: `{"up":false}`, route: "/v1/admin/links/{a}/{b}"},
		// Empty answers: a fresh replica's, where a nil slice would encode
		// as null.
		{e: fresh, method: "GET", path: "/v1/likes/none/nobody/history", route: "/v1/likes/{item}/{user}/history"},
		{e: fresh, method: "GET", path: "/v1/users/nobody/likes", route: "/v1/users/{user}/likes"},
		{e: fresh, method: "GET", path: "/v1/feed?user=nobody&items=none"},
		{e: fresh, method: "GET", path: "/v1/counters/none/window?last=60s", route: "/v1/counters/{key}/window"},
		{e: fresh, method: "GET", path: "/v1/series?kind=counters&key=none&last=10m&by=region", route: "/v1/series"},
		{e: fresh, method: "GET", path: "/v1/trending?window=10m"},
		{e: fresh, method: "GET", path: "/v1/trending?window=all&kind=counters", route: "/v1/trending"},
		{e: fresh, method: "GET", path: "/v1/uniques/none", route: "/v1/uniques/{key}"},
		{e: fresh, method: "GET", path: "/v1/uniques/none?last=24h&by=region", route: "/v1/uniques/{key}"},
		{e: fresh, method: "GET", path: "/v1/uniques?keys=none,other"},
		{e: fresh, method: "GET", path: "/v1/budgets/none", route: "/v1/budgets/{key}"},
		{e: fresh, method: "GET", path: "/v1/blocks"},
		{e: fresh, method: "GET", path: "/v1/audit"},
		{e: fresh, method: "GET", path: "/v1/convergence"},
		{e: fresh, method: "POST", path: "/v1/events", body: `[]`, status: 400},
		// Errors.
		{method: "GET", path: "/v1/likes/bad%20id", route: "/v1/likes/{item}", status: 400},
		{method: "POST", path: "/v1/counters/views/incr", body: `{"by":1,"nope":2}`, route: "/v1/counters/{key}/incr", status: 400},
		{method: "POST", path: "/v1/counters/views/incr", body: `{"by":7,"idempotency_key":"k1"}`, route: "/v1/counters/{key}/incr", status: 409},
		{method: "POST", path: "/v1/counters/views/incr", body: `{}`, route: "/v1/counters/{key}/incr", status: 415,
			header: []string{"Content-Type", "text/plain"}},
		{method: "GET", path: "/v1/trending?window=nope", route: "/v1/trending", status: 400},
		{method: "GET", path: "/v1/window?kind=counters&key=views&from=1&to=2", route: "/v1/window", status: 404},
		{method: "GET", path: "/v1/milestones", status: 404},
		{method: "GET", path: "/v1/sequences/likes", route: "/v1/sequences/{name}", status: 404},
		{e: noLists, method: "GET", path: "/v1/likers/post1", route: "/v1/likers/{item}", status: 404},
		{e: noLists, method: "GET", path: "/v1/audit", status: 404},
	} {
		te := tc.e
		if te == nil {
			te = e
		}
		route, status := tc.route, tc.status
		if route == "" {
			route, _, _ = strings.Cut(tc.path, "?")
		}
		if status == 0 {
			status = http.StatusOK
		}
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			r := te.on(t).do(tc.method, tc.path, tc.body, tc.header...)
			if r.status != status {
				t.Fatalf("status %d, want %d: %s", r.status, status, r.raw)
			}
			if err := d.CheckResponse(tc.method, route, r.status, []byte(r.raw)); err != nil {
				t.Fatalf("%v\nbody: %s", err, r.raw)
			}
		})
	}
}
