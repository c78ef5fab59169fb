package httpapi

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

func TestLikeUnlike(t *testing.T) {
	e := newEnv(t, envOpts{})

	b := e.do("PUT", "/v1/likes/post1/alice", "").ok(t)
	if b["item"] != "post1" || b["user"] != "alice" || b["liked"] != true || b["changed"] != true || num(t, b, "count") != 1 {
		t.Fatalf("first like: %v", b)
	}
	b = e.do("PUT", "/v1/likes/post1/alice", "").ok(t)
	if b["changed"] != false || num(t, b, "count") != 1 {
		t.Fatalf("second like must not count again: %v", b)
	}
	b = e.do("PUT", "/v1/likes/post1/bob", "").ok(t)
	if num(t, b, "count") != 2 {
		t.Fatalf("bob's like: %v", b)
	}

	b = e.do("GET", "/v1/likes/post1", "").ok(t)
	if b["item"] != "post1" || num(t, b, "count") != 2 || b["approx"] != false || num(t, b, "unreconciled") != 0 {
		t.Fatalf("read: %v", b)
	}
	us1, _ := b["replicas"].(map[string]any)["us-1"].(map[string]any)
	if us1 == nil || num(t, us1, "p") != 2 || num(t, us1, "n") != 0 {
		t.Fatalf("replicas: %v", b["replicas"])
	}

	b = e.do("GET", "/v1/likes/post1/alice", "").ok(t)
	if b["liked"] != true || b["item"] != "post1" || b["user"] != "alice" {
		t.Fatalf("liked: %v", b)
	}

	b = e.do("DELETE", "/v1/likes/post1/alice", "").ok(t)
	if b["liked"] != false || b["changed"] != true || num(t, b, "count") != 1 {
		t.Fatalf("unlike: %v", b)
	}
	b = e.do("DELETE", "/v1/likes/post1/alice", "").ok(t)
	if b["changed"] != false || num(t, b, "count") != 1 {
		t.Fatalf("second unlike must not count: %v", b)
	}
	if b = e.do("GET", "/v1/likes/post1/alice", "").ok(t); b["liked"] != false {
		t.Fatalf("liked after unlike: %v", b)
	}
	if e.likes("post1") != 1 {
		t.Fatalf("replica count %d, want 1", e.likes("post1"))
	}
}

func TestReadUnknownItem(t *testing.T) {
	e := newEnv(t, envOpts{})
	b := e.do("GET", "/v1/likes/nothing", "").ok(t)
	if num(t, b, "count") != 0 || b["approx"] != false {
		t.Fatalf("%v", b)
	}
	if r, ok := b["replicas"].(map[string]any); !ok || len(r) != 0 {
		t.Fatalf("replicas must be an empty object: %v", b["replicas"])
	}
	if b = e.do("GET", "/v1/likes/nothing/nobody", "").ok(t); b["liked"] != false {
		t.Fatalf("%v", b)
	}
	if b = e.do("GET", "/v1/counters/nothing", "").ok(t); num(t, b, "value") != 0 {
		t.Fatalf("%v", b)
	}
}

func TestMaxLengthIDs(t *testing.T) {
	e := newEnv(t, envOpts{})
	id := strings.Repeat("a", 128)
	b := e.do("PUT", "/v1/likes/"+id+"/"+"Az09_.:@-", "").ok(t)
	if b["item"] != id || b["user"] != "Az09_.:@-" {
		t.Fatalf("%v", b)
	}
}

func TestSeedStyleLikes(t *testing.T) {
	e := newEnv(t, envOpts{})

	b := e.do("POST", "/v1/likes", `{"videoId":"v1","userId":"alice"}`).ok(t)
	if b["item"] != "v1" || b["user"] != "alice" || b["liked"] != true || b["changed"] != true || num(t, b, "count") != 1 {
		t.Fatalf("seed like: %v", b)
	}
	b = e.do("POST", "/v1/likes", `{"item":"v1","userId":"alice"}`).ok(t)
	if b["changed"] != false || num(t, b, "count") != 1 {
		t.Fatalf("seed like with item, again: %v", b)
	}
	e.do("POST", "/v1/likes", `{"item":"v1","userId":"bob"}`).ok(t)

	b = e.do("DELETE", "/v1/likes/v1", `{"userId":"alice"}`).ok(t)
	if b["liked"] != false || b["changed"] != true || num(t, b, "count") != 1 {
		t.Fatalf("seed unlike: %v", b)
	}
	// The body may repeat the item.
	b = e.do("DELETE", "/v1/likes/v1", `{"videoId":"v1","userId":"bob"}`).ok(t)
	if num(t, b, "count") != 0 {
		t.Fatalf("seed unlike with videoId: %v", b)
	}
	if b = e.do("GET", "/v1/likes/v1", "").ok(t); num(t, b, "count") != 0 {
		t.Fatalf("%v", b)
	}
}

func TestCounters(t *testing.T) {
	e := newEnv(t, envOpts{})

	b := e.do("POST", "/v1/counters/views/incr", "").ok(t) // empty body: by 1
	if b["key"] != "views" || num(t, b, "value") != 1 || b["duplicate"] != false {
		t.Fatalf("%v", b)
	}
	if b = e.do("POST", "/v1/counters/views/incr", `{}`).ok(t); num(t, b, "value") != 2 {
		t.Fatalf("%v", b)
	}
	if b = e.do("POST", "/v1/counters/views/incr", `{"by":10}`).ok(t); num(t, b, "value") != 12 {
		t.Fatalf("%v", b)
	}
	if b = e.do("POST", "/v1/counters/views/incr", `{"by":-15}`).ok(t); num(t, b, "value") != -3 {
		t.Fatalf("negative by: %v", b)
	}
	if b = e.do("POST", "/v1/counters/views/incr", `{"by":0}`).ok(t); num(t, b, "value") != -3 {
		t.Fatalf("zero by: %v", b)
	}
	if b = e.do("POST", "/v1/counters/views/incr", `{"by":null}`).ok(t); num(t, b, "value") != -2 {
		t.Fatalf("null by: %v", b)
	}
	max := `{"by":1099511627776}` // region.MaxBy
	if b = e.do("POST", "/v1/counters/big/incr", max).ok(t); num(t, b, "value") != region.MaxBy {
		t.Fatalf("MaxBy: %v", b)
	}

	b = e.do("GET", "/v1/counters/views", "").ok(t)
	if b["key"] != "views" || num(t, b, "value") != -2 || b["approx"] != false {
		t.Fatalf("%v", b)
	}
	us1 := b["replicas"].(map[string]any)["us-1"].(map[string]any)
	if num(t, us1, "p") != 13 || num(t, us1, "n") != 15 {
		t.Fatalf("replicas: %v", b["replicas"])
	}
}

func TestIdempotentIncr(t *testing.T) {
	e := newEnv(t, envOpts{})

	// Key in the body.
	for i := range 3 {
		b := e.do("POST", "/v1/counters/c/incr", `{"by":5,"idempotency_key":"req-1"}`).ok(t)
		if num(t, b, "value") != 5 || b["duplicate"] != (i > 0) {
			t.Fatalf("attempt %d: %v", i, b)
		}
	}
	// Key in the header.
	for i := range 3 {
		b := e.do("POST", "/v1/counters/c/incr", `{"by":2}`, "Idempotency-Key", "req-2").ok(t)
		if num(t, b, "value") != 7 || b["duplicate"] != (i > 0) {
			t.Fatalf("header attempt %d: %v", i, b)
		}
	}
	// The same key in both places is one key; a retry through either counts once.
	e.do("POST", "/v1/counters/c/incr", `{"by":1,"idempotency_key":"req-3"}`, "Idempotency-Key", "req-3").ok(t)
	b := e.do("POST", "/v1/counters/c/incr", `{"by":1}`, "Idempotency-Key", "req-3").ok(t)
	if num(t, b, "value") != 8 || b["duplicate"] != true {
		t.Fatalf("header retry of a body key: %v", b)
	}
	// A different key counts.
	if b = e.do("POST", "/v1/counters/c/incr", `{"by":1,"idempotency_key":"req-4"}`).ok(t); num(t, b, "value") != 9 {
		t.Fatalf("%v", b)
	}
	if e.counter("c") != 9 {
		t.Fatalf("replica value %d, want 9", e.counter("c"))
	}
	// The same key with another amount is another request: refused, and
	// nothing is applied, in a single call and in a batch alike.
	e.do("POST", "/v1/counters/c/incr", `{"by":7,"idempotency_key":"req-1"}`).isError(t, 409, "idempotency_mismatch")
	b = e.do("POST", "/v1/events", `{"type":"incr","key":"c","by":3,"idempotency_key":"req-4"}`).ok(t)
	if num(t, b, "rejected") != 1 || !strings.Contains(fmt.Sprint(b["results"]), "idempotency_mismatch") {
		t.Fatalf("batch with a reused key: %v", b)
	}
	if e.counter("c") != 9 {
		t.Fatalf("replica value %d after refused reuses, want 9", e.counter("c"))
	}
}

// TestOverflow is the attack of #27 item 7 through the HTTP listener:
// 8,192 increments by 2^40 take this replica's entry of a key to 2^53,
// where a fixed cap made every later +1 answer 422 overflow for good.
// Now the cap rises with the clock (region.EntryCap), far past 2^53
// already, so a +1 is counted and the read is the exact integer.
func TestOverflow(t *testing.T) {
	e := newEnv(t, envOpts{})
	const n = region.FreeEntry / region.MaxBy // 8,192
	body := fmt.Sprintf(`{"by":%d}`, int64(region.MaxBy))
	var (
		next   atomic.Int64
		failed atomic.Value
		wg     sync.WaitGroup
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= n {
				res, err := e.ts.Client().Post(e.ts.URL+"/v1/counters/full/incr", "application/json", strings.NewReader(body))
				if err != nil {
					failed.Store(err.Error())
					return
				}
				raw, _ := io.ReadAll(res.Body)
				_ = res.Body.Close()
				if res.StatusCode != http.StatusOK {
					failed.Store(fmt.Sprintf("status %d: %s", res.StatusCode, raw))
					return
				}
			}
		}()
	}
	wg.Wait()
	if f := failed.Load(); f != nil {
		t.Fatalf("an increment by 2^40 failed: %v", f)
	}
	if got := e.counter("full"); got != region.FreeEntry {
		t.Fatalf("value %d after the attack, want 2^53", got)
	}
	const want = "9007199254740993" // 2^53 + 1, exact
	if r := e.do("POST", "/v1/counters/full/incr", `{"by":1}`); r.status != http.StatusOK || !strings.Contains(r.raw, `"value":`+want) {
		t.Fatalf("+1 after the attack: %d %s, want 200 with value %s", r.status, r.raw, want)
	}
	if r := e.do("GET", "/v1/counters/full", ""); r.status != http.StatusOK || !strings.Contains(r.raw, `"value":`+want) {
		t.Fatalf("read after the attack: %d %s, want value %s", r.status, r.raw, want)
	}
	// Subtracting is still fine.
	e.do("POST", "/v1/counters/full/incr", `{"by":-1}`).ok(t)
}

func TestStatus(t *testing.T) {
	e := newEnv(t, envOpts{})
	b := e.do("GET", "/v1/status", "").ok(t)
	if b["region"] != "us" || b["replica"] != "us-1" || b["durability"] != "fsync" ||
		b["accepting"] != true || b["version"] != "test" {
		t.Fatalf("%v", b)
	}
	if _, ok := b["durability_warning"]; ok {
		t.Fatalf("no warning expected under fsync: %v", b)
	}
	if b["replication"] != "off" {
		t.Fatalf("standalone replica reports replication %v", b["replication"])
	}
}

func TestStatusDurabilityNone(t *testing.T) {
	e := newEnv(t, envOpts{durability: storage.DurabilityNone})
	b := e.do("GET", "/v1/status", "").ok(t)
	if b["durability"] != "none" || b["durability_warning"] == nil {
		t.Fatalf("%v", b)
	}
}

// fakeLinks is a LinkAdmin over a map, computable by hand.
type fakeLinks struct {
	mu sync.Mutex // protects up
	up map[[2]string]bool
}

func (f *fakeLinks) SetLink(a, b string, up bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := [2]string{min(a, b), max(a, b)}
	if _, ok := f.up[k]; !ok {
		return fmt.Errorf("%w: %s-%s", ErrUnknownLink, a, b)
	}
	f.up[k] = up
	return nil
}

func (f *fakeLinks) Links() []Link {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Link
	for k, up := range f.up {
		out = append(out, Link{A: k[0], B: k[1], Up: up})
	}
	return out
}

func TestAdminLinks(t *testing.T) {
	links := &fakeLinks{up: map[[2]string]bool{{"eu", "us"}: true}}
	e := newEnv(t, envOpts{api: func(c *Config) { c.Links = links; c.AdminToken = "secret" }})
	e.do("PUT", "/v1/admin/links/us/eu", `{"up":false}`).isError(t, http.StatusUnauthorized, frontdoor.CodeUnauthorized)
	auth := []string{"Authorization", "Bearer secret"}
	b := e.do("PUT", "/v1/admin/links/us/eu", `{"up":false}`, auth...).ok(t)
	if b["up"] != false || b["a"] != "eu" {
		t.Fatalf("%v", b)
	}
	if links.up[[2]string{"eu", "us"}] {
		t.Fatal("link still up")
	}
	e.do("PUT", "/v1/admin/links/us/ap", `{"up":false}`, auth...).isError(t, http.StatusNotFound, frontdoor.CodeNotFound)
	e.do("PUT", "/v1/admin/links/us/eu", "", auth...).isError(t, http.StatusBadRequest, frontdoor.CodeBadJSON)
	e.do("PUT", "/v1/admin/links/us/eu", `{}`, auth...).isError(t, http.StatusBadRequest, frontdoor.CodeMissingField)
	e.do("PUT", "/v1/admin/links/us/eu", `{"up":"no"}`, auth...).isError(t, http.StatusBadRequest, frontdoor.CodeBadJSON)
	b = e.do("GET", "/v1/admin/links", "", auth...).ok(t)
	if l, _ := b["links"].([]any); len(l) != 1 {
		t.Fatalf("%v", b)
	}
}

func TestNoLinkAdminOutsideLocal(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.do("GET", "/v1/admin/links", "").isError(t, http.StatusNotFound, frontdoor.CodeNotFound)
	e.do("PUT", "/v1/admin/links/us/eu", `{"up":true}`).isError(t, http.StatusNotFound, frontdoor.CodeNotFound)
}

func TestConvergenceStandalone(t *testing.T) {
	e := newEnv(t, envOpts{})
	b := e.do("GET", "/v1/convergence", "").ok(t)
	if b["converged"] != true || b["replica"] != "us-1" {
		t.Fatalf("%v", b)
	}
}
