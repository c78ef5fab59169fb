package replication

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"

	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

// scenario is the harness of the tests inside the package that step
// replicas by hand and reach into them (forged deltas, single merges):
// replicas on real stores, joined by a MemNetwork in manual mode, with a
// clock that moves only when told. The scripts in the repository's
// testdata/ run on replicationtest's Env, the same deployment from outside
// the package.
func newScenario(t *testing.T) *scenario {
	s := &scenario{
		t:     t,
		dir:   t.TempDir(),
		net:   NewMemNetwork(MemConfig{Manual: true, Seed: 1}),
		clock: testkit.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		nodes: map[string]*scenarioNode{},
	}
	t.Cleanup(s.close)
	return s
}

type scenario struct {
	t     *testing.T
	dir   string
	net   *MemNetwork
	clock *testkit.Clock
	names []string // every replica started, in order
	nodes map[string]*scenarioNode
	tweak func(*Config) // if set, adjusts each replica's Config
	// regions, if it names a replica, is its region (else its own name).
	regions map[string]string
}

type scenarioNode struct {
	name    string
	store   *storage.Store
	replica *region.Replica
	rep     *Replicator
	faults  *FaultyTransport
	steps   *Steps
	flusher *flusher // steps' own
}

const scenarioHeartbeat = time.Second

func (s *scenario) open(name string) *scenarioNode {
	t := s.t
	st, err := storage.Open(storage.Config{Dir: filepath.Join(s.dir, name)})
	if err != nil {
		t.Fatal(err)
	}
	ob := NewOutbox()
	rg := name
	if r, ok := s.regions[name]; ok {
		rg = r
	}
	rep, err := region.New(region.Config{Region: rg, Replica: name, Store: st, Now: s.clock.Now, HoldWrites: true, OnCommit: ob.Add})
	if err != nil {
		t.Fatal(err)
	}
	ft := NewFaultyTransport(s.net.Join(name), Faults{})
	var peers []string
	for _, p := range s.names {
		if p != name {
			peers = append(peers, p)
		}
	}
	cfg := Config{
		Replica: rep, Store: st, Outbox: ob, Transport: ft, Now: s.clock.Now,
		HeartbeatInterval: scenarioHeartbeat, AntiEntropyInterval: time.Second, PeerTimeout: 5 * time.Second,
		Peers: peers,
	}
	if s.tweak != nil {
		s.tweak(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	steps, err := r.Listen()
	if err != nil {
		t.Fatal(err)
	}
	n := &scenarioNode{name: name, store: st, replica: rep, rep: r, faults: ft, steps: steps, flusher: steps.f}
	s.nodes[name] = n
	return n
}

func (n *scenarioNode) close() {
	n.rep.Close()
	n.faults.Close()
	_ = n.replica.Close()
	_ = n.store.Close()
}

func (s *scenario) close() {
	for _, n := range s.nodes {
		n.close()
	}
}

// mergeInbox merges what the replica received, as its merger would.
func (s *scenario) mergeInbox(ctx context.Context, n *scenarioNode) { n.steps.Merge(ctx) }

// antiEntropy runs one round from each replica, as its anti-entropy loop
// would, deciding recovery for those still holding writes.
func (s *scenario) antiEntropy(ctx context.Context, nodes []*scenarioNode) {
	for _, n := range nodes {
		n.steps.AntiEntropy(ctx)
	}
}
