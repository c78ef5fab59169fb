package region

import (
	"context"
	"testing"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// A replica knows, for good, that its store lost state of its own when
// recovery takes back from a peer an own entry or an own action it did
// not hold; a peer's view of state it does hold, or of others' state,
// is no such sign, and neither is a peer's claim once writes are
// acknowledged (that is refused as a forgery).
func TestStateLostOnlyWhenRecoveryTakesBackOwnState(t *testing.T) {
	ctx := context.Background()
	held := func(c *Config) { c.HoldWrites = true }

	// A store that lost nothing: recovery brings only the peer's entries
	// and the own entries it already holds.
	dir := t.TempDir()
	a, closeA := openReplica(t, dir, "A", nil)
	if _, err := a.Counters().Incr(ctx, "c", 3, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Likes().Like(ctx, "post", "alice"); err != nil {
		t.Fatal(err)
	}
	rec, _, _ := a.Likes().Record("post", "alice")
	closeA()
	a, closeA = openReplica(t, dir, "A", held)
	same := crdt.Vector{}.Set("A", crdt.PN{P: 3}).Set("B", crdt.PN{P: 5})
	if err := a.Merge(ctx, []VectorMerge{{Kind: storage.Counters, Item: "c", Vec: same}},
		[]RecordMerge{{Item: "post", User: "alice", Rec: rec.Clone()}}); err != nil {
		t.Fatal(err)
	}
	a.AcceptWrites()
	// After recovery a peer's higher claim is refused, not adopted.
	forged := crdt.Vector{}.Set("A", crdt.PN{P: 1000})
	if err := a.Merge(ctx, []VectorMerge{{Kind: storage.Counters, Item: "c", Vec: forged}}, nil); err != nil {
		t.Fatal(err)
	}
	if a.StateLost() {
		t.Fatal("a replica that lost nothing says it lost state")
	}
	closeA()

	// A wiped store recovering an own entry (a vector).
	dir = t.TempDir()
	a, closeA = openReplica(t, dir, "A", held)
	if err := a.Merge(ctx, []VectorMerge{{Kind: storage.Counters, Item: "c", Vec: same}}, nil); err != nil {
		t.Fatal(err)
	}
	if !a.StateLost() {
		t.Fatal("recovered an own entry, but StateLost is false")
	}
	closeA()
	a, closeA = openReplica(t, dir, "A", nil)
	if !a.StateLost() {
		t.Fatal("StateLost forgotten at restart")
	}
	closeA()

	// A wiped store recovering only a record our repeated like stamped:
	// no own entry moved, but the register names us.
	a, closeA = openReplica(t, t.TempDir(), "A", held)
	repeat := &crdt.LikeRecord{Liked: true, HLC: rec.HLC + 1, Origin: "A", Contrib: crdt.Vector{}.Set("B", crdt.PN{P: 1})}
	if err := a.Merge(ctx, nil, []RecordMerge{{Item: "post", User: "bob", Rec: repeat}}); err != nil {
		t.Fatal(err)
	}
	if !a.StateLost() {
		t.Fatal("recovered an own action, but StateLost is false")
	}
	closeA()
}
