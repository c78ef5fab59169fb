package milestone

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tally-dev/tally/alloc"
	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/internal/localnet"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

// node is one replica with numbering: the pieces tallyd wires together.
type node struct {
	id      string
	dir     string
	store   *storage.Store
	rep     *region.Replica
	holder  *alloc.Leaseholder
	claimer *Claimer
	feed    *Feed
	// durability of the node's store: the default (fsync) unless a test
	// that never crashes a node asks for less.
	durability storage.Durability
}

type holderSeq struct{ *alloc.Leaseholder }

func (h holderSeq) Take(n uint64) (uint64, uint64, bool) {
	sp, ok := h.Leaseholder.Take(n)
	return sp.Start, sp.End, ok
}

// open starts the node; with claim false its claimer does not run, as if
// the process died right after acknowledging its likes.
func (n *node) open(t *testing.T, js jetstream.JetStream, kv alloc.KV, rule Rule, claim bool) {
	t.Helper()
	st, err := storage.Open(storage.Config{Dir: n.dir, Durability: n.durability})
	if err != nil {
		t.Fatal(err)
	}
	n.store = st
	restored, err := region.NumberingSnapshot(st, "likes")
	if err != nil {
		t.Fatal(err)
	}
	n.holder, err = alloc.New(alloc.Config{
		KV: kv, Sequence: "likes", Replica: n.id, Restored: restored,
		TTL: 400 * time.Millisecond, Target: 100 * time.Millisecond, IdleRelease: 200 * time.Millisecond,
		MinBlock: 4, MaxBlock: 64,
		OnReady: func() { n.rep.Numbers().Ready() },
		OnFinal: func(ctx context.Context, blocks []alloc.Closed) error {
			fb := make([]region.FinalBlock, len(blocks))
			for i, b := range blocks {
				fb[i] = region.FinalBlock{Start: b.Start, Used: b.Used, Base: b.Base}
			}
			return n.rep.Numbers().Finalize(ctx, "likes", fb)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n.feed, err = NewFeed(FeedConfig{JS: js}); err != nil {
		t.Fatal(err)
	}
	n.rep, err = region.New(region.Config{
		Region: "r-" + n.id, Replica: n.id, Store: st,
		Sequences: []*region.Numbering{{Sequence: "likes", Seq: holderSeq{n.holder}, Milestone: rule.Hit, Next: rule.Next, OnClaim: func() {
			if n.claimer != nil {
				n.claimer.Kick()
			}
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	n.claimer, err = NewClaimer(ClaimerConfig{KV: kv, Feed: n.feed, Source: region.ClaimIntents{Store: st, Sequence: "likes"}, Sequence: "likes", Region: "r-" + n.id, Replica: n.id, Retry: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	n.holder.Start()
	n.feed.Start()
	if claim {
		n.claimer.Start()
	}
}

// crash stops everything without giving leases back or claiming.
func (n *node) crash(t *testing.T) {
	t.Helper()
	n.claimer.Close()
	n.feed.Close()
	if err := n.rep.Close(); err != nil {
		t.Fatal(err)
	}
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	_ = n.holder.Close(dead) // a cancelled context: nothing is given back
	if err := n.store.Close(); err != nil {
		t.Fatal(err)
	}
}

// stop closes cleanly.
func (n *node) stop(t *testing.T) {
	t.Helper()
	n.claimer.Close()
	n.feed.Close()
	if err := n.rep.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.holder.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.store.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestMilestonesFireExactlyOnce runs seeded trials: three replicas like at
// random into one sequence; in each trial one replica acknowledges its
// likes but "crashes" before claiming anything, and is restarted from its
// data. Then likes stop: within the bound every milestone at or below the
// number of likes must have fired exactly once, and none above it, as an
// event every replica's feed shows, for a like that replica really
// counted, and no claim may find its rank taken by another like.
func TestMilestonesFireExactlyOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := localnet.DefaultConfig()
	cfg.Regions, cfg.Dir = []string{"us"}, t.TempDir()
	c, err := localnet.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	nc, err := nats.Connect(c.ClientURL("us"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}

	for trial := uint64(1); trial <= 8; trial++ {
		t.Run(fmt.Sprint(trial), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(trial, 99))
			bucket := fmt.Sprintf("alloc_%d", trial)
			kv, err := alloc.OpenBucket(ctx, js, alloc.BucketConfig{Name: bucket})
			if err != nil {
				t.Fatal(err)
			}
			rule, _ := ParseRule(fmt.Sprintf("every:%d", 5+rng.IntN(10)))
			crashing := rng.IntN(3)
			nodes := make([]*node, 3)
			liked := map[string]string{} // "item/user" -> replica that counted it
			for i := range nodes {
				nodes[i] = &node{id: fmt.Sprintf("t%d-n%d", trial, i), dir: filepath.Join(t.TempDir(), fmt.Sprint(i))}
				nodes[i].open(t, js, kv, rule, i != crashing)
			}
			for k := 0; k < 150+rng.IntN(150); k++ {
				i := rng.IntN(3)
				item, user := fmt.Sprintf("item%d", rng.IntN(4)), fmt.Sprintf("u%d", k)
				res, err := nodes[i].rep.Likes().Like(ctx, item, user)
				if err != nil || !res.Changed {
					t.Fatalf("like: %+v %v", res, err)
				}
				liked[item+"/"+user] = nodes[i].id
			}
			// The crashing replica has acknowledged likes, some with
			// milestone numbers, and claimed none.
			nodes[crashing].crash(t)
			nodes[crashing].open(t, js, kv, rule, true)
			// Likes stop. Within the bound every lease is given back, every
			// number is final, every block's ranks are taken, and every
			// milestone at or below the numbered count is claimed.
			var st *alloc.State
			testkit.WaitFor(t, 20*time.Second, func() error {
				var err error
				if st, err = alloc.Read(ctx, kv, "likes"); err != nil {
					return err
				}
				if len(st.Leases) != 0 || st.Dense.Pos != st.HWM || len(st.Closed) != 0 {
					return fmt.Errorf("leases %+v, dense %+v of hwm %d, closed %+v", st.Leases, st.Dense, st.HWM, st.Closed)
				}
				for _, n := range nodes {
					if err := settled(t, n.id, n.rep); err != nil {
						return err
					}
				}
				return nil
			})
			for _, n := range nodes {
				n.stop(t)
			}
			if st.Dense.Rank != uint64(len(liked)) {
				t.Fatalf("%d numbers ranked, %d likes counted", st.Dense.Rank, len(liked))
			}
			// None skipped, none early: every milestone up to the number of
			// likes, and no other.
			want := rule.Upto(st.Dense.Rank)
			// Every replica's feed, reopened, shows the same events.
			for _, n := range nodes {
				f, _ := NewFeed(FeedConfig{JS: js})
				f.Start()
				testkit.WaitFor(t, 20*time.Second, func() error {
					if s, _ := f.Synced(); !s {
						return fmt.Errorf("%s's feed not synced", n.id)
					}
					return nil
				})
				evs := f.Events()
				f.Close()
				if len(evs) != len(want) {
					t.Fatalf("%s sees %d milestones, want %d (%v)", n.id, len(evs), len(want), want)
				}
				for i, e := range evs {
					if e.Number != want[i] {
						t.Fatalf("milestone %d is number %d, want %d", i, e.Number, want[i])
					}
					if by := liked[e.Item+"/"+e.User]; by != e.Replica {
						t.Fatalf("milestone %d names %s/%s by %s, which %q counted", e.Number, e.Item, e.User, e.Replica, by)
					}
				}
			}
			for _, n := range nodes {
				if lost := testutil.ToFloat64(n.claimer.lost); lost != 0 {
					t.Fatalf("%s lost %v claims: a number was used twice", n.id, lost)
				}
			}
			t.Logf("%d milestones (%s) up to %d, %d holes, replica %d crashed before claiming", len(want), rule, st.Dense.Rank, st.Holes(), crashing)
			// The stream is shared across trials: clear it for the next.
			if err := js.DeleteStream(ctx, DefaultStream); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// settled reports whether replica id has numbered every like and settled
// every claim.
func settled(t *testing.T, id string, r *region.Replica) error {
	if n, c := r.Numbers().Unnumbered("likes"), pendingClaims(t, r); n != 0 || c != 0 {
		return fmt.Errorf("%s: %d likes unnumbered, %d claims pending", id, n, c)
	}
	return nil
}

func pendingClaims(t *testing.T, r *region.Replica) int {
	n := 0
	if err := r.Numbers().Claims("likes", func(uint64, storage.CountedLike) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMilestonesFireAfterTheBurst runs seeded trials of "a burst of likes
// over three replicas, then silence": every milestone at or below the
// number of likes fires without another like, exactly once, and none
// above it ever fires. How long the last one took against the holders'
// bound is logged, not asserted: on a shared machine the wall clock says
// nothing about the code (the 30 s wait is only there to end a stuck run).
//
// Most of a trial is waiting: for the last milestone, then the silence.
// The trials are split between two subtests that run side by side, each
// on its own nats-server (the milestone stream's subjects are one
// server's: two trials cannot share it), trial n in subtest n mod 2; the
// 50 seeds and what each trial checks are the same as when they ran one
// after another.
func TestMilestonesFireAfterTheBurst(t *testing.T) {
	if testing.Short() {
		t.Skip("50 trials on a real nats-server")
	}
	const trials, groups = 50, 2
	for g := range uint64(groups) {
		t.Run(fmt.Sprintf("trials_%d_mod_%d", g, groups), func(t *testing.T) {
			t.Parallel()
			burstTrials(t, func(trial uint64) bool { return trial%groups == g }, trials)
		})
	}
}

// burstTrials runs the trials 1..trials that mine picks, one after
// another on one nats-server of its own (see TestMilestonesFireAfterTheBurst).
func burstTrials(t *testing.T, mine func(trial uint64) bool, trials uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := localnet.DefaultConfig()
	cfg.Regions, cfg.Dir = []string{"us"}, t.TempDir()
	c, err := localnet.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	nc, err := nats.Connect(c.ClientURL("us"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// The holders' settings in open: a lease closes at most CloseAfter
	// (2×Target) after it was taken or IdleRelease (2×Target) after its
	// last number; the ranks then reach each owner within two renewals.
	const bound = 2*200*time.Millisecond + 3*100*time.Millisecond
	var worst time.Duration
	ran := 0
	for trial := uint64(1); trial <= trials; trial++ {
		if !mine(trial) {
			continue
		}
		ran++
		rng := rand.New(rand.NewPCG(trial, 13))
		kv, err := alloc.OpenBucket(ctx, js, alloc.BucketConfig{Name: fmt.Sprintf("burst_%d", trial)})
		if err != nil {
			t.Fatal(err)
		}
		burst := 1 + rng.IntN(250)
		// Milestones at random positions, some past the burst.
		var at []string
		for range 1 + rng.IntN(4) {
			at = append(at, fmt.Sprint(1+rng.IntN(300)))
		}
		rule, err := ParseRule(strings.Join(at, ","))
		if err != nil {
			t.Fatal(err)
		}
		nodes := make([]*node, 3)
		for i := range nodes {
			// No node crashes here, so an fsync per like (the burst's likes
			// are sent one at a time) only costs time: the page cache
			// serves the same reads.
			nodes[i] = &node{id: fmt.Sprintf("b%d-n%d", trial, i), dir: filepath.Join(t.TempDir(), fmt.Sprint(i)), durability: storage.DurabilityNone}
			nodes[i].open(t, js, kv, rule, true)
		}
		for k := range burst {
			if _, err := nodes[rng.IntN(3)].rep.Likes().Like(ctx, fmt.Sprintf("item%d", rng.IntN(3)), fmt.Sprintf("u%d", k)); err != nil {
				t.Fatal(err)
			}
		}
		silent := time.Now()
		want := rule.Upto(uint64(burst))
		var took time.Duration
		testkit.WaitFor(t, 30*time.Second, func() error {
			evs := nodes[0].feed.Events()
			if len(evs) < len(want) {
				return fmt.Errorf("trial %d: %d of %d milestones (%s, %d likes)", trial, len(evs), len(want), rule, burst)
			}
			took = time.Since(silent)
			return nil
		})
		// Then silence for longer than the bound: nothing more fires.
		time.Sleep(bound)
		for _, n := range nodes {
			evs := n.feed.Events()
			if len(evs) != len(want) {
				t.Fatalf("trial %d: %s lists %d milestones, want %v (%s, %d likes)", trial, n.id, len(evs), want, rule, burst)
			}
			for i, e := range evs {
				if e.Number != want[i] {
					t.Fatalf("trial %d: milestone %d is %d, want %v: one above the %d likes fired early", trial, i, e.Number, want, burst)
				}
			}
		}
		for _, n := range nodes {
			n.stop(t)
		}
		worst = max(worst, took)
		if err := js.DeleteStream(ctx, DefaultStream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Fatal(err)
		}
	}
	t.Logf("slowest of %d trials: the last milestone %v after the burst (bound %v)", ran, worst, bound)
}
