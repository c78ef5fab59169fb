package storage

import (
	"testing"

	"github.com/tally-dev/tally/crdt"
)

// A flag is replicated state: it moves its segment's digest, anti-entropy
// pages visit it, and it is read from memory, committed only, also after
// a reopen.
func TestFlagsStoredScannedAndReloaded(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, Config{Dir: dir})
	blocked := crdt.Flag{Value: crdt.Block{Blocked: true}, HLC: crdt.MakeHLC(1_700_000_000_000, 0), Origin: "us-1"}
	before := s.Digests()[FlagSegment("u1")]

	b := s.NewBatch()
	b.PutFlag("u1", crdt.Flag{}, blocked)
	if got := s.Flag("u1"); !got.IsZero() {
		t.Fatalf("flag visible before its commit: %+v", got)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if got := s.Flag("u1"); got != blocked {
		t.Fatalf("Flag(u1) = %+v, want %+v", got, blocked)
	}
	if s.Digests()[FlagSegment("u1")] == before {
		t.Fatal("the flag did not change its segment's digest")
	}
	unblocked := crdt.Flag{HLC: blocked.HLC + 1, Origin: "eu-1"}
	commit(t, s, func(b *Batch) {
		b.PutFlag("u2", crdt.Flag{}, unblocked)
	})

	var seen []string
	for _, u := range []string{"u1", "u2"} {
		if _, err := s.ScanSegment(FlagSegment(u), nil, 1<<20, SegmentVisitor{Flag: func(user string, f crdt.Flag) {
			if user == u && f == s.Flag(u) {
				seen = append(seen, user)
			}
		}}); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != 2 {
		t.Fatalf("segment scans visited %v, want both flags", seen)
	}
	if got, more := s.Flags("", 10, true); len(got) != 1 || got[0].User != "u1" || more {
		t.Fatalf("blocked flags: %+v more=%v", got, more)
	}
	if got, more := s.Flags("", 1, false); len(got) != 1 || got[0].User != "u1" || !more {
		t.Fatalf("first page of all flags: %+v more=%v", got, more)
	}
	if got, more := s.Flags("u1", 10, false); len(got) != 1 || got[0].User != "u2" || more {
		t.Fatalf("flags after u1: %+v more=%v", got, more)
	}
	digests := s.Digests()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openTest(t, Config{Dir: dir})
	defer s.Close()
	if s.Flag("u1") != blocked || s.Flag("u2") != unblocked || s.FlaggedUsers() != 2 {
		t.Fatalf("after reopen: u1 %+v, u2 %+v, %d flagged", s.Flag("u1"), s.Flag("u2"), s.FlaggedUsers())
	}
	if got := s.Digests(); got[FlagSegment("u1")] != digests[FlagSegment("u1")] {
		t.Fatal("the digest computed at open disagrees with the one kept by commits")
	}
}
