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
	if err := s.Expiring(beforeMs, func(key, idem string, ms int64) bool {
		got = append(got, fmt.Sprintf("%s/%s@%d", key, idem, ms))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// A keyed record lives in its anti-entropy bucket (digest, scans) and in
// the expiry index at its register's time, which moves with the register
// and goes with the record.
func TestKeyedRecordLifecycle(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, Config{Dir: dir})
	defer s.Close()
	r1 := keyedSample(5, 1000)
	commit(t, s, func(b *Batch) {
		b.PutLikeRecord("views", "req-1", nil, r1)
		b.PutLikeRecord("views", "req-2", nil, keyedSample(1, 3000))
		b.PutLikeRecord("clicks", "req-1", nil, keyedSample(2, 2000))
		b.SetMarker("views", "req-1", true, true)
		b.SetMarker("views", "req-1", false, true) // a like record's marker of the same names
	})
	if got, want := expiring(t, s, 2500), []string{"views/req-1@1000", "clicks/req-1@2000"}; !slices.Equal(got, want) {
		t.Fatalf("Expiring(2500) = %v, want %v (oldest first)", got, want)
	}
	var seen []string
	bucket := RecordBucket("views", "req-1")
	if _, err := s.ScanBucket(bucket, nil, 1<<20, BucketVisitor{Record: func(item, user string, r *crdt.LikeRecord) {
		if item == "views" && user == "req-1" {
			seen = append(seen, fmt.Sprint(r.Keyed, r.Amount))
		}
	}}); err != nil || !slices.Equal(seen, []string{"true 5"}) {
		t.Fatalf("ScanBucket saw %v, %v", seen, err)
	}
	d0 := s.Digests()[bucket]

	// A later application wins the register: the index entry moves.
	r2 := r1.Clone()
	r2.Merge(&crdt.LikeRecord{Keyed: true, Liked: true, HLC: crdt.MakeHLC(4000, 0), Origin: "us-1", Amount: 5,
		Contrib: crdt.Vector{{Replica: "us-1", PN: crdt.PN{P: 5}}}})
	commit(t, s, func(b *Batch) { b.PutLikeRecord("views", "req-1", r1, r2) })
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
	if err := s.Markers(func(item, user string, keyed bool) bool {
		markers = append(markers, fmt.Sprint(item, "/", user, " ", keyed))
		return true
	}); err != nil || !slices.Equal(markers, []string{"views/req-1 false"}) {
		t.Fatalf("markers after delete: %v, %v (the like record's marker stays)", markers, err)
	}
	if d := s.Digests()[bucket]; d == d0 {
		t.Fatal("the bucket digest did not change with the delete")
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
	want := &crdt.LikeRecord{Keyed: true, Liked: true, HLC: crdt.MakeHLC(1010, 0), Origin: "us-1", Amount: 0}
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
