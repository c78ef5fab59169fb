package httpapi

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/tally-dev/tally/storage"
)

// /v1/status is a typed answer now (api.Status); its keys are what clients
// and the docs rely on, so they are pinned here.
func TestStatusKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    envOpts
		want []string
	}{
		{"fsync", envOpts{}, []string{"accepting", "auth", "clock_correction_ms", "durability", "edge", "fresh", "region", "replica", "replication", "started_at", "uptime_seconds", "version"}},
		{"none", envOpts{durability: storage.DurabilityNone}, []string{"accepting", "auth", "clock_correction_ms", "durability", "durability_warning", "edge", "fresh", "region", "replica", "replication", "started_at", "uptime_seconds", "version"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.o)
			r := e.do("GET", "/v1/status", "")
			var m map[string]any
			if err := json.Unmarshal([]byte(r.raw), &m); err != nil {
				t.Fatal(err)
			}
			var keys []string
			for k := range m {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			if !slices.Equal(keys, tc.want) {
				t.Fatalf("keys %s, want %s", strings.Join(keys, ","), strings.Join(tc.want, ","))
			}
			if m["replication"] != "off" || m["region"] != "us" || m["replica"] != "us-1" {
				t.Fatalf("status %s", r.raw)
			}
		})
	}
}
