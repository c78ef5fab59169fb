package region

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/internal/base/failpoint"
	"github.com/tally-dev/tally/internal/base/testkit"
)

func mustBlock(t *testing.T, r *Replica, user string, blocked bool) Result {
	t.Helper()
	res, err := r.Admin().Block(context.Background(), user, blocked)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// On one replica: a block takes the user's likes out of every count and
// refuses their likes and unlikes; an unblock puts the likes back.
func TestBlockOneReplica(t *testing.T) {
	for _, lists := range []bool{true, false} {
		t.Run(fmt.Sprintf("lists=%v", lists), func(t *testing.T) {
			r, _ := openReplica(t, t.TempDir(), "A", func(c *Config) { c.LikeLists = lists })
			ctx := context.Background()
			for _, item := range []string{"p1", "p2"} {
				for _, u := range []string{"u", "v"} {
					if _, err := r.Likes().Like(ctx, item, u); err != nil {
						t.Fatal(err)
					}
				}
			}
			if _, err := r.Likes().Unlike(ctx, "p2", "u"); err != nil {
				t.Fatal(err)
			}
			res := mustBlock(t, r, "u", true)
			if !res.Changed || !res.Flag.Value.Blocked || res.Flag.Origin != "A" || res.Flag.HLC == 0 {
				t.Fatalf("block: %+v", res)
			}
			if got := mustLikes(t, r, "p1"); got.Value != 1 || got.Unreconciled != 0 {
				t.Fatalf("p1 after blocking u: %+v, want 1 and reconciled", got)
			}
			if got := mustLikes(t, r, "p2").Value; got != 1 {
				t.Fatalf("p2 after blocking u (who unliked it): %d, want 1", got)
			}
			if _, err := r.Likes().Like(ctx, "p3", "u"); !errors.Is(err, ErrBlocked) {
				t.Fatalf("a blocked user's like: %v, want ErrBlocked", err)
			}
			if _, err := r.Likes().Unlike(ctx, "p1", "u"); !errors.Is(err, ErrBlocked) {
				t.Fatalf("a blocked user's unlike: %v, want ErrBlocked", err)
			}
			if n := testutil.ToFloat64(r.metrics.refusedBlocked); n != 2 {
				t.Fatalf("refused writes counted %v, want 2", n)
			}
			if again := mustBlock(t, r, "u", true); again.Changed || again.Flag.HLC <= res.Flag.HLC {
				t.Fatalf("blocking twice: %+v (first %+v)", again, res)
			}
			if liked, _ := r.Likes().Liked("p1", "u"); !liked {
				t.Fatal("the block must keep the user's own like state; only the count leaves it")
			}
			if un := mustBlock(t, r, "u", false); !un.Changed || un.Flag.Value.Blocked {
				t.Fatalf("unblock: %+v", un)
			}
			if got := mustLikes(t, r, "p1"); got.Value != 2 || got.Unreconciled != 0 {
				t.Fatalf("p1 after unblocking u: %+v, want 2", got)
			}
			if got := mustLikes(t, r, "p2").Value; got != 1 {
				t.Fatalf("p2 after unblocking: %d, want 1", got)
			}
			if _, err := r.Likes().Like(ctx, "p3", "u"); err != nil {
				t.Fatalf("like after unblock: %v", err)
			}
			f, err := r.Admin().Flag("u")
			if err != nil || f.Value.Blocked || f.Origin != "A" {
				t.Fatalf("Flag(u) = %+v, %v", f, err)
			}
			if flags, more, err := r.Admin().Flags("", 10, false); err != nil || len(flags) != 1 || flags[0].User != "u" || more {
				t.Fatalf("Flags: %+v %v %v", flags, more, err)
			}
			if flags, _, _ := r.Admin().Flags("", 10, true); len(flags) != 0 {
				t.Fatalf("blocked flags after unblock: %+v", flags)
			}
			if _, err := r.Admin().Block(ctx, "bad/user", true); !errors.Is(err, ErrInvalid) {
				t.Fatalf("block of a bad id: %v", err)
			}
		})
	}
}

// A block at B of a like whose winner is A: B's view is unreconciled
// (approx) until A, hearing of the flag, takes the like back; then both
// count without it. The unblock at A puts it back everywhere.
func TestBlockReconciledByTheLikesWinner(t *testing.T) {
	a, b, boxA, boxB := pair(t)
	ctx := context.Background()
	if _, err := a.Likes().Like(ctx, "post", "u"); err != nil {
		t.Fatal(err)
	}
	exchange(t, a, b, boxA, boxB)
	mustBlock(t, b, "u", true)
	if got := mustLikes(t, b, "post"); got.Value != 1 || got.Unreconciled != 1 {
		t.Fatalf("B right after the block: %+v, want the like still counted and unreconciled", got)
	}
	deliver(t, b, boxB, a) // A hears of the flag and reconciles as the winner
	if got := mustLikes(t, a, "post"); got.Value != 0 || got.Unreconciled != 0 {
		t.Fatalf("A after the flag: %+v, want 0 and reconciled", got)
	}
	if _, err := a.Likes().Like(ctx, "other", "u"); !errors.Is(err, ErrBlocked) {
		t.Fatalf("A, which has the flag, took the blocked user's like: %v", err)
	}
	exchange(t, a, b, boxA, boxB)
	if got := mustLikes(t, b, "post"); got.Value != 0 || got.Unreconciled != 0 {
		t.Fatalf("B after A's correction: %+v", got)
	}
	mustBlock(t, a, "u", false)
	exchange(t, a, b, boxA, boxB)
	for _, r := range []*Replica{a, b} {
		if got := mustLikes(t, r, "post"); got.Value != 1 || got.Unreconciled != 0 {
			t.Fatalf("%s after unblock: %+v, want 1", r.ID(), got)
		}
	}
}

// A replica's own flag in a peer's message is refused once it
// acknowledges writes: only it sets flags in its name.
func TestBlockOwnFlagNotTakenFromPeer(t *testing.T) {
	a, _, _, _ := pair(t)
	forged := crdt.Flag{Value: crdt.Block{Blocked: true}, HLC: crdt.MakeHLC(1_700_000_000_500, 0), Origin: "A"}
	if err := a.Merge(context.Background(), nil, []RecordMerge{{Item: BlockRecordItem, User: "u", Rec: crdt.FlagRecord(forged)}}); err != nil {
		t.Fatal(err)
	}
	if f, _ := a.Admin().Flag("u"); !f.IsZero() {
		t.Fatalf("A took a peer's flag in its own name: %+v", f)
	}
	notFlag := &crdt.LikeRecord{Liked: true, HLC: 5, Origin: "B", Contrib: crdt.Vector{{Replica: "B", PN: crdt.PN{P: 1}}}}
	if err := a.Merge(context.Background(), nil, []RecordMerge{{Item: BlockRecordItem, User: "u", Rec: notFlag}}); err != nil {
		t.Fatal(err)
	}
	if f, _ := a.Admin().Flag("u"); !f.IsZero() {
		t.Fatalf("A took a flag with contributions: %+v", f)
	}
}

// blockRun is the region-level simulation: three replicas on real stores
// like, unlike, block and unblock while their commits are delivered in a
// random order, then settle. It returns the first way the counts were not
// exact ("" if none).
func blockRun(t *testing.T, seed uint64, steps int, mut func(*Config)) string {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 18))
	net := newBudgetNet(t, 3, func(c *Config) {
		c.LikeLists = seed%2 == 0
		if mut != nil {
			mut(c)
		}
	})
	items, users := []string{"i0", "i1"}, []string{"u0", "u1", "u2"}
	type action struct {
		hlc    crdt.HLC
		origin string
		liked  bool
	}
	latest := map[[2]string]action{}
	flags := map[string]crdt.Flag{}
	refused := 0
	for range steps {
		i := rng.IntN(len(net.reps))
		r := net.reps[i]
		item, user := items[rng.IntN(len(items))], users[rng.IntN(len(users))]
		switch p := rng.IntN(10); {
		case p < 4:
			liked := rng.IntN(4) != 0
			kind := OpUnlike
			if liked {
				kind = OpLike
			}
			_, err := r.Apply(ctx, Op{Kind: kind, Item: item, User: user})
			if errors.Is(err, ErrBlocked) {
				refused++
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			st, _ := r.Likes().State(item, user)
			latest[[2]string{item, user}] = action{st.HLC, st.Origin, liked}
		case p < 5:
			res := mustBlock(t, r, user, rng.IntN(2) == 0)
			f := flags[user]
			f.Merge(res.Flag)
			flags[user] = f
		default:
			net.post()
			if j := rng.IntN(len(net.reps)); j != i {
				net.deliver(i, j, rng.IntN(4))
			}
		}
	}
	net.settle()
	if refused == 0 && steps >= 200 {
		return "no write was refused: the schedule did not exercise blocks"
	}
	for _, item := range items {
		want := int64(0)
		for _, u := range users {
			if a, ok := latest[[2]string{item, u}]; ok && a.liked && !flags[u].Value.Blocked {
				want++
			}
		}
		for _, r := range net.reps {
			got := mustLikes(t, r, item)
			if got.Value != want || got.Unreconciled != 0 {
				return fmt.Sprintf("%s: %s counts %d (unreconciled %d), want %d", item, r.ID(), got.Value, got.Unreconciled, want)
			}
		}
	}
	for _, r := range net.reps {
		for u, f := range flags {
			if got, _ := r.Admin().Flag(u); got != f {
				return fmt.Sprintf("%s: flag of %s %+v, want %+v", r.ID(), u, got, f)
			}
		}
	}
	return ""
}

func TestBlockSimulation(t *testing.T) {
	seeds := 8
	if testing.Short() {
		seeds = 2
	}
	for seed := range uint64(seeds) {
		if v := blockRun(t, seed, 250, nil); v != "" {
			t.Fatalf("seed %d: %s", seed, v)
		}
	}
}

// The BlockNotReconciled bug leaves counts wrong in a chaos build, caught
// by the simulation, and changes nothing in any other build.
func TestBlockNotReconciledOnlyInChaosBuild(t *testing.T) {
	bug := func(c *Config) { c.Failpoints = testkit.Armed(t, failpoint.BlockNotReconciled) }
	controlCaught(t, "a flag that does not trigger reconciliation", func(seed uint64) string { return blockRun(t, seed, 250, bug) })
}
