package storage

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tally-dev/tally/crdt"
)

func randPage(rng *rand.Rand, n int) *crdt.HLLPage {
	p := new(crdt.HLLPage)
	for range n {
		p[rng.IntN(crdt.HLLPageSize)] = uint8(1 + rng.IntN(crdt.HLLMaxRho))
	}
	return p
}

// Sketch pages round-trip through every reader, digests follow writes
// (equal state, equal digests, whatever the order of writes), a reopened
// store recomputes them, and DeleteSketch leaves the digests as if the
// sketch had never been written.
func TestSketchPagesDigestsAndReaders(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	dir := t.TempDir()
	s := openTest(t, Config{Dir: dir})
	empty := s.Digests()
	bk := crdt.Slot{Key: "video:1", Width: 3600, Start: 1_700_000_000 - 1_700_000_000%3600, Keep: 8 * 86400}
	type w struct {
		k             Kind
		name, replica string
		page          int
		p             *crdt.HLLPage
	}
	var writes []w
	for _, replica := range []string{"eu-1", "us-1"} {
		for _, page := range []int{0, 7, 63} {
			writes = append(writes, w{Uniques, "video:1", replica, page, randPage(rng, 1+rng.IntN(300))})
			writes = append(writes, w{UniquesWindows, bk.Name(), replica, page, randPage(rng, 5)})
		}
	}
	commit(t, s, func(b *Batch) {
		for _, x := range writes {
			b.PutSketchPage(x.k, x.name, x.replica, x.page, nil, x.p)
		}
		b.IndexWindow(UniquesWindows, bk.Name())
	})
	// The same state written in the other order, in two batches, to a
	// second store: the same digests.
	s2 := openTest(t, Config{Dir: t.TempDir()})
	defer s2.Close()
	for i := len(writes) - 1; i >= 0; i-- {
		x := writes[i]
		commit(t, s2, func(b *Batch) { b.PutSketchPage(x.k, x.name, x.replica, x.page, nil, x.p) })
	}
	commit(t, s2, func(b *Batch) { b.IndexWindow(UniquesWindows, bk.Name()) })
	if !slices.Equal(s.Digests(), s2.Digests()) {
		t.Fatal("equal sketches, different digests")
	}

	union := new(crdt.HLL)
	for _, x := range writes {
		if x.k == Uniques {
			union.MergePage(x.page, x.p)
		}
	}
	got := new(crdt.HLL)
	var replicas []string
	if err := s.Sketch(Uniques, "video:1", func(replica string, page int, p *crdt.HLLPage) {
		got.MergePage(page, p)
		if !slices.Contains(replicas, replica) {
			replicas = append(replicas, replica)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if !got.Equal(union) || !slices.Equal(replicas, []string{"eu-1", "us-1"}) {
		t.Fatalf("Sketch read back a different union (replicas %v)", replicas)
	}
	var p crdt.HLLPage
	enc, err := s.SketchPage(Uniques, "video:1", "us-1", 7, &p)
	if err != nil || p != *writes[8].p || !slices.Equal(enc, crdt.AppendHLLPage(nil, &p)) {
		t.Fatalf("SketchPage: %v", err)
	}
	if enc, err := s.SketchPage(Uniques, "video:1", "us-1", 8, &p); err != nil || enc != nil || !p.IsZero() {
		t.Fatalf("absent page: %v %v", enc, err)
	}
	// The series reader finds the slot in its range only.
	n := 0
	if err := s.SketchSeries(UniquesWindows, "video:1", 3600, bk.Start, bk.Start+3600, func(b crdt.Slot, _ string, _ int, _ *crdt.HLLPage) {
		if b != bk {
			t.Fatalf("series slot %v", b)
		}
		n++
	}); err != nil || n != 6 {
		t.Fatalf("series: %d pages, %v; want 6", n, err)
	}
	if err := s.SketchSeries(UniquesWindows, "video:1", 3600, bk.Start+3600, bk.Start+7200, func(crdt.Slot, string, int, *crdt.HLLPage) {
		t.Fatal("series outside the range")
	}); err != nil {
		t.Fatal(err)
	}
	// A segment scan sees every page with its kind.
	pages := 0
	if _, err := s.ScanSegment(VectorSegment("video:1"), nil, 1<<20, SegmentVisitor{Sketch: func(k Kind, name, replica string, page int, p *crdt.HLLPage) {
		pages++
	}}); err != nil || pages != len(writes) {
		t.Fatalf("scan: %d pages, %v", pages, err)
	}

	// Deleting the slot and the all-time sketch restores the digests.
	commit(t, s, func(b *Batch) {
		if err := b.DeleteSketch(UniquesWindows, bk.Name()); err != nil {
			t.Fatal(err)
		}
		if err := b.DeleteSketch(Uniques, "video:1"); err != nil {
			t.Fatal(err)
		}
	})
	if !slices.Equal(s.Digests(), empty) {
		t.Fatal("digests after deleting every sketch differ from an empty store's")
	}
	if refs, _ := s.ExpiredWindows(1<<50, 0); len(refs) != 0 {
		t.Fatalf("expiry index after delete: %v", refs)
	}
	// Writing a zero page deletes it.
	commit(t, s, func(b *Batch) {
		enc := b.PutSketchPage(Uniques, "k", "eu-1", 1, nil, writes[0].p)
		b.PutSketchPage(Uniques, "k", "eu-1", 1, enc, new(crdt.HLLPage))
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, Config{Dir: dir})
	defer s.Close()
	if !slices.Equal(s.Digests(), empty) {
		t.Fatal("a reopened store's digests differ")
	}
}

func TestParseSketchKey(t *testing.T) {
	key := appendSketchPageKey(nil, UniquesWindows, "v#3600.0000000e10.691200", "eu-1", 0x3f)
	k, name, replica, page, ok := parseSketchKey(key[7:])
	if !ok || k != UniquesWindows || name != "v#3600.0000000e10.691200" || replica != "eu-1" || page != 63 {
		t.Fatalf("parse %q: %c %q %q %d %v", key, k, name, replica, page, ok)
	}
	for _, bad := range []string{"", "u/", "u/a/b/4", "u/a/b/40", "u/a/b/zz", "l/a/b/01", "u//b/01", "u/a//01", "u/ab01"} {
		if _, _, _, _, ok := parseSketchKey([]byte(bad)); ok {
			t.Errorf("parsed %q", bad)
		}
	}
}
