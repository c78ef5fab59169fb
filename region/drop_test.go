package region

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/tally-dev/tally/shard"
	"github.com/tally-dev/tally/storage"
)

// Dropping a shard forgets the other replicas' likes, like lists and
// digests of it, and keeps this replica's own entries and records (nobody
// may give them back) and everything of another shard; the digests stay
// those of what the store holds (a reopen recomputes the same); and the
// shard taken back counts the others' entries again as they come.
func TestDropShardsKeepsOnlyOwnEntries(t *testing.T) {
	dir := t.TempDir()
	lists := func(c *Config) { c.LikeLists = true }
	a, closeA := openReplica(t, dir, "a", lists)
	b, _ := openReplica(t, t.TempDir(), "b", lists)
	ctx := context.Background()
	gone, kept := "", "" // items on two shards
	for i := 0; gone == "" || kept == ""; i++ {
		item := fmt.Sprintf("post%d", i)
		switch {
		case gone == "":
			gone = item
		case shard.Of(item) != shard.Of(gone):
			kept = item
		}
	}
	for _, item := range []string{gone, kept} {
		mustLike(t, a, item, "u1")
		mustLike(t, b, item, "u2")
		mustLike(t, b, item, "u3")
	}
	if _, err := a.Counters().Incr(ctx, gone, 5, "once"); err != nil {
		t.Fatal(err)
	}
	// b's state of both items, as anti-entropy would bring it to a.
	fromB := func() {
		t.Helper()
		var vecs []VectorMerge
		var recs []RecordMerge
		for _, item := range []string{gone, kept} {
			v, err := b.store.Vector(storage.Likes, item)
			if err != nil {
				t.Fatal(err)
			}
			vecs = append(vecs, VectorMerge{Kind: storage.Likes, Item: item, Vec: v})
			for _, u := range []string{"u2", "u3"} {
				rec, ok, err := b.store.LikeRecord(item, u)
				if err != nil || !ok {
					t.Fatal(ok, err)
				}
				recs = append(recs, RecordMerge{Item: item, User: u, Rec: rec})
			}
		}
		if err := a.Merge(ctx, vecs, recs); err != nil {
			t.Fatal(err)
		}
	}
	fromB()
	if got := mustLikes(t, a, gone); got.Value != 3 {
		t.Fatalf("%s before the drop: %+v", gone, got)
	}

	n, err := a.Admin().DropShards(ctx, []int{shard.Of(gone)})
	if err != nil || n == 0 {
		t.Fatalf("DropShards: %d entries, %v", n, err)
	}
	if got := mustLikes(t, a, gone); got.Value != 1 || len(got.Vector) != 1 || got.Vector[0].Replica != "a" {
		t.Fatalf("%s after its shard is dropped: %+v, want a's own entry alone", gone, got)
	}
	if got := mustLikes(t, a, kept); got.Value != 3 {
		t.Fatalf("%s of another shard: %+v", kept, got)
	}
	if users := likers(t, a, gone); !slices.Equal(users, []string{"u1"}) {
		t.Fatalf("likers of %s after the drop: %v, want a's own u1", gone, users)
	}
	if res, err := a.Counters().Incr(ctx, gone, 5, "once"); err != nil || res.Changed || res.Value != 5 {
		t.Fatalf("the own idempotency key after the drop: %+v %v, want a duplicate of 5", res, err)
	}

	// The shard comes back: b's entries count again as they come.
	fromB()
	if got := mustLikes(t, a, gone); got.Value != 3 {
		t.Fatalf("%s taken back: %+v", gone, got)
	}
	if users := likers(t, a, gone); !slices.Equal(users, []string{"u1", "u2", "u3"}) {
		t.Fatalf("likers of %s taken back: %v", gone, users)
	}
	d := a.store.Digests()
	closeA()
	st, err := storage.Open(storage.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for seg, dg := range st.Digests() { // computed from what is stored
		if dg != d[seg] {
			t.Fatalf("segment %d: digest %x from the store, %x kept", seg, dg, d[seg])
		}
	}
}

func mustLike(t *testing.T, r *Replica, item, user string) {
	t.Helper()
	if _, err := r.Likes().Like(context.Background(), item, user); err != nil {
		t.Fatal(err)
	}
}

func likers(t *testing.T, r *Replica, item string) []string {
	t.Helper()
	users, _, err := r.Lists().AllLikers(item, 10)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, u := range users {
		out = append(out, u.ID)
	}
	return out
}
