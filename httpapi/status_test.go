package httpapi

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/tally-dev/tally/api"
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
		{"fsync", envOpts{}, []string{"accepting", "auth", "clock_correction_ms", "durability", "edge", "fresh", "go_version", "region", "replica", "replication", "revision", "started_at", "uptime_seconds", "version"}},
		{"none", envOpts{durability: storage.DurabilityNone}, []string{"accepting", "auth", "clock_correction_ms", "durability", "durability_warning", "edge", "fresh", "go_version", "region", "replica", "replication", "revision", "started_at", "uptime_seconds", "version"}},
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

// The numbering and the event log in /v1/status are typed (api.
// SequenceStatus, api.EventLog) where they were any; their JSON is pinned
// here byte for byte, as clients read it.
func TestStatusNumberingAndEvents(t *testing.T) {
	e := newEnv(t, envOpts{api: func(c *Config) {
		c.Events = func() *api.EventLog {
			return &api.EventLog{Stream: "events-us", Published: 7, Logged: 9, Error: "no responders"}
		}
		c.Numbering = func() []api.SequenceStatus {
			return []api.SequenceStatus{{
				Name: "likes", Counts: "likes", Match: "*", Milestones: "every:10", Numbered: 12, Unnumbered: 1,
				Lease: api.LeaseHolder{Sequence: "likes", BlockSize: 64, Taken: 12, Leases: []api.HeldLease{
					{Epoch: 3, Start: 65, End: 129, Next: 70, Committed: 69, ExpiresMs: -5},
				}},
				ClaimsPending: -1,
			}, {
				Name: "search", Counts: "increments", Match: "search:*", Milestones: "every:1000",
				Lease: api.LeaseHolder{Sequence: "search", Leases: []api.HeldLease{}, Waiting: true, KVError: "timeout"},
			}}
		}
	}})
	raw := e.do("GET", "/v1/status", "").raw
	for _, want := range []string{
		`"numbering":[{"name":"likes","counts":"likes","match":"*","milestones":"every:10","numbered":12,"unnumbered":1,` +
			`"lease":{"sequence":"likes","leases":[{"epoch":3,"start":65,"end":129,"next":70,"committed":69,"expires_in_ms":-5}],` +
			`"block_size":64,"numbers_taken":12,"waiting_for_lease":false},"claims_pending":-1},` +
			`{"name":"search","counts":"increments","match":"search:*","milestones":"every:1000","numbered":0,"unnumbered":0,` +
			`"lease":{"sequence":"search","leases":[],"block_size":0,"numbers_taken":0,"waiting_for_lease":true,"kv_error":"timeout"},"claims_pending":0}]`,
		`"events":{"stream":"events-us","published":7,"logged":9,"error":"no responders"}`,
	} {
		if !strings.Contains(raw, want) {
			t.Errorf("status lacks\n%s\nin\n%s", want, raw)
		}
	}
}
