package client_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/httpapi"
	"github.com/tally-dev/tally/shard"
)

// clientRoutes reads the routes the client's methods send, from the
// package's source: every c.do(ctx, http.MethodX, path, ...) call, whose
// path is string literals and esc(...) calls (each a path variable, "{}").
// It returns "METHOD template" -> the methods sending it, and fails the
// test on a call it cannot read, so no route goes unseen.
func clientRoutes(t *testing.T) map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "do" {
					return true
				}
				where := fset.Position(call.Pos()).String()
				if len(call.Args) < 3 {
					t.Errorf("%s: do with %d arguments", where, len(call.Args))
					return true
				}
				method, ok := httpMethod(call.Args[1])
				if !ok {
					t.Errorf("%s: the method of a do call is not an http.MethodX constant", where)
					return true
				}
				path, ok := pathTemplate(call.Args[2])
				if !ok {
					t.Errorf("%s: the path of a do call is not string literals and esc calls", where)
					return true
				}
				r := method + " " + path
				out[r] = append(out[r], fn.Name.Name)
				return true
			})
		}
	}
	return out
}

func httpMethod(e ast.Expr) (string, bool) {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return "", false
	}
	if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "http" || !strings.HasPrefix(sel.Sel.Name, "Method") {
		return "", false
	}
	return strings.ToUpper(strings.TrimPrefix(sel.Sel.Name, "Method")), true
}

func pathTemplate(e ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.CallExpr:
		if f, ok := e.Fun.(*ast.Ident); ok && f.Name == "esc" {
			return "{}", true
		}
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return "", false
		}
		a, ok := pathTemplate(e.X)
		if !ok {
			return "", false
		}
		b, ok := pathTemplate(e.Y)
		return a + b, ok
	}
	return "", false
}

// serverRoutes walks the real router of a replica that serves every
// route, the chaos build's too: "METHOD template" with "{}" for each
// path variable.
func serverRoutes(t *testing.T) map[string]bool {
	t.Helper()
	srv := newServer(t, func(c *httpapi.Config) { c.ChaosClock = func(time.Duration) {} })
	routes, err := srv.Routes()
	if err != nil {
		t.Fatal(err)
	}
	pathVar := regexp.MustCompile(`\{[^}]*\}`)
	out := map[string]bool{}
	for _, r := range routes {
		if r.Method == http.MethodHead {
			continue // /healthz and /readyz for probes; Health and Ready send GET
		}
		out[r.Method+" "+pathVar.ReplaceAllString(r.Path, "{}")] = true
	}
	return out
}

// Every route the server serves has a client method, and every route a
// client method sends is served.
func TestClientCoversEveryRoute(t *testing.T) {
	sent, served := clientRoutes(t), serverRoutes(t)
	var missing, unserved []string
	for r := range served {
		if sent[r] == nil {
			missing = append(missing, r)
		}
	}
	for r, fns := range sent {
		if !served[r] {
			unserved = append(unserved, r+" (sent by "+strings.Join(fns, ", ")+")")
		}
	}
	slices.Sort(missing)
	slices.Sort(unserved)
	for _, r := range missing {
		t.Errorf("route %s has no client method", r)
	}
	for _, r := range unserved {
		t.Errorf("the client sends %s, which the server does not serve", r)
	}
	t.Logf("%d routes served, %d sent by the client", len(served), len(sent))
	if len(served) < 45 || len(sent) < 45 {
		t.Fatalf("%d routes served, %d sent: a walk or the source reading is broken", len(served), len(sent))
	}
	if _, ok := served[http.MethodGet+" /v1/likes/{}/{}"]; !ok {
		t.Fatalf("the server's templates were not normalized: %v", served)
	}
}

// A routing client (Config.Route) sends a request straight to a holder
// of the key's shard only if it reads the key from the path as the server
// does: every route with an {item} or {key} variable is routed by it, and
// no other route is, whatever the key holds.
func TestRoutingReadsKeysAsTheServer(t *testing.T) {
	srv := newServer(t, func(c *httpapi.Config) { c.ChaosClock = func(time.Duration) {} })
	routes, err := srv.Routes()
	if err != nil {
		t.Fatal(err)
	}
	pathVar := regexp.MustCompile(`\{([^}:]+)(:[^}]*)?\}`)
	const key = "post/1 é%"
	keyed := 0
	for _, r := range routes {
		wantKeyed := false
		path := pathVar.ReplaceAllStringFunc(r.Path, func(v string) string {
			name := pathVar.FindStringSubmatch(v)[1]
			if name == "item" || name == "key" {
				wantKeyed = true
				return url.PathEscape(key)
			}
			return "v"
		})
		got, ok := client.KeyOf(path, nil, nil)
		switch {
		case wantKeyed && (!ok || got != key):
			t.Errorf("%s %s: the client reads key %q (%v) from %s, want %q", r.Method, r.Path, got, ok, path, key)
		case !wantKeyed && ok:
			t.Errorf("%s %s: the client routes by %q, the server by no key", r.Method, r.Path, got)
		}
		if wantKeyed {
			keyed++
		}
	}
	if keyed < 15 {
		t.Fatalf("only %d keyed routes: the walk is broken", keyed)
	}
	if got, ok := client.KeyOf("/v1/likes", nil, client.LikeRequest{Item: "v123", User: "u456"}); !ok || got != "v123" {
		t.Errorf("POST /v1/likes with item v123 routes by %q (%v)", got, ok)
	}
	if got, ok := client.KeyOf("/v1/window", url.Values{"key": {"a", "a", "*"}}, nil); !ok || got != "a" {
		t.Errorf("a window of key a routes by %q (%v)", got, ok)
	}
	var other string
	for i := 0; other == ""; i++ {
		if k := fmt.Sprintf("k%d", i); shard.Of(k) != shard.Of("a") {
			other = k
		}
	}
	if got, ok := client.KeyOf("/v1/series", url.Values{"key": {"a", other}}, nil); ok {
		t.Errorf("a series of keys on two shards routes by %q", got)
	}
}
