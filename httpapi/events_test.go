package httpapi

import (
	"fmt"
	"github.com/tally-dev/tally/frontdoor"
	"net/http"
	"strings"
	"testing"
)

func TestEventsArrayAndNDJSON(t *testing.T) {
	e := newEnv(t, envOpts{})
	b := e.do("POST", "/v1/events", `[
		{"type":"like","item":"v1","user":"a"},
		{"type":"like","videoId":"v1","userId":"b"},
		{"type":"like","item":"v1","user":"a"},
		{"type":"unlike","item":"v1","user":"b"},
		{"type":"incr","key":"views","by":5,"idempotency_key":"k1"},
		{"type":"incr","key":"views","by":5,"idempotency_key":"k1"},
		{"type":"incr","key":"views"}
	]`).ok(t)
	if num(t, b, "applied") != 7 || num(t, b, "rejected") != 0 {
		t.Fatalf("%v", b)
	}
	res := b["results"].([]any)
	want := []struct {
		value     int64
		changed   bool
		duplicate bool
	}{{1, true, false}, {2, true, false}, {2, false, false}, {1, true, false}, {5, false, false}, {5, false, true}, {6, false, false}}
	for i, w := range want {
		r := res[i].(map[string]any)
		changed, _ := r["changed"].(bool)
		dup, _ := r["duplicate"].(bool)
		if r["ok"] != true || num(t, r, "value") != w.value || changed != w.changed || dup != w.duplicate {
			t.Errorf("event %d: %v, want %+v", i, r, w)
		}
	}
	nd := "{\"type\":\"like\",\"item\":\"v1\",\"user\":\"c\"}\n{\"type\":\"incr\",\"key\":\"views\",\"by\":-1}\n"
	b = e.do("POST", "/v1/events", nd).ok(t)
	if num(t, b, "applied") != 2 {
		t.Fatalf("ndjson: %v", b)
	}
	if e.likes("v1") != 2 || e.counter("views") != 5 {
		t.Fatalf("likes %d views %d", e.likes("v1"), e.counter("views"))
	}
}

// A bad event is rejected alone; the rest of the batch applies.
func TestEventsPerEventErrors(t *testing.T) {
	e := newEnv(t, envOpts{})
	b := e.do("POST", "/v1/events", `[
		{"type":"like","item":"v1","user":"ok"},
		{"type":"like","item":"bad/id","user":"u"},
		{"type":"dance","item":"v1","user":"u"},
		{"type":"incr","key":"c","by":99999999999999999},
		{"type":"like","item":"v1","user":"u","by":3},
		{"item":"v1","user":"u"},
		{"type":"like","item":"v1","videoId":"v2","user":"u"}
	]`).ok(t)
	if num(t, b, "applied") != 1 || num(t, b, "rejected") != 6 {
		t.Fatalf("%v", b)
	}
	codes := []string{"", frontdoor.CodeBadID, frontdoor.CodeBadRequest, frontdoor.CodeBadBy, frontdoor.CodeBadRequest, frontdoor.CodeMissingField, frontdoor.CodeBadRequest}
	for i, c := range codes {
		r := b["results"].([]any)[i].(map[string]any)
		if c != "" && (r["code"] != c || r["error"] == "") {
			t.Errorf("event %d: %v, want code %s", i, r, c)
		}
	}
	if e.likes("v1") != 1 || e.counter("c") != 0 {
		t.Fatal("rejected events changed state")
	}
}

// Malformed JSON rejects the whole batch and changes nothing.
func TestEventsMalformedBatch(t *testing.T) {
	e := newEnv(t, envOpts{})
	for name, body := range map[string]string{
		"empty":         "",
		"empty array":   "[]",
		"not json":      "hello",
		"truncated":     `[{"type":"like","item":"v","user":"u"}`,
		"unknown field": `[{"type":"like","item":"v","user":"u","colour":"red"}]`,
		"trailing":      `[{"type":"like","item":"v","user":"u"}] x`,
		"bad ndjson":    "{\"type\":\"like\",\"item\":\"v\",\"user\":\"u\"}\n{oops}\n",
		"wrong type":    `[{"type":"incr","key":"c","by":"five"}]`,
	} {
		r := e.do("POST", "/v1/events", body)
		if r.status != http.StatusBadRequest {
			t.Errorf("%s: status %d %s", name, r.status, r.raw)
		}
	}
	if e.likes("v") != 0 || e.counter("c") != 0 {
		t.Fatal("a rejected batch changed state")
	}
	var sb strings.Builder
	sb.WriteString("[")
	for i := range MaxBatchEvents + 1 {
		if i > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, `{"type":"incr","key":"c"}`)
	}
	sb.WriteString("]")
	big := newEnv(t, envOpts{api: func(c *Config) { c.MaxBodyBytes = 1 << 22 }})
	big.do("POST", "/v1/events", sb.String()).isError(t, http.StatusRequestEntityTooLarge, frontdoor.CodeBodyTooLarge)
	if big.counter("c") != 0 {
		t.Fatal("an over-long batch was partly applied")
	}
}

// One batch adds at most MaxBy to a key in each direction: the events past
// the cap are rejected alone, so no batch can take a replica's entry to
// its limit (8,193 maximal increments once left a key refusing every
// increment for good).
func TestEventsCapTheSumOfByPerKey(t *testing.T) {
	e := newEnv(t, envOpts{})
	var body strings.Builder
	for range 5 {
		body.WriteString(`{"type":"incr","key":"hot","by":1099511627776}` + "\n") // 2^40
	}
	body.WriteString(`{"type":"incr","key":"hot","by":-1099511627776}` + "\n")
	body.WriteString(`{"type":"incr","key":"other","by":1099511627776}` + "\n")
	b := e.do("POST", "/v1/events", body.String()).ok(t)
	if num(t, b, "applied") != 3 || num(t, b, "rejected") != 4 {
		t.Fatalf("answer %v: want the first +2^40, the -2^40 and the other key applied", b)
	}
	results := b["results"].([]any)
	for i := 1; i < 5; i++ {
		if r := results[i].(map[string]any); r["code"] != "bad_by" {
			t.Fatalf("event %d: %v, want bad_by", i, r)
		}
	}
	if v := e.counter("hot"); v != 0 {
		t.Fatalf("hot = %d, want 2^40 - 2^40 = 0", v)
	}
	if v := e.counter("other"); v != 1<<40 {
		t.Fatalf("other = %d, want 2^40", v)
	}
}

// A batch of keyed grants sent again (a client's retry after a timeout)
// grants nothing more: every grant answers duplicate and the budget is
// granted once. The key with another amount is refused with
// idempotency_mismatch; a grant without a key still grants each time.
// POST /v1/budgets/{key}/grant takes the same keys, in the body or the
// Idempotency-Key header.
func TestEventsGrantIdempotent(t *testing.T) {
	e := newEnv(t, envOpts{})
	batch := `[
		{"type":"grant","key":"camp","by":100,"idempotency_key":"fund-1"},
		{"type":"grant","key":"camp","by":50,"idempotency_key":"fund-2"},
		{"type":"spend","key":"camp","by":10,"idempotency_key":"buy-1"}
	]`
	for attempt := range 3 {
		b := e.do("POST", "/v1/events", batch).ok(t)
		if num(t, b, "applied") != 3 {
			t.Fatalf("attempt %d: %v", attempt, b)
		}
		for i, r := range b["results"].([]any) {
			r := r.(map[string]any)
			// A first application answers the budget after it; a
			// duplicate the budget as it is now.
			want := []int64{100, 150, 140}[i]
			if attempt > 0 {
				want = 140
			}
			if dup, _ := r["duplicate"].(bool); dup != (attempt > 0) || num(t, r, "value") != want {
				t.Errorf("attempt %d, event %d: %v", attempt, i, r)
			}
		}
		if r := e.do("GET", "/v1/budgets/camp", "").ok(t); num(t, r, "remaining") != 140 || num(t, r, "granted") != 150 {
			t.Fatalf("attempt %d: budget %v, want 150 granted once, 140 remaining", attempt, r)
		}
	}
	b := e.do("POST", "/v1/events", `{"type":"grant","key":"camp","by":99,"idempotency_key":"fund-1"}`+"\n").ok(t)
	if r := b["results"].([]any)[0].(map[string]any); r["ok"] != false || r["code"] != frontdoor.CodeIdempotencyMismatch {
		t.Fatalf("fund-1 with another amount: %v", r)
	}
	for range 2 {
		e.do("POST", "/v1/events", `{"type":"grant","key":"open","by":5}`+"\n").ok(t)
	}
	if r := e.do("GET", "/v1/budgets/open", "").ok(t); num(t, r, "remaining") != 10 {
		t.Fatalf("unkeyed grants: %v, want each counted", r)
	}

	for attempt := range 2 {
		r := e.do("POST", "/v1/budgets/route/grant", `{"by":30,"idempotency_key":"r-1"}`).ok(t)
		if r["duplicate"] != (attempt > 0) || num(t, r, "remaining") != 30 {
			t.Fatalf("route attempt %d: %v", attempt, r)
		}
	}
	r := e.do("POST", "/v1/budgets/route/grant", `{"by":30}`, "Idempotency-Key", "r-1").ok(t)
	if r["duplicate"] != true || num(t, r, "remaining") != 30 {
		t.Fatalf("the same key in the header: %v", r)
	}
	e.do("POST", "/v1/budgets/route/grant", `{"by":31}`, "Idempotency-Key", "r-1").isError(t, http.StatusConflict, frontdoor.CodeIdempotencyMismatch)
}

// Grants and spends in a batch: each spend is checked against the rights
// as the batch's earlier events left them, a refused one is rejected alone
// with the code the spend route gives, and a retried idempotency key
// spends once.
func TestEventsBudgets(t *testing.T) {
	e := newEnv(t, envOpts{})
	b := e.do("POST", "/v1/events", `[
		{"type":"grant","key":"camp","by":10},
		{"type":"spend","key":"camp","by":3,"idempotency_key":"imp-1"},
		{"type":"spend","key":"camp","by":3,"idempotency_key":"imp-1"},
		{"type":"spend","key":"camp"},
		{"type":"spend","key":"camp","by":7},
		{"type":"spend","key":"camp","by":6},
		{"type":"spend","key":"camp","by":0},
		{"type":"grant","key":"camp"},
		{"type":"grant","key":"camp","by":2,"idempotency_key":"g"},
		{"type":"spend","key":"camp","at":"2026-11-26T00:00:00Z"},
		{"type":"spend","key":"camp","user":"u"},
		{"type":"spend","key":"no/key"}
	]`).ok(t)
	if num(t, b, "applied") != 6 || num(t, b, "rejected") != 6 {
		t.Fatalf("%v", b)
	}
	want := []struct {
		value     int64
		duplicate bool
		code      string
	}{{10, false, ""}, {7, false, ""}, {7, true, ""}, {6, false, ""}, {0, false, frontdoor.CodeBudgetExhausted}, {0, false, ""},
		{0, false, frontdoor.CodeBadBy}, {0, false, frontdoor.CodeMissingField}, {2, false, ""}, {0, false, frontdoor.CodeBadRequest}, {0, false, frontdoor.CodeBadRequest}, {0, false, frontdoor.CodeBadID}}
	for i, w := range want {
		r := b["results"].([]any)[i].(map[string]any)
		dup, _ := r["duplicate"].(bool)
		code, _ := r["code"].(string)
		if code != w.code || r["ok"] != (w.code == "") || num(t, r, "value") != w.value || dup != w.duplicate {
			t.Errorf("event %d: %v, want %+v", i, r, w)
		}
	}
	// The batch spent 3 + 1 + 6 of 10; the refused 7 spent nothing; the
	// keyed grant added 2.
	if r := e.do("GET", "/v1/budgets/camp", "").ok(t); num(t, r, "remaining") != 2 || num(t, r, "spent") != 10 {
		t.Fatalf("budget after the batch: %v", r)
	}
	b = e.do("POST", "/v1/events", `{"type":"spend","key":"camp","by":3,"idempotency_key":"imp-1"}`+"\n").ok(t)
	if r := b["results"].([]any)[0].(map[string]any); r["ok"] != true || r["duplicate"] != true {
		t.Fatalf("a retried key in a later batch: %v", r)
	}
}
