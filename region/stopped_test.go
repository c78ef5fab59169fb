package region

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// stoppedGauges reads tally_replica_stopped of reg by reason.
func stoppedGauges(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "tally_replica_stopped" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					out[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}

// tally_replica_stopped says why a replica stopped, with the reason
// /healthz gives: 0 for both while it runs, 1 for the one that stopped it.
func TestStoppedMetric(t *testing.T) {
	for _, tc := range []struct {
		cause  error
		reason string
	}{
		{ErrIDConflict, "replica_id_conflict"},
		{ErrFailed, "storage_failed"},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			r, _ := openReplica(t, t.TempDir(), "a", func(c *Config) { c.Registerer = reg })
			if got := stoppedGauges(t, reg); len(got) != 2 || got["storage_failed"] != 0 || got["replica_id_conflict"] != 0 {
				t.Fatalf("running replica: tally_replica_stopped %v, want both reasons at 0", got)
			}
			r.Stop(fmt.Errorf("%w: test", tc.cause))
			for reason, v := range stoppedGauges(t, reg) {
				if want := map[bool]float64{true: 1}[reason == tc.reason]; v != want {
					t.Errorf("stopped by %v: tally_replica_stopped{reason=%q} = %v, want %v", tc.cause, reason, v, want)
				}
			}
		})
	}
}
