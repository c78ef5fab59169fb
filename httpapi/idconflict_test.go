package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

// Issue 27: a replica stopped because another process holds its id said
// storage_failed on /healthz and /readyz. They name the real cause now,
// over a real listener and a real Pebble directory.
func TestStoppedByIDConflictSaysSoOnHealth(t *testing.T) {
	rep, _, ts := serveOnFaultyDisk(t, storage.Config{})
	rep.Stop(fmt.Errorf("%w: process 7 (pid 42 on h, started 2026-01-01T00:00:00Z) held \"us-1\" first; give this process its own id", region.ErrIDConflict))
	for _, p := range []string{"/healthz", "/readyz", "/v1/counters/views"} {
		res, err := ts.Client().Get(ts.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		var e struct{ Error, Code string }
		err = json.NewDecoder(res.Body).Decode(&e)
		res.Body.Close()
		if err != nil || res.StatusCode != http.StatusServiceUnavailable || e.Code != frontdoor.CodeReplicaIDConflict {
			t.Fatalf("GET %s: %d %+v (%v), want 503 %s", p, res.StatusCode, e, err, frontdoor.CodeReplicaIDConflict)
		}
	}
}
