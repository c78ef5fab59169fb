package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/alloc"
	"github.com/tally-dev/tally/internal/base/poll"
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
	realProcesses(t, "a fresh replica's recovery takes about 40 s")
	cfg := DefaultConfig()
	cfg.ToggleWeight, cfg.LateWeight = 0, 0 // the mix this test was tuned with
	cfg.Binary, cfg.Faults = chaosBinary(t), []string{}
	// Every number a milestone: every reuse shows as a lost claim. Lease
	// reports go every TTL/4: 2 s, a wide window to lose the disk in.
	cfg.Milestones, cfg.LeaseTTL = "every:1", 8*time.Second
	cfg = cfg.withDefaults()
	ctx, d, kv := startWithAllocator(t, cfg)
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
	if err := d.kill(eu, nil); err != nil {
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
	res, vs := settleMilestones(ctx, d, l.hist.snapshot(), l.start, 0, 20*time.Second)
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

// The wipe fault loses a region's disk only once nothing of its numbering
// is recorded on that disk alone, as it loses it only once every write it
// acknowledged has reached a peer: it tests recovery, not the documented
// disk-loss limit. Giving back its leases is not enough. Here the
// region's last block is closed above a block still open (held in the KV
// by a holder that is no region, standing for a region slow to close
// its block), so its ranks are not known when eu goes idle: a wipe then
// would lose the likes that took them, and every milestone among them
// (every rank is one here) would be skipped. The wipe must wait until the
// block below closes, eu has taken its block's ranks and claimed its
// milestones; then nothing is skipped.
//
// About 30 s; skipped under -short.
func TestWipeWaitsForItsMilestonesToBeClaimed(t *testing.T) {
	realProcesses(t, "runs real processes")
	cfg := DefaultConfig()
	cfg.ToggleWeight, cfg.LateWeight = 0, 0 // the mix this test was tuned with
	cfg.Binary, cfg.Faults, cfg.Out = chaosBinary(t), []string{}, testOut{t}
	cfg.Milestones = "every:1"
	cfg = cfg.withDefaults()
	ctx, d, kv := startWithAllocator(t, cfg)

	// A block below everything eu will number, held open.
	const slow = "slow-holder"
	held := holdBlock(t, ctx, kv, slow)
	l := &liker{start: time.Now(), hist: &history{}}
	eu := d.proc("eu")
	const likes = 5
	for i := range likes {
		if o := l.like(ctx, eu, fmt.Sprintf("eu-%d", i)); o.Outcome != OutcomeOK {
			t.Fatalf("like at eu: %+v", o)
		}
	}

	// The slow holder closes its block (unused: a hole) well after eu has
	// given its own block back: a wipe that waited for no more than that
	// has killed eu by then.
	released := make(chan error, 1)
	go func() {
		for {
			st, err := eu.client.numbering(ctx)
			if err == nil && len(st.Lease.Leases) == 0 && st.Unnumbered == 0 {
				break
			}
			if !poll.Sleep(ctx, 50*time.Millisecond) {
				released <- ctx.Err()
				return
			}
		}
		poll.Sleep(ctx, 2*time.Second)
		_, err := alloc.Retire(ctx, kv, likesSequence, slow)
		released <- err
	}()

	x := &executor{cfg: cfg, d: d, start: time.Now()}
	x.w = &workload{cfg: cfg, clients: map[string][]*replicaClient{}, hist: l.hist, gate: newGate(), start: x.start, episode: x.episode}
	for _, p := range d.procs {
		x.w.clients[p.region] = []*replicaClient{{replica: p.replica, client: p.client}}
	}
	rec := &EpisodeRecord{Episode: Episode{Index: 1, Kind: KindWipe, Region: "eu", Dur: 500 * time.Millisecond}}
	if err := x.wipe(ctx, rec); err != nil {
		t.Fatalf("wipe: %v", err)
	}
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	t.Logf("the slow holder closed its block [%d,%d) unused", held.Start, held.End)
	if len(x.violations) > 0 {
		t.Fatalf("the wipe reported %v", x.violations)
	}
	res, vs := settleMilestones(ctx, d, l.hist.snapshot(), l.start, 0, 20*time.Second)
	t.Logf("%d milestones checked, %d numbers used; %v", res.Milestones, res.Numbers, vs)
	if len(vs) != 0 {
		t.Fatalf("want no violation (no milestone of eu's lost with its disk), got %v", vs)
	}
	fired := 0
	for _, e := range eventList(t, ctx, d.proc("us")) {
		if e.Region == "eu" {
			fired++
		}
	}
	if fired != likes {
		t.Fatalf("%d milestones name eu's likes, want %d (every rank is a milestone)", fired, likes)
	}
}

// holdBlock leases a block of the likes sequence to holder, which is no
// region's replica: it stays open, holding up the ranks above it, until
// the holder is retired.
func holdBlock(t *testing.T, ctx context.Context, kv jetstream.KeyValue, holder string) alloc.Lease {
	t.Helper()
	key := "seq." + likesSequence
	for {
		e, err := kv.Get(ctx, key)
		if err != nil {
			t.Fatalf("read %s: %v", key, err)
		}
		st, err := alloc.DecodeState(e.Value())
		if err != nil {
			t.Fatal(err)
		}
		l := st.Acquire(holder, 16)
		_, err = kv.Update(ctx, key, st.Encode(), e.Revision())
		if err == nil {
			return l
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) {
			t.Fatalf("lease a block: %v", err)
		}
	}
}

// startWithAllocator starts a deployment of cfg for a test of at most 3
// minutes, waits until every region's milestone feed is synced, and
// opens the allocator's KV bucket. Everything stops at the test's end.
func startWithAllocator(t *testing.T, cfg Config) (context.Context, *deployment, jetstream.KeyValue) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	d, err := startDeployment(ctx, cfg, t.TempDir(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.stop)
	if err := waitFeedsSynced(ctx, d); err != nil {
		t.Fatal(err)
	}
	nc, js, err := connectAllocator(d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	kv, err := js.KeyValue(ctx, alloc.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, d, kv
}
