package region

import (
	"context"
	"fmt"
	"testing"

	"github.com/tally-dev/tally/shard"
	"github.com/tally-dev/tally/storage"
)

// Dropping a shard forgets its likes, like lists, keyed counters and
// digests, and nothing of another shard; the digests stay those of what
// the store holds (a reopen recomputes the same); and the shard taken
// back later counts from what it is given, its like lists included.
func TestDropShardsForgetsTheirDataOnly(t *testing.T) {
	dir := t.TempDir()
	r, closeR := openReplica(t, dir, "a", func(c *Config) { c.LikeLists = true })
	ctx := context.Background()
	// Two items on different shards.
	gone, kept := "", ""
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
		for _, u := range []string{"u1", "u2", "u3"} {
			if _, err := r.Like(ctx, item, u); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := r.Incr(ctx, item, 5, "once"); err != nil {
			t.Fatal(err)
		}
	}
	s := shard.Of(gone)
	n, err := r.DropShards(ctx, []int{s})
	if err != nil || n == 0 {
		t.Fatalf("DropShards: %d entries, %v", n, err)
	}
	if got := mustLikes(t, r, gone); got.Value != 0 || len(got.Vector) != 0 {
		t.Fatalf("%s after its shard is dropped: %+v", gone, got)
	}
	if got := mustLikes(t, r, kept); got.Value != 3 {
		t.Fatalf("%s of another shard: %+v", kept, got)
	}
	if c, err := r.Counter(kept); err != nil || c.Value != 5 {
		t.Fatalf("counter %s: %+v %v", kept, c, err)
	}
	if users, _, err := r.AllLikers(gone, 10); err != nil || len(users) != 0 {
		t.Fatalf("likers of %s after the drop: %v %v", gone, users, err)
	}
	if liked, err := r.Liked(gone, "u1"); err != nil || liked {
		t.Fatalf("u1 likes %s after the drop: %v %v", gone, liked, err)
	}
	d := r.store.Digests()
	for seg := s * storage.SegmentsPerShard; seg < (s+1)*storage.SegmentsPerShard; seg++ {
		if d[seg] != 0 {
			t.Fatalf("segment %d of the dropped shard has digest %x", seg, d[seg])
		}
	}

	// The shard comes back: likes count from zero again, the like list
	// follows, and the incr's idempotency key was forgotten with it.
	if res, err := r.Like(ctx, gone, "u1"); err != nil || !res.Changed || res.Value != 1 {
		t.Fatalf("a like of %s after the drop: %+v %v", gone, res, err)
	}
	if users, _, err := r.AllLikers(gone, 10); err != nil || len(users) != 1 || users[0].ID != "u1" {
		t.Fatalf("likers of %s: %v %v", gone, users, err)
	}
	d = r.store.Digests()
	closeR()
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
