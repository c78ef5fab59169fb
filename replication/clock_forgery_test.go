package replication

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/region"
)

// Issue 27, item 8, on a NATS without authorization (as `tallyd local`
// ran): heartbeats forged in eu-1's and ap-1's names say their clocks are
// an hour, then a day ahead. Before the fix every replica followed them,
// and a retried idempotent increment, its key now past its TTL, counted
// twice. Now the peers move a clock a minute at most.
func TestForgedHeartbeatsMoveTheClockABoundedWay(t *testing.T) {
	s := startNATS(t)
	ids := []string{"us-1", "eu-1", "ap-1"}
	ttl := func(c *region.Config) { c.IdempotencyTTL = 10 * time.Minute }
	var nodes []*node
	for _, id := range ids {
		n := startNodeWith(t, s.ClientURL(), id[:2], id, t.TempDir(), ids, ttl)
		t.Cleanup(n.close)
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		testkit.WaitFor(t, 10*time.Second, func() error {
			if !n.replica.Accepting() {
				return fmt.Errorf("%s not accepting writes", n.id)
			}
			return nil
		})
	}
	ctx := context.Background()
	us := nodes[0]
	if res, err := us.replica.Counters().Incr(ctx, "c", 1, "k1"); err != nil || res.Value != 1 {
		t.Fatalf("first increment: %+v, %v", res, err)
	}

	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var lieMs atomic.Int64 // how far ahead the forged clocks are
	lieMs.Store(time.Hour.Milliseconds())
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the attacker: forged heartbeats, faster than the real ones
		defer wg.Done()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for seq := uint64(1); ; seq++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			lie := lieMs.Load()
			for _, id := range []string{"eu-1", "ap-1"} {
				d := &Delta{Replica: id, Region: id[:2], Incarnation: 99, Seq: seq, SentAtMs: time.Now().UnixMilli() + lie}
				_ = nc.Publish(deltaSubject(d.Region, id), AppendDelta(nil, d))
			}
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
	}()
	bound := func() int64 { return maxCorrection(nodes) }
	var worst int64
	// us-1 follows the lie as far as it goes.
	testkit.WaitFor(t, 20*time.Second, func() error {
		worst = max(worst, bound())
		if c := us.replica.ClockCorrectionMs(); c < 50_000 {
			return fmt.Errorf("us-1's clock correction %d ms", c)
		}
		return nil
	})
	// A day ahead now, for ten more anti-entropy rounds of us-1.
	lieMs.Store(25 * time.Hour.Milliseconds())
	rounds := testutil.ToFloat64(us.rep.m.aeRounds)
	testkit.WaitFor(t, 20*time.Second, func() error {
		worst = max(worst, bound())
		if n := testutil.ToFloat64(us.rep.m.aeRounds) - rounds; n < 10 {
			return fmt.Errorf("us-1 ran %v rounds under the lie", n)
		}
		return nil
	})
	worst = max(worst, bound())
	if worst > time.Minute.Milliseconds() {
		t.Fatalf("forged heartbeats moved a clock %d ms, more than a minute", worst)
	}
	for _, n := range nodes[:2] {
		if res, err := n.replica.Counters().Incr(ctx, "c", 1, "k1"); err != nil || res.Value != 1 || !res.Duplicate {
			t.Fatalf("%s: the retried increment: %+v, %v; want a duplicate, value 1", n.id, res, err)
		}
	}
}

// maxCorrection is the largest clock correction of any node, in absolute
// ms.
func maxCorrection(nodes []*node) int64 {
	var m int64
	for _, n := range nodes {
		m = max(m, abs(n.replica.ClockCorrectionMs()))
	}
	return m
}

// Issue 27, item 8: a hello on eu-1's id subject, forged on a NATS without
// authorization, claiming a process that started at the epoch, stopped a
// live eu-1 with replica_id_conflict. A hello alone is a claim, not a
// process: eu-1 goes on.
func TestForgedHelloDoesNotStopALiveReplica(t *testing.T) {
	nodes, url := startCluster(t, "us", "eu")
	eu := nodes[1]
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	data, err := json.Marshal(hello{Replica: "eu-1", Incarnation: 5, StartedMs: 0, Host: "forger", PID: 1})
	if err != nil {
		t.Fatal(err)
	}
	before := testutil.ToFloat64(eu.rep.m.ownIDConflicts)
	for range 3 {
		if err := nc.Publish(idSubject("eu-1"), data); err != nil {
			t.Fatal(err)
		}
	}
	// A subscription's handler runs one message at a time: once the third
	// is counted, the first two have been judged.
	testkit.WaitFor(t, 5*time.Second, func() error {
		if n := testutil.ToFloat64(eu.rep.m.ownIDConflicts) - before; n < 3 {
			return fmt.Errorf("eu-1 has taken %v of the hellos", n)
		}
		return nil
	})
	if err := eu.replica.Err(); err != nil {
		t.Fatalf("a forged hello stopped eu-1: %v", err)
	}
	if _, err := eu.replica.Counters().Incr(context.Background(), "c", 1, ""); err != nil {
		t.Fatalf("eu-1 after the forged hello: %v", err)
	}
}

// The evidence a hello needs, in either order: a delta on the replica's
// own subject from the incarnation the hello names. With it, the process
// that started later stops; without it, or as the earlier one, it goes on.
func TestRivalHelloNeedsItsDeltas(t *testing.T) {
	s := newScenario(t)
	s.names = []string{"us", "eu", "ap"}
	for _, name := range s.names {
		s.open(name)
	}
	helloFrom := func(n *scenarioNode, inc uint64, startedMs int64) {
		t.Helper()
		data, err := json.Marshal(hello{Replica: n.name, Incarnation: inc, StartedMs: startedMs})
		if err != nil {
			t.Fatal(err)
		}
		n.rep.onHello(idSubject(n.name), data)
	}
	deltaFrom := func(n *scenarioNode, inc uint64) {
		n.rep.receive(deltaSubject(n.name, n.name), AppendDelta(nil, &Delta{Replica: n.name, Region: n.name, Incarnation: inc, Seq: 1}))
	}
	stopped := func(n *scenarioNode) bool { return errors.Is(n.replica.Err(), region.ErrIDConflict) }

	us, eu, ap := s.nodes["us"], s.nodes["eu"], s.nodes["ap"]
	helloFrom(us, 7, 0)
	if stopped(us) {
		t.Fatal("us stopped on a hello alone")
	}
	deltaFrom(us, 8) // another incarnation's delta proves nothing for 7
	if stopped(us) {
		t.Fatal("us stopped on a hello and another incarnation's delta")
	}
	deltaFrom(us, 7)
	if !stopped(us) {
		t.Fatal("us goes on beside an earlier process publishing as it")
	}

	deltaFrom(eu, 7) // the delta first, then the hello
	helloFrom(eu, 7, 0)
	if !stopped(eu) {
		t.Fatal("eu goes on beside an earlier process publishing as it")
	}

	deltaFrom(ap, 7) // a process that started after this one: it stops, not ap
	helloFrom(ap, 7, s.clock.Now().Add(time.Hour).UnixMilli())
	if stopped(ap) {
		t.Fatal("ap stopped for a process that started after it")
	}
}
