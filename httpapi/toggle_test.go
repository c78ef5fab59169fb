package httpapi

import (
	"fmt"
	"github.com/tally-dev/tally/frontdoor"
	"net/http"
	"strings"
	"testing"
	"time"
)

// POST /v1/likes/{item}/{user}/toggle flips the user's state and answers
// it; with an idempotency key (body or header) a retry flips once.
func TestToggleRoute(t *testing.T) {
	e := newEnv(t, envOpts{})
	for i, want := range []bool{true, false, true} {
		b := e.do("POST", "/v1/likes/p/u/toggle", "").ok(t)
		if b["liked"] != want || b["changed"] != true || num(t, b, "count") != map[bool]int64{true: 1, false: 0}[want] {
			t.Fatalf("toggle #%d: %v", i, b)
		}
		if _, dup := b["duplicate"]; dup {
			t.Fatalf("toggle #%d says duplicate: %v", i, b)
		}
	}
	first := e.do("POST", "/v1/likes/p/u/toggle", `{"idempotency_key":"tap-1"}`).ok(t)
	if first["liked"] != false {
		t.Fatalf("keyed toggle: %v", first)
	}
	for _, retry := range []resp{
		e.do("POST", "/v1/likes/p/u/toggle", `{"idempotency_key":"tap-1"}`),
		e.do("POST", "/v1/likes/p/u/toggle", "", "Idempotency-Key", "tap-1"),
	} {
		if b := retry.ok(t); b["liked"] != false || b["changed"] != false || b["duplicate"] != true || num(t, b, "count") != 0 {
			t.Fatalf("retried toggle: %v", b)
		}
	}
	if got := e.likes("p"); got != 0 {
		t.Fatalf("count %d, want 0", got)
	}
	for _, c := range []struct {
		body, code string
		header     []string
	}{
		{`{"at":1700000000000}`, frontdoor.CodeUnknownField, nil},
		{`{"idempotency_key":"a/b"}`, frontdoor.CodeBadID, nil},
		{`{"idempotency_key":"a"}`, frontdoor.CodeBadRequest, []string{"Idempotency-Key", "b"}},
		{`[`, frontdoor.CodeBadJSON, nil},
	} {
		e.do("POST", "/v1/likes/p/u/toggle", c.body, c.header...).isError(t, http.StatusBadRequest, c.code)
	}
	e.do("POST", "/v1/likes/p/bad%2Fuser/toggle", "").isError(t, http.StatusBadRequest, frontdoor.CodeBadID)
}

// A toggle event flips like the route and says the new state; it takes
// an idempotency key and no time.
func TestToggleEvents(t *testing.T) {
	e := newEnv(t, envOpts{})
	body := `{"type":"toggle","item":"p","user":"u","idempotency_key":"t1"}
{"type":"toggle","videoId":"p","userId":"u","idempotency_key":"t1"}
{"type":"toggle","item":"p","user":"u"}
{"type":"toggle","item":"p","user":"u","at":1700000000000}
{"type":"like","item":"p","user":"u","idempotency_key":"t2"}`
	r := e.do("POST", "/v1/events", body, "Content-Type", "application/x-ndjson").ok(t)
	res := r["results"].([]any)
	get := func(i int) map[string]any { return res[i].(map[string]any) }
	if g := get(0); g["ok"] != true || g["liked"] != true || g["changed"] != true || num(t, g, "value") != 1 {
		t.Errorf("first toggle: %v", g)
	}
	if g := get(1); g["ok"] != true || g["liked"] != true || g["duplicate"] != true || num(t, g, "value") != 1 {
		t.Errorf("its retry: %v", g)
	}
	if g := get(2); g["ok"] != true || g["liked"] != false || num(t, g, "value") != 0 {
		t.Errorf("unkeyed toggle: %v", g)
	}
	if g := get(3); g["ok"] != false || g["code"] != frontdoor.CodeBadRequest {
		t.Errorf("a toggle with a time: %v, want bad_request", g)
	}
	if g := get(4); g["ok"] != true || g["liked"] != true || g["changed"] != true {
		t.Errorf("a keyed like: %v, want liked and changed", g)
	}
	if _, ok := get(0)["liked"]; !ok {
		t.Error("no liked in a toggle's result")
	}
	if strings.Contains(e.do("POST", "/v1/events", `{"type":"like","item":"p","user":"v"}`).raw, `"liked"`) {
		t.Error("a like's result says liked: only toggles do")
	}
}

// A toggle's key is remembered after the user's later actions: toggle
// tkB (liked), toggle tkC (unliked), retry tkB answers duplicate:true,
// liked:true, changed:false and flips nothing; so does a keyed like's
// retry after an unlike, by the route (body or header) and by events.
func TestToggleRetryAfterLaterActionsRoute(t *testing.T) {
	e := newEnv(t, envOpts{})
	if b := e.do("POST", "/v1/likes/p/u/toggle", "", "Idempotency-Key", "tkB").ok(t); b["liked"] != true || b["changed"] != true {
		t.Fatalf("tkB: %v", b)
	}
	if b := e.do("POST", "/v1/likes/p/u/toggle", `{"idempotency_key":"tkC"}`).ok(t); b["liked"] != false || b["changed"] != true {
		t.Fatalf("tkC: %v", b)
	}
	b := e.do("POST", "/v1/likes/p/u/toggle", `{"idempotency_key":"tkB"}`).ok(t)
	if b["liked"] != true || b["changed"] != false || b["duplicate"] != true || num(t, b, "count") != 0 {
		t.Fatalf("retry of tkB: %v, want duplicate, liked true, changed false, count 0", b)
	}
	if got := e.likes("p"); got != 0 {
		t.Fatalf("count %d after the retry, want 0", got)
	}

	// A keyed like, an unlike, and the like's retry.
	if b := e.do("PUT", "/v1/likes/q/u", `{"idempotency_key":"lk1"}`).ok(t); b["liked"] != true || b["changed"] != true {
		t.Fatalf("keyed like: %v", b)
	}
	e.do("DELETE", "/v1/likes/q/u", "").ok(t)
	for _, retry := range []resp{
		e.do("PUT", "/v1/likes/q/u", "", "Idempotency-Key", "lk1"),
		e.do("POST", "/v1/events", `{"type":"like","item":"q","user":"u","idempotency_key":"lk1"}`),
	} {
		got := retry.ok(t)
		if rs, ok := got["results"].([]any); ok {
			got = rs[0].(map[string]any)
			if num(t, got, "value") != 0 {
				t.Fatalf("retried like event: %v", got)
			}
		} else if num(t, got, "count") != 0 {
			t.Fatalf("retried like: %v", got)
		}
		if got["liked"] != true || got["duplicate"] != true || got["changed"] == true {
			t.Fatalf("retried like after an unlike: %v, want duplicate, liked true", got)
		}
	}
	if got := e.likes("q"); got != 0 {
		t.Fatalf("count of q %d, want 0", got)
	}
	e.do("PUT", "/v1/likes/q/u", `{"idempotency_key":"a/b"}`).isError(t, http.StatusBadRequest, frontdoor.CodeBadID)
	e.do("DELETE", "/v1/likes/q/u", `{"idempotency_key":"a"}`, "Idempotency-Key", "b").isError(t, http.StatusBadRequest, frontdoor.CodeBadRequest)
}

// Issue 34's scenario through the API: an unlike at t, then a like with
// t − 30 s arriving later, by every route that takes a time: the user
// stays unliked, and the late like answers liked:false, changed:false.
func TestLikeClientTimeRoutes(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.do("PUT", "/v1/likes/p/u", "").ok(t)
	// The unlike's time is after the like's (the replica's clock, read
	// before now).
	now := time.Now().UnixMilli()
	late := []struct{ method, path, body string }{
		{"PUT", "/v1/likes/p/u", fmt.Sprintf(`{"at":%d}`, now-30_000)},
		{"POST", "/v1/likes", fmt.Sprintf(`{"videoId":"p","userId":"u","timestamp":%d}`, (now-30_000)/1000)},
		{"POST", "/v1/events", fmt.Sprintf(`{"type":"like","item":"p","user":"u","at":%q}`, time.UnixMilli(now-30_000).UTC().Format(time.RFC3339Nano))},
	}
	if b := e.do("DELETE", "/v1/likes/p/u", fmt.Sprintf(`{"at":%d}`, now)).ok(t); b["liked"] != false || b["changed"] != true {
		t.Fatalf("unlike at t: %v", b)
	}
	for _, l := range late {
		r := e.do(l.method, l.path, l.body).ok(t)
		if l.path == "/v1/events" {
			r = r["results"].([]any)[0].(map[string]any)
			if r["changed"] == true || num(t, r, "value") != 0 {
				t.Errorf("late like event: %v", r)
			}
			continue
		}
		if r["liked"] != false || r["changed"] != false || num(t, r, "count") != 0 {
			t.Errorf("%s %s: %v, want liked false, unchanged, count 0", l.method, l.path, r)
		}
	}
	if b := e.do("GET", "/v1/likes/p/u", "").ok(t); b["liked"] != false {
		t.Fatalf("record: %v", b)
	}
	// Older than the accepted skew: 400 bad_time, as before.
	e.do("PUT", "/v1/likes/p/u", fmt.Sprintf(`{"at":%d}`, now-10*60_000)).isError(t, http.StatusBadRequest, frontdoor.CodeBadTime)
	e.do("PUT", "/v1/likes/p/u", `{"at":1,"timestamp":2}`).isError(t, http.StatusBadRequest, frontdoor.CodeBadRequest)
	e.do("PUT", "/v1/likes/p/u", `{"when":1}`).isError(t, http.StatusBadRequest, frontdoor.CodeUnknownField)
	// A like with a time after the unlike's wins.
	if b := e.do("PUT", "/v1/likes/p/u", fmt.Sprintf(`{"at":%d}`, now+1)).ok(t); b["liked"] != true || b["changed"] != true {
		t.Fatalf("a later like: %v", b)
	}
}
