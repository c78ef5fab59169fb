package replication

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tally-dev/tally/internal/testkit"
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
	if res, err := us.replica.Incr(ctx, "c", 1, "k1"); err != nil || res.Value != 1 {
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
		if res, err := n.replica.Incr(ctx, "c", 1, "k1"); err != nil || res.Value != 1 || !res.Duplicate {
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
