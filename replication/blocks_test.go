package replication

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tally-dev/tally/region"
)

// The done-when of the block list, over the real super-cluster: a block
// issued in a region cut off from the others takes the user's likes out of
// the count in every region once the cut heals (also the likes the other
// regions took during the cut, not knowing of the block), and an unblock
// in another region puts them back everywhere.
func TestBlockDuringPartitionOverNATS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-region super-cluster")
	}
	t.Parallel() // mostly waits on NATS and replication timers
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl, nodes := startSuperCluster(ctx, t)
	us, eu, ap := nodes[0], nodes[1], nodes[2]
	// "spam" likes three posts, each in another region; two others like post0.
	for i, n := range nodes {
		if _, err := n.replica.Likes().Like(ctx, fmt.Sprint("post", i), "spam"); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range []string{"alice", "bob"} {
		if _, err := eu.replica.Likes().Like(ctx, "post0", u); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		converged(t, nodes, fmt.Sprint("post", i), map[int]int64{0: 3, 1: 1, 2: 1}[i], 15*time.Second)
	}

	// Cut us off, block spam there; eu, not knowing, takes spam's new like.
	for _, other := range []string{"eu", "ap"} {
		if err := cl.SetLink("us", other, false); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond) // let the cut take (in-flight deltas land)
	if _, err := us.replica.Admin().Block(ctx, "spam", true); err != nil {
		t.Fatal(err)
	}
	if _, err := us.replica.Likes().Like(ctx, "post3", "spam"); !errors.Is(err, region.ErrBlocked) {
		t.Fatalf("us took a like of the user it blocked: %v", err)
	}
	if _, err := eu.replica.Likes().Like(ctx, "post3", "spam"); err != nil {
		t.Fatalf("eu, which has not heard of the block, refused the like: %v", err)
	}
	// us reads its own side: spam's like of post0, whose winner is us,
	// leaves at once; the one of post1 (eu's) still counts there, and the
	// read says it may move.
	if rd, _ := us.replica.Likes().Count("post0"); rd.Value != 2 || rd.Unreconciled != 0 {
		t.Fatalf("us during the cut, post0: %+v, want 2", rd)
	}
	if rd, _ := us.replica.Likes().Count("post1"); rd.Value != 1 || rd.Unreconciled != 1 {
		t.Fatalf("us during the cut, post1: %+v, want 1 with spam's like unreconciled", rd)
	}
	if rd, _ := eu.replica.Likes().Count("post0"); rd.Value != 3 {
		t.Fatalf("eu during the cut, post0: %+v, want 3 (no block heard)", rd)
	}

	healed := time.Now()
	for _, other := range []string{"eu", "ap"} {
		if err := cl.SetLink("us", other, true); err != nil {
			t.Fatal(err)
		}
	}
	for item, want := range map[string]int64{"post0": 2, "post1": 0, "post2": 0, "post3": 0} {
		converged(t, nodes, item, want, 20*time.Second)
	}
	t.Logf("blocked likes left every region %s after the heal", time.Since(healed).Round(time.Millisecond))
	for _, n := range nodes {
		if _, err := n.replica.Likes().Like(ctx, "post4", "spam"); !errors.Is(err, region.ErrBlocked) {
			t.Fatalf("%s took a blocked user's like after the heal: %v", n.id, err)
		}
	}

	// Unblock at ap: every like spam made comes back everywhere.
	if _, err := ap.replica.Admin().Block(ctx, "spam", false); err != nil {
		t.Fatal(err)
	}
	for item, want := range map[string]int64{"post0": 3, "post1": 1, "post2": 1, "post3": 1} {
		converged(t, nodes, item, want, 20*time.Second)
	}
	for _, n := range nodes {
		f, err := n.replica.Admin().Flag("spam")
		if err != nil || f.Value.Blocked || f.Origin != "ap-1" {
			t.Fatalf("%s: flag %+v, %v", n.id, f, err)
		}
	}
}
