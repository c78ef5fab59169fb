package replication

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

// TestScenarios runs the scripts in testdata/: replicas on real stores,
// joined by a MemNetwork in manual mode, with a clock that moves only when
// told. Nothing runs in the background: every flush, delivery and
// anti-entropy round is a command, so each script runs the same way every
// time, in milliseconds. `go test ./replication -run Scenarios -rewrite`
// rewrites the expected output.
//
// Commands (a replica is named by its region, and is its own replica id):
//
//	start us eu ...          open replicas, sync them and accept writes
//	like us alice post1      a like (unlike likewise)
//	incr us views 5          a counter increment
//	flush [us ...]           publish each replica's outbox (default: all)
//	deliver [reverse]        deliver every message in flight, then merge
//	cut us eu [oneway]       stop messages between two replicas
//	drop us eu 0.5           lose messages from us to eu with probability
//	heal us eu | heal all    restore links
//	faults us dup=1          FaultyTransport on us's publishes (TALLY_CHAOS_NET syntax)
//	tick 3s                  move the clock
//	antientropy [us ...]     one anti-entropy round from each (default: all)
//	restart us [wipe]        close us (and lose its disk) and open it again
//	read <us|all> item       each replica's view of the item's likes and counter
//	count item               each replica's like count, on one line
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, newScenario(t).run)
	})
}

func newScenario(t *testing.T) *scenario {
	s := &scenario{
		t:     t,
		dir:   t.TempDir(),
		net:   NewMemNetwork(MemConfig{Manual: true, Seed: 1}),
		clock: &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
		nodes: map[string]*scenarioNode{},
	}
	t.Cleanup(s.close)
	return s
}

type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type scenario struct {
	t     *testing.T
	dir   string
	net   *MemNetwork
	clock *manualClock
	names []string // every replica started, in order
	nodes map[string]*scenarioNode
	tweak func(*Config) // if set, adjusts each replica's Config
}

type scenarioNode struct {
	name    string
	store   *storage.Store
	replica *region.Replica
	rep     *Replicator
	faults  *FaultyTransport
	flusher *flusher
}

const scenarioHeartbeat = time.Second

func (s *scenario) open(name string) *scenarioNode {
	t := s.t
	st, err := storage.Open(storage.Config{Dir: filepath.Join(s.dir, name)})
	if err != nil {
		t.Fatal(err)
	}
	ob := NewOutbox()
	rep, err := region.New(region.Config{Region: name, Replica: name, Store: st, Now: s.clock.Now, HoldWrites: true, OnCommit: ob.Add})
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
	if err := r.listen(); err != nil {
		t.Fatal(err)
	}
	n := &scenarioNode{name: name, store: st, replica: rep, rep: r, faults: ft, flusher: r.newFlusher()}
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

// node is the named replica; a script naming another is a script bug.
func (s *scenario) node(t *testing.T, d *datadriven.TestData, name string) *scenarioNode {
	n, ok := s.nodes[name]
	if !ok {
		d.Fatalf(t, "no replica %q", name)
	}
	return n
}

// pick is the replicas named by the command's arguments from i on, or all.
func (s *scenario) pick(t *testing.T, d *datadriven.TestData, i int) []*scenarioNode {
	var out []*scenarioNode
	for _, a := range d.CmdArgs[i:] {
		if a.Key == "all" {
			return s.pick(t, d, len(d.CmdArgs))
		}
		out = append(out, s.node(t, d, a.Key))
	}
	if len(out) == 0 {
		for _, name := range s.names {
			out = append(out, s.nodes[name])
		}
	}
	return out
}

// args is the command's positional arguments.
func args(t *testing.T, d *datadriven.TestData, n int) []string {
	if len(d.CmdArgs) < n {
		d.Fatalf(t, "%s wants %d arguments", d.Cmd, n)
	}
	out := make([]string, len(d.CmdArgs))
	for i, a := range d.CmdArgs {
		out[i] = a.Key
	}
	return out
}

func (s *scenario) run(t *testing.T, d *datadriven.TestData) string {
	ctx := context.Background()
	var b strings.Builder
	switch d.Cmd {
	case "start":
		a := args(t, d, 1)
		s.names = append(s.names, a...)
		for _, name := range a {
			s.open(name)
		}
		s.clock.advance(2 * scenarioHeartbeat) // past the wait for heartbeats
		s.antiEntropy(ctx, s.pick(t, d, 0))
		s.status(&b, s.pick(t, d, 0))

	case "like", "unlike":
		a := args(t, d, 3)
		n := s.node(t, d, a[0])
		do := n.replica.Like
		if d.Cmd == "unlike" {
			do = n.replica.Unlike
		}
		res, err := do(ctx, a[2], a[1])
		if err != nil {
			return fmt.Sprintf("error: %v", err)
		}
		fmt.Fprintf(&b, "liked=%v changed=%v count=%d", res.Liked, res.Changed, res.Value)

	case "incr":
		a := args(t, d, 3)
		by, err := strconv.ParseInt(a[2], 10, 64)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		res, err := s.node(t, d, a[0]).replica.Incr(ctx, a[1], by, "")
		if err != nil {
			return fmt.Sprintf("error: %v", err)
		}
		fmt.Fprintf(&b, "value=%d", res.Value)

	case "flush":
		before := s.net.Pending()
		for _, n := range s.pick(t, d, 0) {
			n.rep.flush(n.flusher)
		}
		fmt.Fprintf(&b, "%d messages in flight", s.net.Pending()-before)

	case "deliver":
		var got int
		if d.HasArg("reverse") {
			got = s.net.DeliverReversed()
		} else {
			got = s.net.Deliver()
		}
		for _, name := range s.names {
			s.mergeInbox(ctx, s.nodes[name])
		}
		fmt.Fprintf(&b, "%d deliveries", got)

	case "cut":
		a := args(t, d, 2)
		if d.HasArg("oneway") {
			s.net.CutOneWay(a[0], a[1])
		} else {
			s.net.Cut(a[0], a[1])
		}
		return "ok"

	case "drop":
		a := args(t, d, 3)
		p, err := strconv.ParseFloat(a[2], 64)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		s.net.SetLoss(a[0], a[1], p)
		return "ok"

	case "heal":
		a := args(t, d, 1)
		if a[0] == "all" {
			s.net.HealAll()
		} else {
			s.net.Heal(a[0], args(t, d, 2)[1])
		}
		return "ok"

	case "faults":
		a := args(t, d, 2)
		var kvs []string
		for _, arg := range d.CmdArgs[1:] {
			kvs = append(kvs, arg.String()) // key=value
		}
		spec := strings.Join(kvs, ",")
		if !strings.Contains(spec, "seed=") {
			spec += ",seed=1"
		}
		f, err := ParseChaosNet(spec)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		s.node(t, d, a[0]).faults.SetFaults(f)
		return "ok"

	case "tick":
		a := args(t, d, 1)
		dur, err := time.ParseDuration(a[0])
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		s.clock.advance(dur)
		return "ok"

	case "antientropy":
		nodes := s.pick(t, d, 0)
		s.antiEntropy(ctx, nodes)
		s.status(&b, nodes)

	case "restart":
		a := args(t, d, 1)
		old := s.node(t, d, a[0])
		old.close()
		if d.HasArg("wipe") {
			if err := os.RemoveAll(filepath.Join(s.dir, a[0])); err != nil {
				t.Fatal(err)
			}
		}
		n := s.open(a[0])
		fmt.Fprintf(&b, "%s: fresh=%v accepting=%v", n.name, n.replica.Fresh(), n.replica.Accepting())

	case "read":
		a := args(t, d, 2)
		item := a[len(a)-1]
		d.CmdArgs = d.CmdArgs[:len(d.CmdArgs)-1]
		for _, n := range s.pick(t, d, 0) {
			likes, err := n.replica.Likes(item)
			if err != nil {
				t.Fatal(err)
			}
			ctr, err := n.replica.Counter(item)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s: likes=%d %s unreconciled=%d; counter=%d %s\n",
				n.name, likes.Value, vector(likes.Vector), likes.Unreconciled, ctr.Value, vector(ctr.Vector))
		}

	case "count":
		item := args(t, d, 1)[0]
		for i, name := range s.names {
			rd, err := s.nodes[name].replica.Likes(item)
			if err != nil {
				t.Fatal(err)
			}
			if i > 0 {
				b.WriteString(" ")
			}
			fmt.Fprintf(&b, "%s=%d", name, rd.Value)
		}

	default:
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	return strings.TrimRight(b.String(), "\n")
}

// mergeInbox merges what the replica received, as its merger would.
func (s *scenario) mergeInbox(ctx context.Context, n *scenarioNode) {
	var batch []*Delta
	for drained := false; !drained; {
		select {
		case d := <-n.rep.inbox:
			batch = append(batch, d)
		default:
			drained = true
		}
	}
	if len(batch) > 0 {
		n.rep.merge(ctx, batch)
	}
}

// antiEntropy runs one round from each replica, as its anti-entropy loop
// would, deciding recovery for those still holding writes.
func (s *scenario) antiEntropy(ctx context.Context, nodes []*scenarioNode) {
	for _, n := range nodes {
		n.rep.round(ctx)
		if !n.rep.Recovered() {
			n.rep.checkRecovered()
		}
	}
}

// status prints, per replica, whether it accepts writes and how each peer
// compared at its last anti-entropy round.
func (s *scenario) status(b *strings.Builder, nodes []*scenarioNode) {
	for _, n := range nodes {
		fmt.Fprintf(b, "%s: accepting=%v", n.name, n.replica.Accepting())
		for _, p := range n.rep.Peers() {
			switch {
			case p.Error != "":
				fmt.Fprintf(b, " %s=unreachable", p.Replica)
			case p.ComparedAt == nil:
				fmt.Fprintf(b, " %s=not-compared", p.Replica)
			default:
				fmt.Fprintf(b, " %s=%d-differing", p.Replica, p.DifferingBuckets)
			}
		}
		b.WriteString("\n")
	}
}

// vector prints a vector's entries sorted by replica: us:+2-1.
func vector(v crdt.Vector) string {
	parts := make([]string, 0, len(v))
	for _, e := range v {
		parts = append(parts, fmt.Sprintf("%s:+%d-%d", e.Replica, e.PN.P, e.PN.N))
	}
	slices.Sort(parts)
	return "{" + strings.Join(parts, " ") + "}"
}
