package chaos

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A holder that kept at least half (rounded down) of what it held passes;
// one left with less, as after an ask answered with all it held, fails.
func TestDrained(t *testing.T) {
	for _, c := range []struct {
		before, after int64
		bad           bool
	}{
		{1000, 500, false}, // the rule: half of the spare
		{1000, 1000, false},
		{1001, 500, false}, // half of an odd holding, rounded down
		{1500, 750, false},
		{1000, 499, true},
		{1000, 0, true}, // give-what-is-asked: everything
		{0, 0, false},
	} {
		v, bad := drained("us", c.before, c.after)
		if bad != c.bad {
			t.Errorf("held %d, holds %d: drained %v, want %v", c.before, c.after, bad, c.bad)
		}
		if bad && (v.Kind != KindBudgetDrained || v.Region != "us" || v.Key != "budget/"+forgedBudget) {
			t.Errorf("held %d, holds %d: violation %s", c.before, c.after, v)
		}
	}
}

// The forged sketch's key must be answered in every region: a 500 (what a
// +Inf estimate gave) or an estimate outside [0, 2^62] is a violation of
// that region; an empty or clamped estimate is not.
func TestCheckForgedSketch(t *testing.T) {
	answers := map[string]struct {
		status int
		body   string
	}{
		"us": {200, `{"keys":["uv:forged"],"estimate":4611686018427387904,"std_error":3.7e16,"approx":true}`}, // the clamp
		"eu": {200, `{"keys":["uv:forged"],"estimate":0,"approx":true}`},                                      // never merged it
		"ap": {500, `{"error":"internal error: response encoding failed","code":"internal"}`},
		"sa": {200, `{"keys":["uv:forged"],"estimate":-9223372036854775808,"approx":true}`}, // int64(+Inf)
	}
	var procs []*proc
	for _, r := range []string{"us", "eu", "ap", "sa"} {
		a := answers[r]
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if req.URL.Path != "/v1/uniques/"+forgedUniqueKey {
				http.NotFound(w, req)
				return
			}
			w.WriteHeader(a.status)
			_, _ = io.WriteString(w, a.body)
		}))
		t.Cleanup(srv.Close)
		procs = append(procs, &proc{region: r, view: r, client: newClient(r, strings.TrimPrefix(srv.URL, "http://"), 1)})
	}
	vs := checkForgedSketch(context.Background(), procs, time.Second)
	var regions []string
	for _, v := range vs {
		if v.Kind != KindUniques || v.Key != "uniques/"+forgedUniqueKey {
			t.Errorf("violation %s", v)
		}
		regions = append(regions, v.Region)
	}
	if strings.Join(regions, ",") != "ap,sa" {
		t.Fatalf("violations %v, want ap's and sa's", vs)
	}
}

// A clock corrected by up to the peers' bound, plus slack, and a running
// replica pass; a clock an hour or a day off, or a replica stopped by a
// forged hello, do not.
func TestForgedClockViolations(t *testing.T) {
	for _, c := range []struct {
		corrMs  int64
		stopped string
		kinds   []string
	}{
		{0, "", nil},
		{60_000, "", nil},  // the bound: peers moved it a minute
		{-62_000, "", nil}, // and a wall clock step kept out
		{3_600_000, "", []string{KindClockDragged}}, // clock-follows-peers
		{90_000_000, "", []string{KindClockDragged}},
		{0, "replica_id_conflict", []string{KindStoppedByHello}},
	} {
		var kinds []string
		for _, v := range forgedClockViolations("us", c.corrMs, c.stopped) {
			if v.Region != "us" {
				t.Errorf("violation %s", v)
			}
			kinds = append(kinds, v.Kind)
		}
		if strings.Join(kinds, ",") != strings.Join(c.kinds, ",") {
			t.Errorf("correction %d ms, stopped %q: violations %v, want %v", c.corrMs, c.stopped, kinds, c.kinds)
		}
	}
}
