package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// fakeRegion is a region's HTTP API reduced to canned answers; it records
// the writes it gets.
type fakeRegion struct {
	name string
	srv  *httptest.Server

	mu     sync.Mutex // protects writes, links, reads, spends, limit
	writes []string   // "METHOD path auth body"
	links  map[string]bool
	reads  []string // "path?query" of the window routes (windows_test.go)
	spends int      // spend requests so far (budget_test.go)
	limit  string   // the limit of the last milestones read
}

func newFakeRegion(t *testing.T, name string, peers ...string) *fakeRegion {
	f := &fakeRegion{name: name, links: map[string]bool{"us-eu": true, "us-ap": true, "eu-ap": true}}
	mux := http.NewServeMux()
	answer := func(path string, v any) {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, _ *http.Request) { _ = json.NewEncoder(w).Encode(v) })
	}
	var ps []map[string]any
	for _, p := range peers {
		ps = append(ps, map[string]any{"replica": p + "-1", "region": p, "in_sync": true, "lag_ms": 3, "last_heard_ago_ms": 120})
	}
	answer("/v1/likes/post1", map[string]any{"item": "post1", "count": 2, "approx": false,
		"replicas": map[string]any{name + "-1": map[string]int{"p": 2, "n": 0}}, "unreconciled": 0})
	answer("/v1/counters/views", map[string]any{"key": "views", "value": 7, "approx": false, "replicas": map[string]any{}})
	answer("/v1/convergence", map[string]any{"replica": name + "-1", "converged": true, "recovered": true, "peers": ps})
	answer("/v1/status", map[string]any{"region": name, "replica": name + "-1", "pending_replication": 0, "peers": ps})
	answer("/v1/shards", map[string]any{"region": name, "shards": 1024, "copies": 1,
		"replicas": []any{map[string]any{"replica": name + "-1", "shards": []string{"0-1023"}, "count": 1024}}})
	// us numbers likes; eu answers as a region with milestones off does.
	mux.HandleFunc("GET /v1/milestones", func(w http.ResponseWriter, r *http.Request) {
		if name != "us" {
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":"milestones are off","code":"not_found"}`)
			return
		}
		f.mu.Lock()
		f.limit = r.FormValue("limit")
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"synced": true, "total": 3,
			"milestones": []map[string]any{{"sequence": "likes", "number": 1000, "item": "post1", "user": "u7", "region": "eu"}}})
	})
	mux.HandleFunc("GET /v1/likes/broken", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":"replica is recovering","code":"not_ready"}`)
	})
	mux.HandleFunc("GET /v1/admin/links", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer admintok" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":"wrong admin token","code":"unauthorized"}`)
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		var ls []map[string]any
		for _, k := range []string{"us-eu", "us-ap", "eu-ap"} {
			a, b, _ := strings.Cut(k, "-")
			ls = append(ls, map[string]any{"a": a, "b": b, "up": f.links[k], "bytes_ab": 10, "bytes_ba": 20})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"links": ls})
	})
	record := func(w http.ResponseWriter, r *http.Request) string {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		defer f.mu.Unlock()
		f.writes = append(f.writes, fmt.Sprintf("%s %s %s %s", r.Method, r.URL.EscapedPath(), r.Header.Get("Authorization"), body))
		return string(body)
	}
	mux.HandleFunc("PUT /v1/admin/links/{a}/{b}", func(w http.ResponseWriter, r *http.Request) {
		body := record(w, r)
		up := strings.Contains(body, "true")
		f.mu.Lock()
		f.links[r.PathValue("a")+"-"+r.PathValue("b")] = up
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"a": r.PathValue("a"), "b": r.PathValue("b"), "up": up})
	})
	mux.HandleFunc("PUT /v1/likes/{item}/{user}", func(w http.ResponseWriter, r *http.Request) {
		record(w, r)
		_ = json.NewEncoder(w).Encode(map[string]any{"item": r.PathValue("item"), "user": r.PathValue("user"), "liked": true, "count": 3})
	})
	mux.HandleFunc("POST /v1/counters/{key}/incr", func(w http.ResponseWriter, r *http.Request) {
		record(w, r)
		_ = json.NewEncoder(w).Encode(map[string]any{"key": r.PathValue("key"), "value": 8})
	})
	f.windowRoutes(mux)
	f.budgetRoutes(mux, record)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeRegion) milestonesLimit() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.limit
}

func (f *fakeRegion) recorded() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.writes...)
}

// dashDo sends one request to the dashboard as its page would.
func dashDo(t *testing.T, h http.Handler, method, target string) (int, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	req.Host = "127.0.0.1:8080"
	if method == http.MethodPost {
		req.Header.Set(Header, "1")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s %s: %d %q: %v", method, target, rec.Code, rec.Body, err)
	}
	return rec.Code, out
}

func fakeDashboard(t *testing.T) (*Dashboard, []*fakeRegion) {
	us, eu := newFakeRegion(t, "us", "eu", "ap"), newFakeRegion(t, "eu", "us", "ap")
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close() // ap: nothing listens there any more
	d := New(Config{
		Regions: []Target{
			{Region: "us", Replica: "us-1", URL: us.srv.URL},
			{Region: "eu", Replica: "eu-1", URL: eu.srv.URL},
			{Region: "ap", Replica: "ap-1", URL: downURL},
		},
		WriteToken: "writetok", AdminToken: "admintok",
	})
	t.Cleanup(d.closeIdle)
	return d, []*fakeRegion{us, eu}
}

func TestDashboardOverviewAggregatesEveryRegion(t *testing.T) {
	d, fakes := fakeDashboard(t)
	st, out := dashDo(t, d, "GET", "/api/overview?item=post1&counter=views")
	if st != http.StatusOK {
		t.Fatalf("overview: %d %v", st, out)
	}
	var ov Overview
	raw, _ := json.Marshal(out)
	if err := json.Unmarshal(raw, &ov); err != nil {
		t.Fatal(err)
	}
	if ov.Item != "post1" || ov.Counter != "views" || len(ov.Regions) != 3 {
		t.Fatalf("overview: %s", raw)
	}
	for _, r := range ov.Regions[:2] {
		if !r.Reachable || len(r.Errors) != 0 {
			t.Errorf("%s: reachable %v, errors %v", r.Region, r.Reachable, r.Errors)
		}
		likes, conv, ctr, status := r.Likes, r.Convergence, r.Counter, r.Status
		if likes == nil || conv == nil || ctr == nil || status == nil {
			t.Fatalf("%s: a part is missing in %s", r.Region, raw)
		}
		if likes.Count != 2 || likes.Replicas[r.Region+"-1"].P != 2 || !conv.Converged || len(conv.Peers) != 2 ||
			ctr.Value != 7 || status.Region != r.Region {
			t.Errorf("%s: likes %+v, convergence %+v, counter %+v, status %+v", r.Region, likes, conv, ctr, status)
		}
	}
	// Milestones: us's newest, asked for with the dashboard's limit; eu has
	// them off, which is not an error.
	if ms := ov.Regions[0].Milestones; ms == nil || ms.Total != 3 || len(ms.Milestones) != 1 || ms.Milestones[0].Number != 1000 {
		t.Errorf("us milestones: %+v", ms)
	}
	if got := fakes[0].milestonesLimit(); got != strconv.Itoa(dashMilestones) {
		t.Errorf("us was asked for %q milestones, want %d", got, dashMilestones)
	}
	if sm := ov.Regions[0].Shards; sm == nil || sm.Region != "us" || len(sm.Replicas) != 1 || sm.Replicas[0].Count != 1024 {
		t.Errorf("us shards: %+v", sm)
	}
	if ov.Regions[1].Milestones != nil {
		t.Errorf("eu has milestones off, yet: %+v", ov.Regions[1].Milestones)
	}
	ap := ov.Regions[2]
	if ap.Region != "ap" || ap.Reachable || ap.Likes != nil || len(ap.Errors) != 7 {
		t.Errorf("unreachable region: %+v", ap)
	}
	if len(ov.Links) != 3 || !ov.Links[0].Up || ov.Links[0].BytesBA != 20 || ov.LinksError != "" {
		t.Errorf("links %+v, error %q", ov.Links, ov.LinksError)
	}

	// A region's error answer is reported as the part's error, not as the
	// whole overview failing.
	_, out = dashDo(t, d, "GET", "/api/overview?item=broken")
	raw, _ = json.Marshal(out)
	_ = json.Unmarshal(raw, &ov)
	if e := ov.Regions[0].Errors["likes"]; !strings.Contains(e, "503 not_ready: replica is recovering") || !ov.Regions[0].Reachable {
		t.Errorf("broken item: errors %v", ov.Regions[0].Errors)
	}
}

func TestDashboardForwardsActions(t *testing.T) {
	d, fakes := fakeDashboard(t)
	us := fakes[0]

	st, out := dashDo(t, d, "POST", "/api/links/us/eu?up=false")
	if st != http.StatusOK || out["up"] != false {
		t.Fatalf("cut: %d %v", st, out)
	}
	if got := us.recorded(); len(got) != 1 || got[0] != `PUT /v1/admin/links/us/eu Bearer admintok {"up":false}` {
		t.Fatalf("cut forwarded as %q", got)
	}
	_, out = dashDo(t, d, "GET", "/api/overview")
	if links := out["links"].([]any); links[0].(map[string]any)["up"] != false {
		t.Errorf("after cut, links %v", links)
	}
	if st, out := dashDo(t, d, "POST", "/api/links/us/eu?up=maybe"); st != http.StatusBadRequest {
		t.Errorf("up=maybe: %d %v", st, out)
	}

	st, out = dashDo(t, d, "POST", "/api/like?region=eu&item=post1&user=alice")
	if st != http.StatusOK || out["user"] != "alice" {
		t.Fatalf("like: %d %v", st, out)
	}
	if got := fakes[1].recorded(); len(got) != 1 || got[0] != "PUT /v1/likes/post1/alice Bearer writetok " {
		t.Fatalf("like forwarded as %q", got)
	}
	st, out = dashDo(t, d, "POST", "/api/like?region=us&item=post1")
	if st != http.StatusOK || !strings.HasPrefix(out["user"].(string), "dash-") {
		t.Fatalf("like by a random user: %d %v", st, out)
	}
	// A replica's id picks it too (a sharded region has several).
	st, out = dashDo(t, d, "POST", "/api/like?region=eu-1&item=post1&user=carol")
	if got := fakes[1].recorded(); st != http.StatusOK || len(got) != 2 || got[1] != "PUT /v1/likes/post1/carol Bearer writetok " {
		t.Fatalf("like at eu-1: %d %v, forwarded as %q", st, out, got)
	}
	st, out = dashDo(t, d, "POST", "/api/incr?region=us&counter=views")
	if st != http.StatusOK || out["value"] != 8.0 {
		t.Fatalf("incr: %d %v", st, out)
	}

	st, out = dashDo(t, d, "POST", "/api/burst?region=us&item=post1&n=25")
	if st != http.StatusOK || out["ok"] != 25.0 || out["failed"] != 0.0 {
		t.Fatalf("burst: %d %v", st, out)
	}
	users := map[string]bool{}
	for _, w := range us.recorded() {
		if strings.HasPrefix(w, "PUT /v1/likes/post1/dash-") {
			users[strings.Fields(w)[1]] = true
		}
	}
	if len(users) != 26 { // the random like and the burst, all distinct
		t.Errorf("%d distinct users liked at us, want 26", len(users))
	}

	// The unreachable region: a like there fails as a bad gateway, a burst
	// reports its failures.
	if st, out := dashDo(t, d, "POST", "/api/like?region=ap&item=post1"); st != http.StatusBadGateway || out["error"] == nil {
		t.Errorf("like at a dead region: %d %v", st, out)
	}
	if st, out := dashDo(t, d, "POST", "/api/burst?region=ap&item=post1&n=3"); st != http.StatusBadGateway || out["failed"] != 3.0 {
		t.Errorf("burst at a dead region: %d %v", st, out)
	}
	for _, target := range []string{"/api/like?region=mars&item=x", "/api/burst?region=us&item=x&n=100000", "/api/like?region=us"} {
		if st, out := dashDo(t, d, "POST", target); st < 400 || st >= 500 || out["error"] == nil {
			t.Errorf("%s: %d %v", target, st, out)
		}
	}
}

func TestDashboardGuards(t *testing.T) {
	d, fakes := fakeDashboard(t)
	// A cross-site form post carries no custom header.
	req := httptest.NewRequest("POST", "/api/links/us/eu?up=false", nil)
	req.Host = "localhost:8080"
	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden || len(fakes[0].recorded()) != 0 {
		t.Errorf("POST without %s: %d %s", Header, rec.Code, rec.Body)
	}
	// DNS rebinding: a foreign name for 127.0.0.1.
	req = httptest.NewRequest("GET", "/api/overview", nil)
	req.Host = "evil.example:8080" // httptest's default Host, example.com, is refused too
	rec = httptest.NewRecorder()
	d.ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Errorf("Host evil.example: %d", rec.Code)
	}
	for _, host := range []string{"localhost:8080", "127.0.0.1:8080", "[::1]:8080", "127.0.0.1"} {
		req := httptest.NewRequest("GET", "/", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "<title>tally") {
			t.Errorf("index via Host %s: %d", host, rec.Code)
		}
	}
	if st, _ := dashDo(t, d, "GET", "/nope"); st != http.StatusNotFound {
		t.Errorf("/nope: %d", st)
	}
}

// Close joins the serve loop and cuts off a request still in flight.
func TestDashboardServerClose(t *testing.T) {
	hang := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(hang)
	d := New(Config{Regions: []Target{{Region: "us", Replica: "us-1", URL: slow.URL}}})
	s, err := Start(context.Background(), "127.0.0.1:0", d, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest("POST", "http://"+s.Addr().String()+"/api/burst?region=us&item=x&n=50", nil)
		req.Header.Set(Header, "1")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	time.Sleep(200 * time.Millisecond) // the burst is hanging on the slow region
	start := time.Now()
	s.Close()
	s.Close() // idempotent
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("Close took %s", el)
	}
	select {
	case <-errc:
	case <-time.After(5 * time.Second):
		t.Fatal("the in-flight burst did not end")
	}
	var nilServer *Server
	nilServer.Close() // --dashboard "": nothing to close
}
