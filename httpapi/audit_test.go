package httpapi

import (
	"github.com/tally-dev/tally/frontdoor"
	"net/http"
	"testing"
)

// The history lists a pair's likes and unlikes in order; the audit finds
// the log accounts for every own entry; with the log off both are 404.
func TestHistoryAndAudit(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.do("PUT", "/v1/likes/post1/alice", "").ok(t)
	e.do("PUT", "/v1/likes/post1/alice", "").ok(t)
	e.do("DELETE", "/v1/likes/post1/alice", "").ok(t)
	e.do("POST", "/v1/counters/views/incr", `{"by":3,"idempotency_key":"k1"}`).ok(t)
	b := e.do("GET", "/v1/likes/post1/alice/history", "").ok(t)
	acts, _ := b["actions"].([]any)
	if len(acts) != 3 || b["complete"] != true {
		t.Fatalf("history %v: want 3 actions, complete", b)
	}
	for i, want := range []bool{true, true, false} {
		a := acts[i].(map[string]any)
		if a["liked"] != want || a["replica"] != "us-1" || a["region"] != "us" || a["at"] == nil {
			t.Fatalf("action %d: %v", i, a)
		}
	}
	if b := e.do("GET", "/v1/likes/post1/alice/history?limit=1", "").ok(t); len(b["actions"].([]any)) != 1 {
		t.Fatalf("limit 1: %v", b)
	}
	e.do("GET", "/v1/likes/post1/alice/history?limit=0", "").isError(t, http.StatusBadRequest, frontdoor.CodeBadRequest)

	a := e.do("GET", "/v1/audit", "").ok(t)
	if a["ok"] != true || a["complete"] != true || num(t, a, "events") != 4 || num(t, a, "vectors") != 2 {
		t.Fatalf("audit %v", a)
	}
	if a := e.do("GET", "/v1/audit?kind=counters&key=views", "").ok(t); a["ok"] != true || num(t, a, "vectors") != 1 {
		t.Fatalf("audit of one counter %v", a)
	}
	e.do("GET", "/v1/audit?kind=sums&key=views", "").isError(t, http.StatusBadRequest, frontdoor.CodeBadRequest)

	off := newEnv(t, envOpts{noLog: true})
	off.do("GET", "/v1/audit", "").isError(t, http.StatusNotFound, frontdoor.CodeNotFound)
	off.do("GET", "/v1/likes/post1/alice/history", "").isError(t, http.StatusNotFound, frontdoor.CodeNotFound)
}
