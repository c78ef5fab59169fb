package region

import (
	"context"
	"errors"
	"testing"
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
	if _, err := a.Like(ctx, "post", "other"); err != nil {
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
	if liked, _ := a.Liked("post", "u"); !liked || mustLikes(t, a, "post").Value != 2 {
		t.Fatalf("record liked %v, count %d", liked, mustLikes(t, a, "post").Value)
	}
	// A plain like after the toggle takes the register: the old key is
	// forgotten, and its retry is a new toggle.
	if _, err := a.Unlike(ctx, "post", "u"); err != nil {
		t.Fatal(err)
	}
	if res := toggle(t, a, "post", "u", "tap-2"); !res.Liked || res.Duplicate {
		t.Fatalf("toggle after a plain unlike: %+v", res)
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
	if _, err := a.Block(ctx, "u", true); err != nil {
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
	if _, err := a.Like(ctx, "post", "u"); err != nil {
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
	sa, _ := a.LikeOf("post", "u")
	sb, _ := b.LikeOf("post", "u")
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
	sa, _ = a.LikeOf("post", "u")
	sb, _ = b.LikeOf("post", "u")
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
		if _, err := a.Like(ctx, "post", "u"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Like(ctx, "post", "v"); err != nil {
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
			if liked, _ := r.Liked("post", "u"); liked {
				t.Errorf("heard=%v: %s says u likes post", heard, r.ID())
			}
			if rd := mustLikes(t, r, "post"); rd.Value != 1 || rd.Unreconciled != 0 {
				t.Errorf("heard=%v: %s counts %d (unreconciled %d), want 1 (v only)", heard, r.ID(), rd.Value, rd.Unreconciled)
			}
		}
	}
}
