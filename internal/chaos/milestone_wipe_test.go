package chaos

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/tally-dev/tally/alloc"
)

// The disk-loss limit of numbering (docs/operations.md, "A replica that
// lost its disk"), reproduced: a replica loses its disk right after
// numbering likes, before its next lease report reached the allocator,
// and restarts empty with the same id. Its holder finds its old lease in
// the KV and nothing in its store: which likes took the lease's numbers
// is gone, so the whole block becomes a hole and none of those likes gets
// a rank. Nothing is numbered twice and nothing is skipped: every
// milestone up to the number of ranked likes fires once. (Those likes
// still count; they are just not numbered.)
//
// About 40 s (a fresh replica's recovery); skipped under -short.
func TestWipedReplicaForgetsItsOpenBlock(t *testing.T) {
	if testing.Short() {
		t.Skip("a fresh replica's recovery takes about 40 s")
	}
	cfg := DefaultConfig()
	cfg.Binary, cfg.Faults = chaosBinary(t), []string{}
	// Every number a milestone: every reuse shows as a lost claim. Lease
	// reports go every TTL/4: 2 s, a wide window to lose the disk in.
	cfg.Milestones, cfg.LeaseTTL = "every:1", 8*time.Second
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d, err := startDeployment(ctx, cfg, t.TempDir(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.stop()
	if err := waitFeedsSynced(ctx, d); err != nil {
		t.Fatal(err)
	}
	nc, js, err := connectAllocator(d)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	kv, err := js.KeyValue(ctx, alloc.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	l := &liker{start: time.Now(), hist: &history{}}
	eu, us := d.proc("eu"), d.proc("us")

	// eu likes until its lease in the KV lags what it handed out, then
	// loses its disk at once.
	var unreported []uint64
	for i := 0; len(unreported) == 0 && i < 100; i++ {
		if o := l.like(ctx, eu, fmt.Sprintf("eu-%d", i)); o.Outcome != OutcomeOK {
			t.Fatalf("like at eu: %+v", o)
		}
		st, err := eu.client.numbering(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seq, err := alloc.Read(ctx, kv, likesSequence)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range st.Lease.Leases {
			if kl, ok := seq.Lease(h.Epoch); ok {
				for n := kl.Used; n < h.Next; n++ {
					unreported = append(unreported, n)
				}
			}
		}
	}
	if len(unreported) == 0 {
		t.Fatal("eu's lease reports never lagged")
	}
	if err := d.kill(eu); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(eu.dataDir); err != nil {
		t.Fatal(err)
	}
	t.Logf("eu lost its disk having used numbers %v after its last lease report", unreported)
	if err := d.start(eu); err != nil {
		t.Fatal(err)
	}
	if err := d.waitReady(ctx, eu); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if o := l.like(ctx, us, fmt.Sprintf("us-%d", i)); o.Outcome != OutcomeOK {
			t.Fatalf("like at us: %+v", o)
		}
	}
	res, vs := settleMilestones(ctx, d, l.hist.snapshot(), l.start, 20*time.Second)
	t.Logf("%d milestones checked, %d numbers used; %v", res.Milestones, res.Numbers, vs)
	if len(vs) != 0 {
		t.Fatalf("want no violation (nothing numbered twice, nothing skipped), got %v", vs)
	}
	seq, err := alloc.Read(ctx, kv, likesSequence)
	if err != nil {
		t.Fatal(err)
	}
	if seq.Holes() < uint64(len(unreported)) {
		t.Fatalf("%d holes, want at least eu's %d unreported numbers %v", seq.Holes(), len(unreported), unreported)
	}
	for _, e := range eventList(t, ctx, us) {
		if e.Region == "eu" && slices.Contains(unreported, e.Number) {
			t.Logf("milestone %d fired for eu's like before the disk loss", e.Number)
		}
	}
	t.Logf("eu's lost block left %d holes in all; %d numbers ranked", seq.Holes(), seq.Dense.Rank)
}
