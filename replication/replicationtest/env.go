// Package replicationtest is test support: an in-memory deployment of
// replicas (real stores, one MemNetwork delivering by hand, one clock that
// moves only when told) and the commands of the scenario scripts that drive
// it, so that the tests of any package can run the scripts in the
// repository's testdata/.
//
// Nothing runs in the background: every flush, delivery, merge and
// anti-entropy round is a command, so a script runs the same way every
// time, in milliseconds. Run walks a folder of scripts; Env.Handle is one
// command, for a test that adds commands of its own. `go test -rewrite`
// rewrites the expected outputs (check them before committing).
package replicationtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/replication"
	"github.com/tally-dev/tally/storage"
)

// Start is where every Env's clock starts.
var Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Heartbeat is the replicas' HeartbeatInterval; start moves the clock past
// two of them, the wait for heartbeats before recovery decides.
const Heartbeat = time.Second

// Config configures an Env.
type Config struct {
	// Dir holds the replicas' stores, a folder each. Required.
	Dir string
	// Replication adjusts each replica's replication Config before it
	// starts. Optional.
	Replication func(*replication.Config)
	// Region adjusts each replica's region Config before it opens, after
	// the script's own settings (windows). Optional.
	Region func(*region.Config)
}

// Env is a deployment of replicas on one in-memory network. Its methods
// are for one goroutine: a script's.
type Env struct {
	cfg   Config
	Net   *replication.MemNetwork
	Clock *testkit.Clock
	// Windows is the slot configuration of replicas opened from now
	// on (the windows command); nil: none.
	Windows *region.WindowConfig

	names []string // every replica started, in order
	nodes map[string]*Node
}

// Node is one replica of an Env and what runs it.
type Node struct {
	Name    string
	Store   *storage.Store
	Replica *region.Replica
	Rep     *replication.Replicator
	Steps   *replication.Steps
	Faults  *replication.FaultyTransport
	// Metrics holds the replica's region and replication metrics since it
	// was opened.
	Metrics *prometheus.Registry
}

// New returns an Env with no replicas, its clock at Start.
func New(cfg Config) *Env {
	return &Env{
		cfg:   cfg,
		Net:   replication.NewMemNetwork(replication.MemConfig{Manual: true, Seed: 1}),
		Clock: testkit.NewClock(Start),
		nodes: map[string]*Node{},
	}
}

// Names are the replicas started, in order.
func (e *Env) Names() []string { return e.names }

// Node is the named replica, or nil.
func (e *Env) Node(name string) *Node { return e.nodes[name] }

// Add names replicas to start: each one opened from now on has every
// replica added so far as its peers.
func (e *Env) Add(names ...string) { e.names = append(e.names, names...) }

// Open opens the named replica on its store (created if absent) with
// writes held, joins it to the network and subscribes it, replacing a
// replica of that name that was closed.
func (e *Env) Open(name string) (*Node, error) {
	st, err := storage.Open(storage.Config{Dir: filepath.Join(e.cfg.Dir, name)})
	if err != nil {
		return nil, fmt.Errorf("open %s's store: %w", name, err)
	}
	reg := prometheus.NewRegistry()
	ob := replication.NewOutbox()
	rcfg := region.Config{Region: name, Replica: name, Store: st, Now: e.Clock.Now, HoldWrites: true,
		OnCommit: ob.Add, Registerer: reg, Windows: e.Windows}
	if e.cfg.Region != nil {
		e.cfg.Region(&rcfg)
	}
	rep, err := region.New(rcfg)
	if err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("open replica %s: %w", name, err)
	}
	ft := replication.NewFaultyTransport(e.Net.Join(name), replication.Faults{})
	var peers []string
	for _, p := range e.names {
		if p != name {
			peers = append(peers, p)
		}
	}
	cfg := replication.Config{
		Replica: rep, Store: st, Outbox: ob, Transport: ft, Now: e.Clock.Now, Registerer: reg,
		HeartbeatInterval: Heartbeat, AntiEntropyInterval: time.Second, PeerTimeout: 5 * time.Second,
		Peers: peers,
	}
	if e.cfg.Replication != nil {
		e.cfg.Replication(&cfg)
	}
	n := &Node{Name: name, Store: st, Replica: rep, Faults: ft, Metrics: reg}
	if n.Rep, err = replication.New(cfg); err != nil {
		n.Close()
		return nil, fmt.Errorf("replicator of %s: %w", name, err)
	}
	if n.Steps, err = n.Rep.Listen(); err != nil {
		n.Close()
		return nil, fmt.Errorf("replicator of %s: %w", name, err)
	}
	e.nodes[name] = n
	return n, nil
}

// Restart closes the named replica and opens it again; wipe loses its
// store first.
func (e *Env) Restart(name string, wipe bool) (*Node, error) {
	if n := e.nodes[name]; n != nil {
		n.Close()
	}
	if wipe {
		if err := os.RemoveAll(filepath.Join(e.cfg.Dir, name)); err != nil {
			return nil, fmt.Errorf("wipe %s: %w", name, err)
		}
	}
	return e.Open(name)
}

// Close closes every replica.
func (e *Env) Close() {
	for _, n := range e.nodes {
		n.Close()
	}
}

// Close stops the replica's replication and closes the replica and its
// store.
func (n *Node) Close() {
	if n.Rep != nil {
		n.Rep.Close()
	}
	n.Faults.Close()
	_ = n.Replica.Close()
	_ = n.Store.Close()
}

// Merge merges what every replica received, as their mergers would, and
// returns how many deltas that was.
func (e *Env) Merge(ctx context.Context) int {
	got := 0
	for _, name := range e.names {
		if n := e.nodes[name]; n != nil {
			got += n.Steps.Merge(ctx)
		}
	}
	return got
}
