package region

import (
	"context"
	"github.com/tally-dev/tally/internal/base/testkit"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tally-dev/tally/crdt"
)

// A keyed increment retried at another replica that had not heard of the
// first application counts twice for a while, then once everywhere: the
// keyed record's winner takes the extra application back.
func TestKeyedIncrementOnceAcrossReplicas(t *testing.T) {
	a, b, boxA, boxB := pair(t)
	ctx := context.Background()
	if res, err := a.Counters().Incr(ctx, "views", 5, "req-1"); err != nil || res.Value != 5 {
		t.Fatalf("A: %+v, %v", res, err)
	}
	if res, err := b.Counters().Incr(ctx, "views", 5, "req-1"); err != nil || res.Duplicate { // unaware of A's
		t.Fatalf("B: %+v, %v", res, err)
	}
	deliver(t, b, boxB, a) // A sees B's winning application: only B may fix it
	if rd, _ := a.Counters().Get("views"); rd.Value != 10 || rd.Unreconciled != 1 {
		t.Fatalf("A before the fix: %+v, want 10 with one unreconciled key", rd)
	}
	exchange(t, a, b, boxA, boxB)
	for _, r := range []*Replica{a, b} {
		rd, err := r.Counters().Get("views")
		if err != nil || rd.Value != 5 || rd.Unreconciled != 0 {
			t.Fatalf("%s after exchange: %+v, %v", r.ID(), rd, err)
		}
		// A third retry, anywhere, is a duplicate now.
		if res, err := r.Counters().Incr(ctx, "views", 5, "req-1"); err != nil || !res.Duplicate || res.Value != 5 {
			t.Fatalf("%s: retry after exchange: %+v, %v", r.ID(), res, err)
		}
	}
	ra, _, _ := a.store.KeyedRecord("views", "req-1")
	rb, _, _ := b.store.KeyedRecord("views", "req-1")
	if !ra.Equal(rb) || ra.Excess() != 0 {
		t.Fatalf("records differ or keep an excess: %+v vs %+v", ra, rb)
	}
	if rd, _ := a.Counters().Get("views"); rd.Vector.Get("B") != (crdt.PN{P: 5, N: 5}) {
		t.Fatalf("the winner B should have taken its application back: %v", rd.Vector)
	}
	// A retry sent after the key reached the other replica is a duplicate
	// there without any conflict.
	if _, err := a.Counters().Incr(ctx, "views", -3, "req-2"); err != nil {
		t.Fatal(err)
	}
	exchange(t, a, b, boxA, boxB)
	if res, err := b.Counters().Incr(ctx, "views", -3, "req-2"); err != nil || !res.Duplicate || res.Value != 2 {
		t.Fatalf("retry of req-2 at B: %+v, %v", res, err)
	}
}

// A merge never brings back an expired key, and a contribution without
// its register waits for it.
func TestExpiredKeyNotResurrected(t *testing.T) {
	clock := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
	mk := func(id string, box *mailbox) *Replica {
		r, _ := openReplica(t, t.TempDir(), id, func(c *Config) {
			c.Now, c.IdempotencyTTL, c.IdempotencySweep, c.OnCommit = clock.Now, time.Hour, 1000*time.Hour, box.onCommit
		})
		return r
	}
	boxA, boxB := &mailbox{}, &mailbox{}
	a, b := mk("A", boxA), mk("B", boxB)
	ctx := context.Background()
	if _, err := a.Counters().Incr(ctx, "views", 1, "k"); err != nil {
		t.Fatal(err)
	}
	old := boxA.take()
	clock.Advance(2 * time.Hour)
	// A's old record arrives at B after the TTL: B drops it.
	for _, c := range old {
		for _, rc := range c.Records {
			if err := b.Merge(ctx, nil, []RecordMerge{RecordMerge(rc)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, ok, _ := b.store.KeyedRecord("views", "k"); ok {
		t.Fatal("B took an expired key")
	}
	if got := testutil.ToFloat64(b.metrics.refusedExpiry); got != 1 {
		t.Fatalf("expired_key refusals: %v", got)
	}
	// A contribution with no register is not stored alone.
	p := &crdt.KeyedRecord{Contrib: crdt.Vector{{Replica: "A", PN: crdt.PN{P: 1}}}}
	if err := b.Merge(ctx, nil, []RecordMerge{{Item: "views", User: "k2", Rec: p}}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := b.store.KeyedRecord("views", "k2"); ok || testutil.ToFloat64(b.metrics.refusedNoReg) != 1 {
		t.Fatal("B stored a contribution without its register")
	}
	// At A the expired record is gone by rule: the sweep deletes it.
	if n, err := a.Admin().ExpireIdempotency(ctx, clock.Now()); err != nil || n != 1 {
		t.Fatalf("A's sweep: %d, %v", n, err)
	}
}

// cloneRecord is a deep copy of a record of any kind, as a test forwards
// one replica's changes to another.
func cloneRecord(r crdt.Record) crdt.Record {
	switch r := r.(type) {
	case *crdt.LikeRecord:
		return r.Clone()
	case *crdt.KeyedRecord:
		return r.Clone()
	case *crdt.Spend:
		return r.Clone()
	case *crdt.TypeMeta:
		m := *r
		return &m
	}
	panic("cloneRecord: a record of no known kind")
}
