package region

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tally-dev/tally/storage"
)

// A backfilled event (Op.Import) is booked at its own time however old:
// in the total, and in the slots of the levels that still keep that time
// (two days ago: the 1 min and 1 h levels, not the 1 s one); three years
// ago, in the total only. The same event live is refused as too old; an
// import from the future, or of a budget, is refused too. Its
// idempotency key makes a second import a duplicate.
func TestImportBooksOldEventsAtTheirTime(t *testing.T) {
	ctx := context.Background()
	r, _ := openReplica(t, t.TempDir(), "A", nil)
	now := time.Now()
	twoDays := now.Add(-48 * time.Hour).UnixMilli()
	if _, err := r.Apply(ctx, Op{Kind: OpIncr, Item: "views", By: 5, IdemKey: "imp-1", At: twoDays}); !errors.Is(err, ErrBadTime) {
		t.Fatalf("a live increment two days old: %v", err)
	}
	res, err := r.Apply(ctx, Op{Kind: OpIncr, Item: "views", By: 5, IdemKey: "imp-1", At: twoDays, Import: true})
	if err != nil || res.Value != 5 {
		t.Fatalf("import: %+v %v", res, err)
	}
	if res, err := r.Apply(ctx, Op{Kind: OpIncr, Item: "views", By: 5, IdemKey: "imp-1", At: twoDays, Import: true}); err != nil || !res.Duplicate || res.Value != 5 {
		t.Fatalf("import again: %+v %v", res, err)
	}
	old := time.Date(2023, 10, 31, 15, 17, 12, 0, time.UTC).UnixMilli() // the walkthrough's 1698765432
	if _, err := r.Apply(ctx, Op{Kind: OpLike, Item: "v123", User: "u456", At: old, Import: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Apply(ctx, Op{Kind: OpIncr, Item: "views", By: 2, IdemKey: "imp-2", At: old, Import: true}); err != nil {
		t.Fatal(err)
	}
	if rd, err := r.Counters().Get("views"); err != nil || rd.Value != 7 {
		t.Fatalf("total %d (%v), want 7", rd.Value, err)
	}
	if rd, err := r.Likes().Count("v123"); err != nil || rd.Value != 1 {
		t.Fatalf("likes of v123 %d (%v), want 1", rd.Value, err)
	}
	for _, c := range []struct {
		from, to time.Time
		step     time.Duration
		want     int64
	}{
		{now.Add(-49 * time.Hour), now.Add(-47 * time.Hour), time.Hour, 5},
		{now.Add(-48*time.Hour - 5*time.Minute), now.Add(-48*time.Hour + 5*time.Minute), time.Minute, 5},
		{time.UnixMilli(old).Add(-24 * time.Hour), time.UnixMilli(old).Add(24 * time.Hour), time.Hour, 0},
	} {
		w, err := r.Windows().Series(storage.Counters, "views", c.from.UnixMilli(), c.to.UnixMilli(), c.step)
		var sum int64
		for _, p := range w.Points {
			sum += p.Value()
		}
		if err != nil && c.want != 0 || sum != c.want {
			t.Errorf("series %v..%v by %v: %d (%v), want %d", c.from, c.to, c.step, sum, err, c.want)
		}
	}
	for _, op := range []Op{
		{Kind: OpIncr, Item: "views", By: 1, At: now.Add(5 * time.Minute).UnixMilli(), Import: true},
	} {
		if _, err := r.Apply(ctx, op); !errors.Is(err, ErrBadTime) {
			t.Errorf("%+v: %v", op, err)
		}
	}
	if _, err := r.Apply(ctx, Op{Kind: OpGrant, Item: "b", By: 1, Import: true}); !errors.Is(err, ErrInvalid) {
		t.Errorf("an imported grant: %v", err)
	}
}
