package httpapi

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

// A peer's sketch pages with every register at HLLMaxRho are legal pages;
// merged (through the replica's merge path, as replication merges them)
// they saturate the key's sketch. The read must still answer: before the
// estimate was clamped it was +Inf, and GET /v1/uniques/vid answered 500
// "response encoding failed", for good, with no log line.
func TestSaturatedSketchStillReads(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.do("POST", "/v1/uniques/vid", `{"ids":["alice","bob"]}`).ok(t)
	var sat crdt.HLLPage
	for i := range sat {
		sat[i] = crdt.HLLMaxRho
	}
	merges := make([]region.SketchMerge, crdt.HLLPages)
	for pg := range merges {
		merges[pg] = region.SketchMerge{Kind: storage.Uniques, Name: "vid", Replica: "eu-1", Page: pg, Regs: sat}
	}
	if err := e.rep.MergeSketches(context.Background(), merges); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/v1/uniques/vid", "/v1/uniques/vid?by=region", "/v1/uniques?keys=vid,other"} {
		b := e.do("GET", path, "").ok(t)
		if got := num(t, b, "estimate"); got != crdt.HLLMaxEstimate {
			t.Errorf("GET %s: estimate %d, want the cap %d: %v", path, got, int64(crdt.HLLMaxEstimate), b)
		}
		if se := b["std_error"]; se == nil {
			t.Errorf("GET %s: no std_error: %v", path, b)
		}
	}
	if logs := e.logs.String(); strings.Contains(logs, "[ERROR]") {
		t.Errorf("errors logged:\n%s", logs)
	}
	// Adds still go on, and other keys are untouched.
	e.do("POST", "/v1/uniques/vid", `{"id":"carol"}`).ok(t)
	e.do("POST", "/v1/uniques/other2", `{"id":"carol"}`).ok(t)
	if got := num(t, e.do("GET", "/v1/uniques/other2", "").ok(t), "estimate"); got != 1 {
		t.Errorf("another key: estimate %d, want 1", got)
	}
}

// A response that cannot be encoded (here a NaN, which JSON has no word
// for) is a bug: the client gets a 500 in the usual error shape with an
// id, and the log has a line with the same id, the route and the cause.
func TestUnencodableResponseIsLogged(t *testing.T) {
	e := newEnv(t, envOpts{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]float64{"estimate": math.NaN()})
	})
	rec := httptest.NewRecorder()
	e.srv.instrument(rec, httptest.NewRequest("GET", "/v1/uniques/vid", nil), h)
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("status %d, want 500: %s", rec.Code, rec.Body)
	}
	body := rec.Body.String()
	i := strings.Index(body, "(id ")
	if i < 0 || !strings.Contains(body, `"code":"internal"`) || !strings.Contains(body, "response encoding failed") {
		t.Fatalf("body %s: want the internal error shape with an id", body)
	}
	id := body[i+len("(id ") : i+len("(id ")+36]
	logs := e.logs.String()
	var line string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "response encoding failed") {
			line = l
		}
	}
	for _, want := range []string{"[ERROR]", "id=" + id, "path=/v1/uniques/vid", "type=map[string]float64", "status=200", "NaN"} {
		if !strings.Contains(line, want) {
			t.Errorf("log line %q lacks %q; logs:\n%s", line, want, logs)
		}
	}
}
