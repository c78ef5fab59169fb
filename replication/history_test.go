package replication

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/region"
)

// A pair's history is every like and unlike any replica accepted, in
// stamp order, the same asked anywhere; a replica that does not answer is
// named, not silently left out.
func TestHistoryGathersEveryReplica(t *testing.T) {
	s := startNATS(t)
	ids := []string{"us-1", "eu-1", "ap-1"}
	var nodes []*node
	for i, r := range []string{"us", "eu", "ap"} {
		n := startNodeWith(t, s.ClientURL(), r, ids[i], filepath.Join(t.TempDir(), ids[i]), ids,
			func(c *region.Config) { c.EventLog = true })
		nodes = append(nodes, n)
	}
	defer func() {
		for _, n := range nodes[:2] {
			n.close()
		}
	}()
	for _, n := range nodes {
		testkit.WaitFor(t, 10*time.Second, func() error {
			if !n.replica.Accepting() {
				return fmt.Errorf("%s not accepting", n.id)
			}
			return nil
		})
	}
	ctx := context.Background()
	want := ""
	for i, n := range []*node{nodes[0], nodes[1], nodes[2], nodes[0], nodes[1]} {
		var err error
		if i%2 == 0 {
			_, err = n.replica.Likes().Like(ctx, "post", "alice")
			want += n.id + ":like "
		} else {
			_, err = n.replica.Likes().Unlike(ctx, "post", "alice")
			want += n.id + ":unlike "
		}
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // later stamps, whatever the clocks
	}
	render := func(h PairHistory) string {
		out := ""
		var last crdt.HLC
		for _, a := range h.Actions {
			if a.HLC < last {
				t.Fatalf("history out of stamp order: %+v", h.Actions)
			}
			last = a.HLC
			verb := "unlike"
			if a.Liked {
				verb = "like"
			}
			out += a.Replica + ":" + verb + " "
		}
		return out
	}
	for _, n := range nodes {
		h, err := n.rep.History(ctx, "post", "alice", 100)
		if err != nil || len(h.Missing) != 0 || render(h) != want {
			t.Fatalf("history at %s: %q (missing %v), %v; want %q", n.id, render(h), h.Missing, err, want)
		}
	}
	// A split item's part (crdt.PartName) has its history too, gathered
	// whole: every replica answers for its own.
	part := crdt.PartName("post", 1)
	if _, err := nodes[1].replica.Likes().Like(ctx, part, "alice"); err != nil {
		t.Fatal(err)
	}
	if h, err := nodes[0].rep.History(ctx, part, "alice", 100); err != nil || len(h.Missing) != 0 || render(h) != "eu-1:like " {
		t.Fatalf("history of the part %s: %q (missing %v), %v", part, render(h), h.Missing, err)
	}
	// ap stops: asked at us, ap's like is missing, and ap is named.
	nodes[2].close()
	h, err := nodes[0].rep.History(ctx, "post", "alice", 100)
	if err != nil || len(h.Missing) != 1 || h.Missing[0] != "ap-1" || len(h.Actions) != 4 {
		t.Fatalf("with ap down: %+v, %v", h, err)
	}
}

func FuzzDecodeHistoryReply(f *testing.F) {
	f.Add([]byte{wireV1, typeHistory, 2, 'u', 's', 1, 1, 5, 3})
	f.Add([]byte{wireV1, typeHistory, 2, 'u', 's', 1, 1, 5, 3, 1})
	f.Add([]byte{wireV1, typeHistory, 2, 'u', 's', 0, 2})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		actions, partial, err := DecodeHistoryReply(b, "us-1")
		if err != nil {
			if partial || actions != nil {
				t.Fatalf("an error with a result: %v %v", actions, partial)
			}
			return
		}
		if len(actions) > region.MaxHistory {
			t.Fatalf("%d actions", len(actions))
		}
	})
}
