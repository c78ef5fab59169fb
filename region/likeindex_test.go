package region

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// listAll pages through a like list with a small page size.
func listAll(t *testing.T, page func(after string, limit int) ([]storage.Listed, bool, error)) []string {
	t.Helper()
	var out []string
	after := ""
	for {
		l, more, err := page(after, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range l {
			out = append(out, fmt.Sprintf("%s@%d", e.ID, e.HLC))
		}
		if !more {
			return out
		}
		after = l[len(l)-1].ID
	}
}

// The liker and liked-item lists are what the records say: two replicas
// taking likes and unlikes of the same pairs concurrently, then
// exchanging, list the same users and items with the same times, and
// exactly the pairs the model says are liked.
func TestLikeListsConvergeWithTheRecords(t *testing.T) {
	a, b, boxA, boxB := pair(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 5))
	items, users := []string{"i1", "i2", "i3"}, []string{"u1", "u2", "u3", "u4", "u5", "u6", "u7"}
	for round := range 30 {
		for range 8 {
			r := []*Replica{a, b}[rng.IntN(2)]
			item, user := items[rng.IntN(len(items))], users[rng.IntN(len(users))]
			var err error
			if rng.IntN(3) == 0 {
				_, err = r.Likes().Unlike(ctx, item, user)
			} else {
				_, err = r.Likes().Like(ctx, item, user)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if round%4 == 3 {
			exchange(t, a, b, boxA, boxB)
		}
	}
	exchange(t, a, b, boxA, boxB)
	for _, item := range items {
		la := listAll(t, func(after string, n int) ([]storage.Listed, bool, error) { return a.Lists().Likers(item, after, n) })
		lb := listAll(t, func(after string, n int) ([]storage.Listed, bool, error) { return b.Lists().Likers(item, after, n) })
		if !slices.Equal(la, lb) {
			t.Fatalf("likers of %s differ:\nA %v\nB %v", item, la, lb)
		}
		var want []string
		for _, u := range users {
			st, err := a.Likes().State(item, u)
			if err != nil {
				t.Fatal(err)
			}
			if st.Liked {
				want = append(want, fmt.Sprintf("%s@%d", u, st.HLC))
			}
		}
		if !slices.Equal(la, want) {
			t.Fatalf("likers of %s %v, but the records say %v", item, la, want)
		}
		if c := mustLikes(t, a, item).Value; int(c) != len(la) {
			t.Fatalf("%s: count %d, %d likers", item, c, len(la))
		}
	}
	for _, u := range users {
		la := listAll(t, func(after string, n int) ([]storage.Listed, bool, error) { return a.Lists().LikedItems(u, after, n) })
		lb := listAll(t, func(after string, n int) ([]storage.Listed, bool, error) { return b.Lists().LikedItems(u, after, n) })
		if !slices.Equal(la, lb) {
			t.Fatalf("items of %s differ:\nA %v\nB %v", u, la, lb)
		}
	}
	if _, _, err := a.Lists().Likers("i1", "", 0); err == nil {
		t.Fatal("limit 0 accepted")
	}
	if _, _, err := a.Lists().Likers("i 1", "", 5); err == nil {
		t.Fatal("a bad id accepted")
	}
}

// A store written before the index existed gets it at its first open.
func TestLikeIndexBuiltForAnOlderStore(t *testing.T) {
	dir := t.TempDir()
	// What an older version left: records, and no index.
	st, err := storage.Open(storage.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	b := st.NewBatch()
	for i := range 5 {
		rec := &crdt.LikeRecord{Liked: i != 2, HLC: crdt.HLC(100 + i), Origin: "a"}
		b.PutLikeRecord("post", fmt.Sprintf("u%d", i), nil, rec)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if l, _, _ := st.Likers("post", "", 10); len(l) != 0 {
		t.Fatalf("an index before any replica opened the store: %v", l)
	}
	_ = st.Close()
	r, closeFn := openReplica(t, dir, "a", func(c *Config) { c.LikeLists = true })
	l, more, err := r.Lists().Likers("post", "", 10)
	if err != nil || more {
		t.Fatal(err, more)
	}
	if got := fmt.Sprint(l); got != "[{u0 0.100} {u1 0.101} {u3 0.103} {u4 0.104}]" {
		t.Fatalf("likers after the rebuild %s", got)
	}
	// Off, the index is dropped; on again, rebuilt, with what changed
	// while it was off.
	closeFn()
	r, closeFn = openReplica(t, dir, "a", nil)
	if _, _, err := r.Lists().Likers("post", "", 10); !errors.Is(err, ErrNoLists) {
		t.Fatalf("lists off: %v", err)
	}
	if _, err := r.Likes().Unlike(context.Background(), "post", "u0"); err != nil {
		t.Fatal(err)
	}
	closeFn()
	r, _ = openReplica(t, dir, "a", func(c *Config) { c.LikeLists = true })
	l, _, _ = r.Lists().Likers("post", "", 10)
	var ids []string
	for _, e := range l {
		ids = append(ids, e.ID)
	}
	if fmt.Sprint(ids) != "[u1 u3 u4]" {
		t.Fatalf("likers after off and on %v", ids)
	}
}

// AllLikers reads a whole set in one view, up to its bound, and says when
// there are more.
func TestAllLikers(t *testing.T) {
	r, closeFn := openReplica(t, t.TempDir(), "a", func(c *Config) { c.LikeLists = true })
	defer closeFn()
	ctx := context.Background()
	for i := range 5 {
		if _, err := r.Likes().Like(ctx, "post", fmt.Sprintf("u%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Likes().Unlike(ctx, "post", "u2"); err != nil {
		t.Fatal(err)
	}
	ids := func(l []storage.Listed) (out []string) {
		for _, e := range l {
			out = append(out, e.ID)
		}
		return out
	}
	l, more, err := r.Lists().AllLikers("post", MaxAllLikers)
	if err != nil || more || fmt.Sprint(ids(l)) != "[u0 u1 u3 u4]" {
		t.Fatalf("all likers: %v %v %v", ids(l), more, err)
	}
	l, more, err = r.Lists().AllLikers("post", 3)
	if err != nil || !more || fmt.Sprint(ids(l)) != "[u0 u1 u3]" {
		t.Fatalf("three of four likers: %v %v %v", ids(l), more, err)
	}
	for _, max := range []int{0, MaxAllLikers + 1} {
		if _, _, err := r.Lists().AllLikers("post", max); !errors.Is(err, ErrInvalid) {
			t.Fatalf("max %d: %v", max, err)
		}
	}
	if _, _, err := r.Lists().AllLikers("a b", 10); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a bad id: %v", err)
	}
}
