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
// the KV and nothing in its store, so it gives the lease back from its
// last report, and the numbers it used after that report are used again
// by the next likes anywhere. With every number a milestone, each reuse
// is a claim lost to the earlier like's claim: the milestone still fired
// once, tally_milestones_lost_total counts the second like, and nothing
// is skipped. The checker flags the reuse (milestone-twice), which is why
// the chaos mix quiesces numbering before a wipe.
//
// About 40 s (a fresh replica's recovery); skipped under -short.
func TestWipedReplicaReusesUnreportedNumbers(t *testing.T) {
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
	// Exactly the reuse: us's likes took the unreported numbers again. A
	// number eu had claimed stays eu's, and us's claim of it is lost; a
	// number whose claim intent died with eu's disk fires for us's like,
	// and that reuse shows nowhere.
	if len(vs) != 1 || vs[0].Kind != KindMilestoneTwice || vs[0].Region != "us" {
		t.Fatalf("want one milestone-twice violation at us, got %v", vs)
	}
	lost, err := us.client.lostClaims(ctx)
	if err != nil {
		t.Fatal(err)
	}
	eus := 0
	for _, e := range eventList(t, ctx, us) {
		if slices.Contains(unreported, e.Number) && e.Region == "eu" {
			eus++
		}
	}
	if lost < 1 || lost != float64(eus) {
		t.Fatalf("us lost %v claims; %d of the unreported numbers %v fired for eu's likes", lost, eus, unreported)
	}
	t.Logf("numbers used twice: %v; %d of them show as lost claims", unreported, eus)
}
