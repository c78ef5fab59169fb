package storage

import (
	"fmt"
	"slices"
	"testing"

	"github.com/tally-dev/tally/crdt"
)

func expiring(t *testing.T, s *Store, beforeMs int64) []string {
	t.Helper()
	var got []string
	if err := s.Expiring(beforeMs, func(k Kind, key, idem string, ms int64) bool {
		name := key
		if k == Budgets {
			name = "spend " + key
		}
		got = append(got, fmt.Sprintf("%s/%s@%d", name, idem, ms))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// A keyed record lives in its anti-entropy segment (digest, scans) and in
// the expiry index at its register's time, which moves with the register
// and goes with the record.
func TestKeyedRecordLifecycle(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, Config{Dir: dir})
	defer s.Close()
	r1 := keyedSample(5, 1000)
	commit(t, s, func(b *Batch) {
		b.PutKeyedRecord("views", "req-1", nil, r1)
		b.PutKeyedRecord("views", "req-2", nil, keyedSample(1, 3000))
		b.PutKeyedRecord("clicks", "req-1", nil, keyedSample(2, 2000))
		b.SetMarker(Counters, "views", "req-1", true)
		b.SetMarker(Likes, "views", "req-1", true) // a like record's marker of the same names
	})
	if got, want := expiring(t, s, 2500), []string{"views/req-1@1000", "clicks/req-1@2000"}; !slices.Equal(got, want) {
		t.Fatalf("Expiring(2500) = %v, want %v (oldest first)", got, want)
	}
	var seen []string
	seg := RecordSegment("views", "req-1")
	if _, err := s.ScanSegment(seg, nil, 1<<20, SegmentVisitor{Record: func(item, user string, r crdt.Record) {
		if k, ok := r.(*crdt.KeyedRecord); ok && item == "views" && user == "req-1" {
			seen = append(seen, fmt.Sprint(k.Amount))
		}
	}}); err != nil || !slices.Equal(seen, []string{"5"}) {
		t.Fatalf("ScanSegment saw %v, %v", seen, err)
	}
	d0 := s.Digests()[seg]

	// A later application wins the register: the index entry moves.
	r2 := r1.Clone()
	r2.Merge(&crdt.KeyedRecord{HLC: crdt.MakeHLC(4000, 0), Origin: "us-1", Amount: 5,
		Contrib: crdt.Vector{{Replica: "us-1", PN: crdt.PN{P: 5}}}})
	commit(t, s, func(b *Batch) { b.PutKeyedRecord("views", "req-1", r1, r2) })
	if got, want := expiring(t, s, 5000), []string{"clicks/req-1@2000", "views/req-2@3000", "views/req-1@4000"}; !slices.Equal(got, want) {
		t.Fatalf("after the register moved: %v, want %v", got, want)
	}

	// Deleting takes record, index entry, marker and digest contribution.
	commit(t, s, func(b *Batch) { b.DeleteKeyedRecord("views", "req-1", r2) })
	if _, ok, err := s.KeyedRecord("views", "req-1"); ok || err != nil {
		t.Fatalf("deleted record still read: %v, %v", ok, err)
	}
	if got, want := expiring(t, s, 5000), []string{"clicks/req-1@2000", "views/req-2@3000"}; !slices.Equal(got, want) {
		t.Fatalf("after delete: %v, want %v", got, want)
	}
	var markers []string
	if err := s.Markers(func(k Kind, item, user string) bool {
		markers = append(markers, fmt.Sprint(item, "/", user, " ", k))
		return true
	}); err != nil || !slices.Equal(markers, []string{"views/req-1 likes"}) {
		t.Fatalf("markers after delete: %v, %v (the like record's marker stays)", markers, err)
	}
	if d := s.Digests()[seg]; d == d0 {
		t.Fatal("the segment digest did not change with the delete")
	}
	// Digests recomputed at open agree with the ones kept by commits.
	kept := s.Digests()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openTest(t, Config{Dir: dir})
	defer s2.Close()
	if !slices.Equal(s2.Digests(), kept) {
		t.Fatal("digests recomputed at open differ from the ones commits kept")
	}
	if got := expiring(t, s2, 1<<40); len(got) != 2 {
		t.Fatalf("after reopen: %v", got)
	}
}

// A spend is stored as a keyed record under its budget key's spend name,
// and everything that lists it says it is a spend of that budget: reads,
// segment scans, markers and the expiry index. A counter's keyed record of
// the same names is another record.
func TestSpendLifecycle(t *testing.T) {
	s := openTest(t, Config{Dir: t.TempDir()})
	defer s.Close()
	sp := &crdt.Spend{}
	sp.Apply("eu-1", -3, crdt.MakeHLC(1000, 0))
	commit(t, s, func(b *Batch) {
		b.PutSpend("pool", "req-1", nil, sp)
		b.PutKeyedRecord("pool", "req-1", nil, keyedSample(7, 2000))
		b.SetMarker(Budgets, "pool", "req-1", true)
	})
	if got, ok, err := s.Spend("pool", "req-1"); err != nil || !ok || !got.Equal(sp) {
		t.Fatalf("Spend = %+v, %v, %v; want %+v", got, ok, err, sp)
	}
	if got, ok, err := s.KeyedRecord("pool", "req-1"); err != nil || !ok || got.Amount != 7 {
		t.Fatalf("the counter's keyed record of the same names = %+v, %v, %v", got, ok, err)
	}
	if got, ok, err := s.Spend("other", "req-1"); err != nil || ok || got != nil {
		t.Fatalf("absent spend = %+v, %v, %v", got, ok, err)
	}
	var seen []string
	if _, err := s.ScanSegment(RecordSegment(crdt.SpendName("pool"), "req-1"), nil, 1<<20, SegmentVisitor{Record: func(item, user string, r crdt.Record) {
		seen = append(seen, fmt.Sprintf("%T %s/%s", r, item, user))
	}}); err != nil || !slices.Contains(seen, "*crdt.Spend pool/req-1") {
		t.Fatalf("ScanSegment saw %v, %v", seen, err)
	}
	var markers []string
	if err := s.Markers(func(k Kind, item, user string) bool {
		markers = append(markers, fmt.Sprint(k, " ", item, "/", user))
		return true
	}); err != nil || !slices.Equal(markers, []string{"budgets pool/req-1"}) {
		t.Fatalf("markers: %v, %v", markers, err)
	}
	if got, want := expiring(t, s, 5000), []string{"spend pool/req-1@1000", "pool/req-1@2000"}; !slices.Equal(got, want) {
		t.Fatalf("Expiring = %v, want %v", got, want)
	}
	commit(t, s, func(b *Batch) { b.DeleteSpend("pool", "req-1", sp) })
	if _, ok, err := s.Spend("pool", "req-1"); ok || err != nil {
		t.Fatalf("deleted spend still read: %v, %v", ok, err)
	}
	if got, want := expiring(t, s, 5000), []string{"pool/req-1@2000"}; !slices.Equal(got, want) {
		t.Fatalf("Expiring after delete = %v, want %v", got, want)
	}
	if err := s.Markers(func(k Kind, item, user string) bool {
		t.Errorf("marker %v %s/%s after delete", k, item, user)
		return true
	}); err != nil {
		t.Fatal(err)
	}
}

// Per-replica idempotency keys of earlier versions become keyed records
// applied by this replica, once.
func TestConvertIdempotency(t *testing.T) {
	s := openTest(t, Config{Dir: t.TempDir()})
	defer s.Close()
	commit(t, s, func(b *Batch) {
		for i := range 2500 {
			b.PutIdempotency("views", fmt.Sprintf("r%04d", i), IdemValue{Value: 9, AtMs: int64(1000 + i), By: int64(i%7 - 3), HasBy: true})
		}
		b.PutIdempotency("old", "v1", IdemValue{Value: 1, AtMs: 77}) // version 1: no amount
	})
	n, err := s.ConvertIdempotency("us-1")
	if err != nil || n != 2501 {
		t.Fatalf("ConvertIdempotency = %d, %v; want 2501", n, err)
	}
	r, ok, err := s.KeyedRecord("views", "r0010")
	want := &crdt.KeyedRecord{HLC: crdt.MakeHLC(1010, 0), Origin: "us-1", Amount: 0}
	if err != nil || !ok || !r.Equal(want) {
		t.Fatalf("converted r0010 = %+v, %v, %v; want %+v", r, ok, err, want)
	}
	r, _, _ = s.KeyedRecord("views", "r0012")
	if r.Amount != 2 || r.Contrib.Value() != 2 || r.Excess() != 0 {
		t.Fatalf("converted r0012 = %+v", r)
	}
	if r, ok, _ := s.KeyedRecord("old", "v1"); !ok || r.Amount != 0 || len(r.Contrib) != 0 {
		t.Fatalf("converted v1 key = %+v, %v", r, ok)
	}
	if got := expiring(t, s, 1010); len(got) != 11 || got[0] != "old/v1@77" {
		t.Fatalf("expiry index after conversion: %v", got)
	}
	if n, err := s.ConvertIdempotency("us-1"); n != 0 || err != nil {
		t.Fatalf("second conversion: %d, %v", n, err)
	}
}
