package region

import (
	"context"
	"fmt"
	"testing"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// The log accounts for every own entry: likes, unlikes, repeats, keyed and
// unkeyed increments (folded per commit) and reconciliations of like and
// keyed records; a write that bypasses the log is caught.
func TestAuditAccountsForEveryOwnEntry(t *testing.T) {
	boxA, boxB := &mailbox{}, &mailbox{}
	clock := &stepClock{}
	a, _ := openReplica(t, t.TempDir(), "A", func(c *Config) { c.OnCommit, c.Now, c.EventLog = boxA.onCommit, clock.now, true })
	b, _ := openReplica(t, t.TempDir(), "B", func(c *Config) { c.OnCommit, c.Now, c.EventLog = boxB.onCommit, clock.now, true })
	ctx := context.Background()
	for i := range 20 {
		for _, r := range []*Replica{a, b} {
			if _, err := r.Likes().Like(ctx, "post", fmt.Sprintf("u%d", i)); err != nil { // both: reconciled
				t.Fatal(err)
			}
			if _, err := r.Counters().Incr(ctx, "views", 3, fmt.Sprintf("k%d", i)); err != nil { // both: reconciled
				t.Fatal(err)
			}
		}
		if _, err := a.Likes().Unlike(ctx, "post", fmt.Sprintf("u%d", i/2)); err != nil {
			t.Fatal(err)
		}
	}
	ops := make([]Op, 100)
	for i := range ops {
		ops[i] = Op{Kind: OpIncr, Item: "hits", By: int64(i%7 - 2)}
	}
	if _, err := b.Do(ctx, ops); err != nil {
		t.Fatal(err)
	}
	exchange(t, a, b, boxA, boxB)
	for r, vectors := range map[*Replica]int{a: 2, b: 3} { // b also counted hits
		rep, err := r.Admin().Audit(0, "")
		if err != nil || !rep.OK() || !rep.Complete || rep.Vectors != vectors || rep.Events == 0 {
			t.Fatalf("%s: %+v, %v", r.ID(), rep, err)
		}
	}
	if rd, _ := a.Counters().Get("views"); rd.Value != 60 {
		t.Fatalf("views %d, want 60", rd.Value)
	}
	// A write that bypasses the log (as a bug would) shows as a difference.
	bt := a.store.NewBatch()
	bt.PutVectorEntry(storage.Counters, "views", "A", crdt.PN{P: 60}, crdt.PN{P: 61})
	if err := bt.Commit(); err != nil {
		t.Fatal(err)
	}
	bt.Close()
	rep, err := a.Admin().Audit(storage.Counters, "views")
	if err != nil || rep.OK() || len(rep.Diffs) != 1 || rep.Diffs[0].Stored.P != rep.Diffs[0].Logged.P+1 {
		t.Fatalf("a write outside the log went unnoticed: %+v, %v", rep, err)
	}
}
