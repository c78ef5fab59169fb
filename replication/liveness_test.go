package replication

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tally-dev/tally/shard"
)

// regionSetView is a setView that knows each replica's region.
type regionSetView struct {
	setView
	regions map[string]string
}

func (v regionSetView) RegionOf(replica string) (string, bool) {
	rg, ok := v.regions[replica]
	return rg, ok
}

// heardMeter counts, per subject, the fast-path messages a replica
// receives.
type heardMeter struct {
	Transport
	mu   sync.Mutex
	msgs map[string]int
}

func (m *heardMeter) Subscribe(subject string, h func(string, []byte)) (func() error, error) {
	return m.Transport.Subscribe(subject, func(subject string, data []byte) {
		m.mu.Lock()
		m.msgs[subject]++
		m.mu.Unlock()
		h(subject, data)
	})
}

// take returns the subjects heard from since the last take, sorted.
func (m *heardMeter) take() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for s := range m.msgs {
		out = append(out, s)
	}
	slices.Sort(out)
	m.msgs = map[string]int{}
	return out
}

// livenessScenario: regions a (a1, a2), b (b1, b2) and c (c1); a1, b1
// and c1 share keyed shard 1, everyone holds Global and a shard of its
// own.
func livenessScenario(t *testing.T) (*scenario, map[string]*heardMeter) {
	t.Helper()
	sets := map[string][]int{"a1": {1}, "a2": {2}, "b1": {1}, "b2": {3}, "c1": {1, 4}}
	view := regionSetView{setView: setView{}, regions: map[string]string{"a1": "a", "a2": "a", "b1": "b", "b2": "b", "c1": "c"}}
	for id, ss := range sets {
		set := shard.Set{}
		set.Add(shard.Global)
		for _, s := range ss {
			set.Add(s)
		}
		view.setView[id] = &set
	}
	s := newScenario(t)
	s.regions = view.regions
	meters := map[string]*heardMeter{}
	s.tweak = func(c *Config) {
		c.Shards = view
		m := &heardMeter{Transport: c.Transport, msgs: map[string]int{}}
		meters[c.Replica.ID()] = m
		c.Transport = m
	}
	s.names = []string{"a1", "a2", "b1", "b2", "c1"}
	var nodes []*scenarioNode
	for _, id := range s.names {
		nodes = append(nodes, s.open(id))
	}
	s.clock.Advance(2 * scenarioHeartbeat)
	s.heartbeats()
	s.antiEntropy(context.Background(), nodes)
	for _, n := range nodes {
		if !n.rep.Recovered() {
			t.Fatalf("%s has not recovered", n.name)
		}
	}
	return s, meters
}

// beatFor has every live replica (not in down) heartbeat every second
// for d.
func (s *scenario) beatFor(d time.Duration, down ...string) {
	for end := s.clock.Now().Add(d); s.clock.Now().Before(end); {
		s.clock.Advance(scenarioHeartbeat)
		for _, id := range s.names {
			if !slices.Contains(down, id) {
				s.nodes[id].steps.Flush()
			}
		}
		s.net.Deliver()
	}
}

// TestHeartbeatsByShared: a sharded replica hears the heartbeats of the
// peers it shares a keyed shard or its region with, not of the others,
// and knows those live from their region's one summary.
func TestHeartbeatsByShared(t *testing.T) {
	s, meters := livenessScenario(t)
	if got, want := s.nodes["a1"].rep.Following(), []string{"a2", "b1", "c1"}; !slices.Equal(got, want) {
		t.Fatalf("a1 follows %v, want %v (its region and shard 1)", got, want)
	}
	if got, want := s.nodes["b2"].rep.Following(), []string{"b1"}; !slices.Equal(got, want) {
		t.Fatalf("b2 follows %v, want %v (its region only)", got, want)
	}
	for _, m := range meters {
		m.take()
	}
	s.beatFor(4 * time.Second)
	// a1 hears a2's, b1's and c1's heartbeats, and region b's summary
	// from b1, its lowest replica: nothing of b2, and no summary of
	// region c, whose every replica it follows, nor of its own.
	want := []string{
		"tally.delta.a.a1", // its own, echoed
		"tally.delta.a.a2", "tally.delta.b.b1", "tally.delta.b.b1.live", "tally.delta.c.c1",
	}
	if got := meters["a1"].take(); !slices.Equal(got, want) {
		t.Fatalf("a1 heard %v, want %v", got, want)
	}
	// b2 hears b1 only, and the summaries of regions a and c.
	want = []string{"tally.delta.a.a1.live", "tally.delta.b.b1", "tally.delta.b.b2", "tally.delta.c.c1.live"}
	if got := meters["b2"].take(); !slices.Equal(got, want) {
		t.Fatalf("b2 heard %v, want %v", got, want)
	}
	if b2 := s.nodes["b2"].rep; b2.Stale() {
		t.Fatalf("b2 is stale while every replica is up: %+v", b2.Peers())
	}
	a1 := s.nodes["a1"].rep
	if a1.Stale() {
		t.Fatalf("a1 is stale while every replica is up: %+v", a1.Peers())
	}
	for _, p := range a1.Peers() {
		if p.LastHeard == nil || p.LastHeardAgoMs > (5*time.Second).Milliseconds() {
			t.Fatalf("a1 has not heard of %s lately: %+v", p.Replica, p)
		}
	}

	// b2 stops: its region's summary names it down, and a1, which never
	// heard b2 itself, sees it stale, and the others not.
	s.beatFor(7*time.Second, "b2")
	stale := map[string]bool{}
	for _, p := range a1.Peers() {
		stale[p.Replica] = p.Stale
	}
	if want := map[string]bool{"a2": false, "b1": false, "b2": true, "c1": false}; !maps.Equal(stale, want) {
		t.Fatalf("a1's stale peers %v, want %v", stale, want)
	}
}

// TestLivenessSummaryForged: a summary counts only on its sender's own
// subject, only for the replicas of the sender's region, and only when
// it names the members the receiver's maps list. b2 follows neither a1
// nor a2 and knows of them from region a's summary alone.
func TestLivenessSummaryForged(t *testing.T) {
	s, _ := livenessScenario(t)
	s.beatFor(7*time.Second, "a2") // a2 is down
	b2 := s.nodes["b2"].rep
	evil := s.net.Join("evil")
	claim := func(on string, l *Liveness) {
		t.Helper()
		if err := evil.Publish(on, AppendLiveness(nil, l)); err != nil {
			t.Fatal(err)
		}
		s.net.Deliver()
	}
	regionA := membersHash([]string{"a1", "a2"})
	a2Stale := func() bool {
		for _, p := range b2.Peers() {
			if p.Replica == "a2" {
				return p.Stale
			}
		}
		t.Fatal("b2 does not know a2")
		return false
	}
	if !a2Stale() {
		t.Fatal("a2 is down and b2 does not see it stale")
	}
	bad := testutil.ToFloat64(b2.m.badMessages)
	for _, c := range []struct {
		why string
		on  string
		l   Liveness
	}{
		{"c1 vouching for region a on its own subject", LiveSubject("c", "c1"), Liveness{Replica: "c1", Region: "a", Members: regionA}},
		{"a1's summary on c1's subject", LiveSubject("c", "c1"), Liveness{Replica: "a1", Region: "a", Members: regionA}},
		{"c1 speaking for region a", LiveSubject("a", "c1"), Liveness{Replica: "c1", Region: "a", Members: regionA}},
		{"a1 leaving a2 out of region a", LiveSubject("a", "a1"), Liveness{Replica: "a1", Region: "a", Members: membersHash([]string{"a1"})}},
	} {
		claim(c.on, &c.l)
		if !a2Stale() {
			t.Fatalf("%s made a2 live at b2", c.why)
		}
		if now := testutil.ToFloat64(b2.m.badMessages); now != bad+1 {
			t.Fatalf("%s: %v bad messages counted, want 1", c.why, now-bad)
		}
		bad++
	}
	// a1's own word for the members of region a counts.
	claim(LiveSubject("a", "a1"), &Liveness{Replica: "a1", Region: "a", Members: regionA, AgoMs: 10})
	if a2Stale() {
		t.Fatal("a1's summary did not make a2 live at b2")
	}
}

// TestLivenessWire: a summary decodes to what was encoded, and every
// truncation of it is refused.
func TestLivenessWire(t *testing.T) {
	l := &Liveness{Replica: "b1", Region: "b", Incarnation: 7, Members: membersHash([]string{"b1", "b2", "b3"}), AgoMs: 1234, Down: []string{"b2", "b3"}}
	data := AppendLiveness(nil, l)
	got, err := DecodeLiveness(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.Replica != l.Replica || got.Region != l.Region || got.Incarnation != l.Incarnation || got.Members != l.Members || got.AgoMs != l.AgoMs || !slices.Equal(got.Down, l.Down) {
		t.Fatalf("decoded %+v, want %+v", got, l)
	}
	for n := range len(data) {
		if _, err := DecodeLiveness(data[:n]); err == nil {
			t.Fatalf("a summary cut to %d of %d bytes decoded", n, len(data))
		}
	}
	if _, err := DecodeLiveness(append(data, 0)); err == nil || !strings.Contains(err.Error(), "trailing") {
		t.Fatalf("trailing byte: %v", err)
	}
}

func FuzzDecodeLiveness(f *testing.F) {
	f.Add(AppendLiveness(nil, &Liveness{Replica: "b1", Region: "b", Incarnation: 3, Members: membersHash([]string{"b1", "b2"}), AgoMs: 900}))
	f.Add(AppendLiveness(nil, &Liveness{Replica: "eu-1", Region: "eu", Members: 1, Down: []string{"eu-2", "eu-3"}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := DecodeLiveness(data)
		if err != nil {
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("error not ErrBadMessage: %v", err)
			}
			return
		}
		again, err := DecodeLiveness(AppendLiveness(nil, l))
		if err != nil || !reflect.DeepEqual(again, l) {
			t.Fatalf("re-encode changed the summary: %v", err)
		}
	})
}
