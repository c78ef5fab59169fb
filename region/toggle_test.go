package region

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
)

func toggle(t *testing.T, r *Replica, item, user, idem string) Result {
	t.Helper()
	res, err := r.Apply(context.Background(), Op{Kind: OpToggle, Item: item, User: user, IdemKey: idem})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A toggle flips the user's state in one step of the writer and answers
// the new state and count; a retry with its idempotency key flips nothing
// and answers the state the toggle decided.
func TestToggle(t *testing.T) {
	a, _, _, _ := pair(t)
	ctx := context.Background()
	if _, err := a.Likes().Like(ctx, "post", "other"); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		liked bool
		count int64
	}{{true, 2}, {false, 1}, {true, 2}}
	for i, w := range want {
		res := toggle(t, a, "post", "u", "")
		if res.Liked != w.liked || !res.Changed || res.Value != w.count || res.Duplicate {
			t.Fatalf("toggle #%d: %+v, want liked %v count %d", i, res, w.liked, w.count)
		}
	}
	// Keyed: flips once, however often it is retried.
	first := toggle(t, a, "post", "u", "tap-1")
	if first.Liked || !first.Changed || first.Value != 1 || first.Duplicate {
		t.Fatalf("keyed toggle: %+v", first)
	}
	for range 3 {
		if res := toggle(t, a, "post", "u", "tap-1"); res.Liked || res.Changed || !res.Duplicate || res.Value != 1 {
			t.Fatalf("retried toggle: %+v, want a duplicate answering liked false, count 1", res)
		}
	}
	if res := toggle(t, a, "post", "u", "tap-2"); !res.Liked || res.Duplicate || res.Value != 2 {
		t.Fatalf("a new key flips: %+v", res)
	}
	if liked, _ := a.Likes().Liked("post", "u"); !liked || mustLikes(t, a, "post").Value != 2 {
		t.Fatalf("record liked %v, count %d", liked, mustLikes(t, a, "post").Value)
	}
	// A plain unlike after the toggle takes the register, but the key is
	// remembered in its own record: its retry is still a duplicate,
	// answering the state the toggle left, and flips nothing.
	if _, err := a.Likes().Unlike(ctx, "post", "u"); err != nil {
		t.Fatal(err)
	}
	if res := toggle(t, a, "post", "u", "tap-2"); !res.Liked || res.Changed || !res.Duplicate || res.Value != 1 {
		t.Fatalf("retried toggle after a plain unlike: %+v, want a duplicate answering liked true, count 1", res)
	}
	if liked, _ := a.Likes().Liked("post", "u"); liked {
		t.Fatal("the retry flipped the unlike")
	}

	for _, bad := range []Op{
		{Kind: OpToggle, Item: "post", User: "u", At: 1_700_000_000_000},
		{Kind: OpToggle, Item: "post", User: "u", IdemKey: "a/b"},
		{Kind: OpToggle, Item: "post", User: ""},
	} {
		if _, err := a.Apply(ctx, bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: err %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := a.Admin().Block(ctx, "u", true); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Apply(ctx, Op{Kind: OpToggle, Item: "post", User: "u"}); !errors.Is(err, ErrBlocked) {
		t.Errorf("toggle of a blocked user: %v, want ErrBlocked", err)
	}
}

// A toggle retried in another region that has heard of it is a
// duplicate there too; toggles in two regions at once reconcile to one
// state, the same in both, with the count exact.
func TestToggleAcrossRegions(t *testing.T) {
	a, b, boxA, boxB := pair(t)
	ctx := context.Background()
	if _, err := a.Likes().Like(ctx, "post", "u"); err != nil {
		t.Fatal(err)
	}
	exchange(t, a, b, boxA, boxB)
	first := toggle(t, a, "post", "u", "tap-1")
	exchange(t, a, b, boxA, boxB)
	if res := toggle(t, b, "post", "u", "tap-1"); !res.Duplicate || res.Liked != first.Liked || res.Value != 0 {
		t.Fatalf("retry in the other region: %+v, want a duplicate of %+v", res, first)
	}

	// Concurrent toggles (a cut): each flips its own view.
	ra := toggle(t, a, "post", "u", "tap-a")
	rb := toggle(t, b, "post", "u", "tap-b")
	if !ra.Liked || !rb.Liked {
		t.Fatalf("concurrent toggles from unliked: %+v %+v", ra, rb)
	}
	if mustLikes(t, b, "post").Value != 1 {
		t.Fatal("b's own view")
	}
	exchange(t, a, b, boxA, boxB)
	sa, _ := a.Likes().State("post", "u")
	sb, _ := b.Likes().State("post", "u")
	if sa != sb || !sa.Liked || sa.Origin != "B" {
		t.Fatalf("after the exchange: A %+v, B %+v; want both liked by B's later toggle", sa, sb)
	}
	for _, r := range []*Replica{a, b} {
		if rd := mustLikes(t, r, "post"); rd.Value != 1 || rd.Unreconciled != 0 {
			t.Fatalf("%s: count %d unreconciled %d, want 1 and 0", r.ID(), rd.Value, rd.Unreconciled)
		}
	}
	// And from different views: A toggles (liked -> unliked) and B, not
	// having heard, toggles too, and then B's retry of A's key finds B's
	// own key in the register: a flip, decided from what B saw.
	toggle(t, a, "post", "u", "tap-c")
	toggle(t, b, "post", "u", "tap-d")
	exchange(t, a, b, boxA, boxB)
	sa, _ = a.Likes().State("post", "u")
	sb, _ = b.Likes().State("post", "u")
	if sa != sb || sa.Liked || mustLikes(t, a, "post").Value != 0 || mustLikes(t, b, "post").Value != 0 {
		t.Fatalf("second concurrent pair: A %+v, B %+v", sa, sb)
	}
}

// Issue 34's scenario: an unlike at t, then a like stamped t − 30 s that
// arrives later, at another region: unliked everywhere, in three regions,
// whether the late like's region had heard of the unlike or not.
func TestLikeClientTimeAcrossRegions(t *testing.T) {
	for _, heard := range []bool{true, false} {
		clock := &stepClock{}
		boxes := []*mailbox{{}, {}, {}}
		var reps []*Replica
		for i, id := range []string{"A", "B", "C"} {
			r, _ := openReplica(t, t.TempDir(), id, func(c *Config) { c.OnCommit, c.Now, c.LikeLists = boxes[i].onCommit, clock.now, true })
			reps = append(reps, r)
		}
		a, b, c := reps[0], reps[1], reps[2]
		ctx := context.Background()
		if _, err := a.Likes().Like(ctx, "post", "u"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Likes().Like(ctx, "post", "v"); err != nil {
			t.Fatal(err)
		}
		tMs := clock.now().UnixMilli()
		res, err := a.Apply(ctx, Op{Kind: OpUnlike, Item: "post", User: "u", At: tMs})
		if err != nil || res.Liked {
			t.Fatalf("unlike at t: %+v %v", res, err)
		}
		if heard {
			deliver(t, a, boxes[0], b)
		}
		late, err := b.Apply(ctx, Op{Kind: OpLike, Item: "post", User: "u", At: tMs - 30_000})
		if err != nil {
			t.Fatal(err)
		}
		if heard && (late.Liked || late.Changed) {
			t.Fatalf("the late like at a region that has the unlike: %+v, want liked false, unchanged", late)
		}
		// Deliver everything everywhere, C hearing B before A.
		for range 3 {
			for _, from := range []int{1, 0, 2} {
				box := boxes[from]
				changes := box.take()
				for _, to := range reps {
					if to == reps[from] {
						continue
					}
					box.out = changes
					deliver(t, reps[from], box, to)
				}
			}
		}
		for _, r := range reps {
			if liked, _ := r.Likes().Liked("post", "u"); liked {
				t.Errorf("heard=%v: %s says u likes post", heard, r.ID())
			}
			if rd := mustLikes(t, r, "post"); rd.Value != 1 || rd.Unreconciled != 0 {
				t.Errorf("heard=%v: %s counts %d (unreconciled %d), want 1 (v only)", heard, r.ID(), rd.Value, rd.Unreconciled)
			}
		}
	}
}

// The sequence: toggle with key tkB (liked), toggle with tkC
// (unliked), retry tkB: a duplicate answering liked, nothing flipped, for
// as long as the key is remembered (IdempotencyTTL after it was applied,
// whether or not swept); then it is a new toggle. Likes and unlikes with
// a key are the same: a retried keyed like after the user's unlike
// answers liked and does not like again.
func TestToggleRetryAfterLaterActions(t *testing.T) {
	clock := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
	a, _ := openReplica(t, t.TempDir(), "A", func(c *Config) {
		c.Now, c.IdempotencyTTL, c.IdempotencySweep = clock.Now, time.Hour, 1000*time.Hour
	})
	ctx := context.Background()
	if res := toggle(t, a, "v", "u", "tkB"); !res.Liked || !res.Changed || res.Value != 1 {
		t.Fatalf("tkB: %+v", res)
	}
	clock.Advance(10 * time.Minute)
	if res := toggle(t, a, "v", "u", "tkC"); res.Liked || !res.Changed || res.Value != 0 {
		t.Fatalf("tkC: %+v", res)
	}
	for _, key := range []string{"tkB", "tkB", "tkC"} {
		res := toggle(t, a, "v", "u", key)
		if !res.Duplicate || res.Changed || res.Liked != (key == "tkB") || res.Value != 0 {
			t.Fatalf("retry of %s: %+v, want a duplicate answering liked %v, count 0", key, res, key == "tkB")
		}
	}
	// Keyed likes and unlikes, and a toggle's key reused by an unlike:
	// one namespace of (item, user, key).
	like := func(kind OpKind, key string) Result {
		t.Helper()
		res, err := a.Apply(ctx, Op{Kind: kind, Item: "v", User: "u", IdemKey: key})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := like(OpLike, "lk1"); !res.Liked || !res.Changed || res.Duplicate || res.Value != 1 {
		t.Fatalf("keyed like: %+v", res)
	}
	if res := like(OpUnlike, "ul1"); res.Liked || !res.Changed || res.Value != 0 {
		t.Fatalf("keyed unlike: %+v", res)
	}
	if res := like(OpLike, "lk1"); !res.Duplicate || !res.Liked || res.Changed || res.Value != 0 {
		t.Fatalf("retried like after an unlike: %+v, want a duplicate answering liked, count 0", res)
	}
	if res := like(OpUnlike, "tkB"); !res.Duplicate || !res.Liked || res.Value != 0 {
		t.Fatalf("an unlike under tkB: %+v, want tkB's outcome", res)
	}
	if liked, _ := a.Likes().Liked("v", "u"); liked || mustLikes(t, a, "v").Value != 0 {
		t.Fatal("a retry changed the state")
	}
	if _, err := a.Apply(ctx, Op{Kind: OpLike, Item: "v", User: "u", IdemKey: "a/b"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a like with a bad key: %v", err)
	}
	// Past the TTL (tkB was applied 10 min before tkC): forgotten, a new
	// toggle.
	clock.Advance(55 * time.Minute)
	if res := toggle(t, a, "v", "u", "tkB"); !res.Liked || !res.Changed || res.Duplicate || res.Value != 1 {
		t.Fatalf("tkB past the TTL: %+v, want a new toggle", res)
	}
	if res := toggle(t, a, "v", "u", "tkC"); !res.Duplicate || res.Liked {
		t.Fatalf("tkC within the TTL: %+v", res)
	}
	// The sweep deletes the expired keys of the old application (tkB
	// was stored anew): lk1, ul1 and tkC are younger than the TTL.
	if n, err := a.Admin().ExpireIdempotency(ctx, clock.Now()); err != nil || n != 0 {
		t.Errorf("sweep: %d, %v; want 0", n, err)
	}
	clock.Advance(2 * time.Hour)
	if n, err := a.Admin().ExpireIdempotency(ctx, clock.Now()); err != nil || n != 4 {
		t.Errorf("sweep after the TTL: %d, %v; want 4 (tkB, tkC, lk1, ul1)", n, err)
	}
}

// Across regions: B, having heard of A's toggle tkB and of A's later
// toggle tkC, answers a retry of tkB as a duplicate with tkB's outcome;
// so does A after B's own later action. The keyed records merge by their
// register and count in no vector: the counts stay exact.
func TestToggleRetryAfterLaterActionsAcrossRegions(t *testing.T) {
	a, b, boxA, boxB := pair(t)
	if res := toggle(t, a, "v", "u", "tkB"); !res.Liked {
		t.Fatalf("tkB: %+v", res)
	}
	exchange(t, a, b, boxA, boxB)
	if res := toggle(t, a, "v", "u", "tkC"); res.Liked {
		t.Fatalf("tkC: %+v", res)
	}
	exchange(t, a, b, boxA, boxB)
	if res := toggle(t, b, "v", "u", "tkB"); !res.Duplicate || !res.Liked || res.Changed || res.Value != 0 {
		t.Fatalf("retry of tkB at B: %+v, want a duplicate answering liked, count 0", res)
	}
	if res := toggle(t, b, "v", "u", "tkD"); !res.Liked || res.Duplicate {
		t.Fatalf("tkD at B: %+v", res)
	}
	exchange(t, a, b, boxA, boxB)
	for _, key := range []string{"tkB", "tkC", "tkD"} {
		if res := toggle(t, a, "v", "u", key); !res.Duplicate || res.Liked != (key != "tkC") || res.Value != 1 {
			t.Fatalf("retry of %s at A: %+v", key, res)
		}
	}
	for _, r := range []*Replica{a, b} {
		if rd := mustLikes(t, r, "v"); rd.Value != 1 || rd.Unreconciled != 0 {
			t.Fatalf("%s: count %d unreconciled %d, want 1 and 0", r.ID(), rd.Value, rd.Unreconciled)
		}
	}
	// Concurrent first applications of one key in both regions (a
	// client failing over before the first reached the other): each
	// region applied it once, and the record converges to one outcome.
	ra := toggle(t, a, "w", "u", "tkE")
	rb := toggle(t, b, "w", "u", "tkE")
	if ra.Duplicate || rb.Duplicate {
		t.Fatalf("concurrent tkE: %+v %+v", ra, rb)
	}
	exchange(t, a, b, boxA, boxB)
	xa, xb := toggle(t, a, "w", "u", "tkE"), toggle(t, b, "w", "u", "tkE")
	if !xa.Duplicate || !xb.Duplicate || xa.Liked != xb.Liked {
		t.Fatalf("tkE after the exchange: A %+v, B %+v; want one outcome", xa, xb)
	}
}
