package replication

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// convergenceGauges reads tally_replication_converged and
// tally_replication_peer_stale{peer} from reg.
func convergenceGauges(t *testing.T, reg *prometheus.Registry) (converged float64, stale map[string]float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	converged, stale = -1, map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "tally_replication_converged":
				converged = m.GetGauge().GetValue()
			case "tally_replication_peer_stale":
				stale[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	return converged, stale
}

// The convergence gauges say what GET /v1/convergence says: not converged
// and the peer stale before it was heard, converged once recovery and a
// digest comparison are done, and stale again once the peer falls silent
// past PeerTimeout.
func TestConvergenceMetrics(t *testing.T) {
	ctx := context.Background()
	s := newScenario(t)
	regs := map[string]*prometheus.Registry{"a": prometheus.NewRegistry(), "b": prometheus.NewRegistry()}
	s.tweak = func(c *Config) { c.Registerer = regs[c.Replica.ID()] }
	s.names = []string{"a", "b"}
	for _, name := range s.names {
		s.open(name)
	}
	a := s.nodes["a"]
	check := func(stage string, want bool) {
		t.Helper()
		if got := a.rep.Convergence().Converged; got != want {
			t.Fatalf("%s: Convergence().Converged = %v, want %v", stage, got, want)
		}
		wantStale := a.rep.Peers()[0].Stale
		converged, stale := convergenceGauges(t, regs["a"])
		if converged != map[bool]float64{true: 1}[want] || len(stale) != 1 || stale["b"] != map[bool]float64{true: 1}[wantStale] {
			t.Fatalf("%s: tally_replication_converged %v, peer_stale %v; want converged %v, b stale %v", stage, converged, stale, want, wantStale)
		}
	}
	check("before hearing b", false)
	if !a.rep.Peers()[0].Stale {
		t.Fatal("b is not stale before it was heard")
	}

	s.clock.Advance(2 * scenarioHeartbeat) // past the wait for heartbeats
	for _, name := range s.names {
		s.nodes[name].steps.Flush() // a heartbeat
	}
	s.net.Deliver()
	s.antiEntropy(ctx, []*scenarioNode{s.nodes["a"], s.nodes["b"]})
	s.antiEntropy(ctx, []*scenarioNode{s.nodes["a"]}) // a's digests compared after recovery
	check("recovered and compared", true)

	s.clock.Advance(a.rep.cfg.PeerTimeout + scenarioHeartbeat)
	check("b silent past the peer timeout", false)
	if !a.rep.Peers()[0].Stale {
		t.Fatal("b is not stale after falling silent")
	}
}
