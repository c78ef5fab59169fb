package httpapi

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
)

// The answers of an approximate counter say so and bound the estimate; an
// exact counter's answers are byte for byte what they were before
// approximate counters existed.
func TestApproxCounterAnswers(t *testing.T) {
	e := newEnv(t, envOpts{approx: []region.ApproxRule{{Prefix: "hot:", Error: 0.01}}})

	if r := e.do("POST", "/v1/counters/views/incr", ""); r.raw != `{"key":"views","value":1,"duplicate":false}`+"\n" {
		t.Fatalf("exact incr: %s", r.raw)
	}
	if r := e.do("GET", "/v1/counters/views", ""); r.raw != `{"key":"views","value":1,"approx":false,"replicas":{"us-1":{"p":1,"n":0}}}`+"\n" {
		t.Fatalf("exact read: %s", r.raw)
	}

	// Below 1/E² = 10,000 the step is 1: the first increment counts whole.
	if r := e.do("POST", "/v1/counters/hot:a/incr", `{"by":1000000}`); r.raw != `{"key":"hot:a","value":1000000,"duplicate":false,"approx":true,"counted":1000000}`+"\n" {
		t.Fatalf("approx incr: %s", r.raw)
	}
	// At 10^6 the step is 128 (2·10⁻⁴·10⁶ = 200).
	var counted []int64
	for range 20 {
		var inc api.Incr
		decode(t, e.do("POST", "/v1/counters/hot:a/incr", ""), &inc)
		if !inc.Approx || inc.Counted == nil || *inc.Counted%128 != 0 || inc.Duplicate {
			t.Fatalf("approx incr: %+v", inc)
		}
		counted = append(counted, *inc.Counted)
	}
	var c api.Counter
	decode(t, e.do("GET", "/v1/counters/hot:a", ""), &c)
	m := float64(c.Replicas["us-1"].P + c.Replicas["us-1"].N)
	if !c.Approx || c.Mode != api.ModeApprox || c.Error == nil || c.Error.Relative != 0.01 ||
		c.Error.Std != int64(math.Ceil(0.01*m)) || c.Error.Bound95 != 2*c.Error.Std || c.Error.Std < 10_000 {
		t.Fatalf("approx read: %+v (error %+v); counted %v", c, c.Error, counted)
	}

	// A keyed retry is a duplicate of the first decision.
	var first, retry api.Incr
	decode(t, e.do("POST", "/v1/counters/hot:a/incr", `{"idempotency_key":"r1"}`), &first)
	decode(t, e.do("POST", "/v1/counters/hot:a/incr", `{"idempotency_key":"r1"}`), &retry)
	if first.Counted == nil || !retry.Duplicate || !retry.Approx || retry.Counted != nil || retry.Value != first.Value {
		t.Fatalf("keyed: first %+v, retry %+v", first, retry)
	}
	e.do("POST", "/v1/counters/hot:a/incr", `{"by":2,"idempotency_key":"r1"}`).isError(t, 409, frontdoor.CodeIdempotencyMismatch)

	// Batched: each approximate increment says so, and what it counted
	// if anything.
	r := e.do("POST", "/v1/events", `[{"type":"incr","key":"hot:a","by":300},{"type":"incr","key":"views"}]`)
	var ev api.EventsResult
	decode(t, r, &ev)
	if c := ev.Results[0].Counted; !ev.Results[0].Approx || c == nil || *c != 256 && *c != 384 ||
		ev.Results[1].Approx || ev.Results[1].Counted != nil || strings.Count(r.raw, "approx") != 1 {
		t.Fatalf("events: %s", r.raw)
	}
	zero := 0
	for range 20 {
		r := e.do("POST", "/v1/events", `[{"type":"incr","key":"hot:a"}]`)
		var ev api.EventsResult
		decode(t, r, &ev)
		if !ev.Results[0].Approx {
			t.Fatalf("events: %s", r.raw)
		}
		if ev.Results[0].Counted == nil {
			zero++
			if r.raw != `{"applied":1,"rejected":0,"results":[{"ok":true,"value":`+strconv.FormatInt(ev.Results[0].Value, 10)+`,"approx":true}]}`+"\n" {
				t.Fatalf("events: %s", r.raw)
			}
		}
	}
	if zero == 0 {
		t.Fatal("no batched increment counted nothing, at step 128")
	}

	// Windows and series of the approximate counter carry a bound; the
	// exact counter's do not. Series points split the bound.
	var w api.Window
	decode(t, e.do("GET", "/v1/counters/hot:a/window?last=60s", ""), &w)
	wm := float64(w.Replicas["us-1"].P + w.Replicas["us-1"].N)
	cr, _ := e.rep.Counters().Get("hot:a")
	cm := float64(cr.Vector.Get("us-1").P + cr.Vector.Get("us-1").N)
	if !w.Approx || w.Mode != api.ModeApprox || w.Error == nil || w.Value != cr.Value ||
		w.Error.Std != int64(math.Ceil(0.01*math.Sqrt(2*cm*wm))) {
		t.Fatalf("approx window: %+v, error %+v", w, w.Error)
	}
	if r := e.do("GET", "/v1/counters/views/window?last=60s", ""); strings.Contains(r.raw, "mode") || strings.Contains(r.raw, "error") {
		t.Fatalf("exact window: %s", r.raw)
	}
	var tot api.Window
	decode(t, e.do("GET", "/v1/window?kind=counters&last=60s", ""), &tot)
	if !tot.Approx || tot.Mode != api.ModeApprox || tot.Error != nil {
		t.Fatalf("counters total: %+v", tot)
	}
	var likes api.Window
	decode(t, e.do("GET", "/v1/window?kind=likes&last=60s", ""), &likes)
	if likes.Approx || likes.Mode != "" {
		t.Fatalf("likes total: %+v", likes)
	}
	var s api.Series
	decode(t, e.do("GET", "/v1/series?kind=counters&key=hot:a&key=views&last=2m&step=1m", ""), &s)
	if !s.Approx || len(s.Series) != 2 || s.Series[0].Mode != api.ModeApprox || s.Series[0].Error == nil ||
		len(s.Series[0].Error.Std) != len(s.Times) || s.Series[1].Mode != "" || s.Series[1].Error != nil {
		t.Fatalf("series: %+v", s)
	}
	var tr api.Trending
	decode(t, e.do("GET", "/v1/trending?kind=counters&window=10m", ""), &tr)
	if !tr.Approx || len(tr.Items) != 2 || tr.Items[0].Item != "hot:a" || !tr.Items[0].Approx || tr.Items[1].Approx {
		t.Fatalf("trending: %+v", tr)
	}
}

// /v1/status lists the rules; with none, it has no approx key (see
// TestStatusKeys).
func TestStatusListsApproxRules(t *testing.T) {
	e := newEnv(t, envOpts{approx: []region.ApproxRule{{Prefix: "hot:", Error: 0.01}, {Prefix: "", Error: 0.05}}})
	var st api.Status
	decode(t, e.do("GET", "/v1/status", ""), &st)
	want := []api.ApproxRule{{Prefix: "hot:", Error: 0.01}, {Prefix: "", Error: 0.05}}
	if len(st.Approx) != 2 || st.Approx[0] != want[0] || st.Approx[1] != want[1] {
		t.Fatalf("status approx %+v, want %+v", st.Approx, want)
	}
}

func decode(t *testing.T, r resp, v any) {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.raw)
	}
	if err := json.Unmarshal([]byte(r.raw), v); err != nil {
		t.Fatalf("%v: %s", err, r.raw)
	}
}
