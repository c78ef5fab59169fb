package storage

import (
	"strconv"
	"sync"
	"testing"

	"github.com/tally-dev/tally/crdt"
)

// No false negatives, and few false positives at the intended load.
func TestRecordFilter(t *testing.T) {
	const n = 1 << 16 * 64 / 10       // 10 bits per key in 2^16 words
	f := newRecordFilter(1<<19 + 100) // rounded down to 2^16 words
	if f == nil || f.words() != 1<<16 {
		t.Fatalf("filter of 512 KiB: %d words", f.words())
	}
	for i := range n {
		f.add("item-"+strconv.Itoa(i%97), "user-"+strconv.Itoa(i))
	}
	for i := range n {
		if !f.mayContain("item-"+strconv.Itoa(i%97), "user-"+strconv.Itoa(i)) {
			t.Fatalf("false negative for key %d", i)
		}
	}
	fp := 0
	for i := range n {
		if f.mayContain("item-"+strconv.Itoa(i%97), "other-"+strconv.Itoa(i)) {
			fp++
		}
	}
	t.Logf("false positive rate %.4f at 10 bits per key", float64(fp)/n)
	// About 2% by simulation; the seed is random, the count is large.
	if rate := float64(fp) / n; rate > 0.03 {
		t.Errorf("false positive rate %.4f at 10 bits per key", rate)
	}
	// The pair is the key, not the concatenation.
	g := newRecordFilter(1 << 20)
	g.add("ab", "c")
	if g.mayContain("a", "bc") && g.mayContain("abc", "") {
		t.Error(`("a","bc") and ("abc","") both collide with ("ab","c")`)
	}
	if newRecordFilter(7) != nil || newRecordFilter(-1) != nil {
		t.Error("a filter under one word should be disabled")
	}
}

// A reopened store rebuilds the filter from its keys: every record is
// found again, and a store with the filter off answers the same.
func TestRecordFilterAcrossReopen(t *testing.T) {
	for _, size := range []int64{0, 64, -1} { // default, one word (every probe passes), off
		dir := t.TempDir()
		s := openTest(t, Config{Dir: dir, RecordFilterBytes: size})
		rec := sampleRecord()
		commit(t, s, func(b *Batch) {
			for i := range 2000 {
				b.PutLikeRecord("item-"+strconv.Itoa(i%7), "user-"+strconv.Itoa(i), nil, rec)
			}
		})
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = openTest(t, Config{Dir: dir, RecordFilterBytes: size})
		for i := range 2000 {
			got, ok, err := s.LikeRecord("item-"+strconv.Itoa(i%7), "user-"+strconv.Itoa(i))
			if err != nil || !ok || !got.Equal(rec) {
				t.Fatalf("size %d: record %d after reopen: %+v, %v, %v", size, i, got, ok, err)
			}
		}
		for i := range 2000 {
			if _, ok, err := s.LikeRecord("item-"+strconv.Itoa(i%7), "nobody-"+strconv.Itoa(i)); ok || err != nil {
				t.Fatalf("size %d: a record nobody wrote: %v, %v", size, ok, err)
			}
		}
		// A record written after the reopen is found too.
		commit(t, s, func(b *Batch) { b.PutLikeRecord("late", "user", nil, rec) })
		if _, ok, err := s.LikeRecord("late", "user"); !ok || err != nil {
			t.Fatalf("size %d: late record: %v, %v", size, ok, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// A malformed record key on disk fails the open instead of leaving a key
// out of the filter.
func TestRecordFilterMalformedKey(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, Config{Dir: dir})
	commit(t, s, func(b *Batch) {
		_ = b.b.Set(append(segmentPrefix(3), "r/no-slash"...), crdt.AppendLikeRecord(nil, sampleRecord()), nil)
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(Config{Dir: dir}); err == nil {
		_ = s.Close()
		t.Fatal("opened a store with a malformed record key")
	}
}

// The vector filter: a vector written before a reopen is found after it
// (the filter is rebuilt from the keys), one written after too, and a
// vector nobody wrote, or one of the same name in another kind, reads
// empty; with the filter off the answers are the same.
func TestVectorFilterAcrossReopen(t *testing.T) {
	for _, size := range []int64{0, -1} { // default, off
		dir := t.TempDir()
		s := openTest(t, Config{Dir: dir, VectorFilterBytes: size})
		e := crdt.PN{P: 3, N: 1}
		commit(t, s, func(b *Batch) {
			for i := range 2000 {
				b.PutVectorEntry(Counters, "key-"+strconv.Itoa(i), "r"+strconv.Itoa(i%3), crdt.PN{}, e)
			}
		})
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = openTest(t, Config{Dir: dir, VectorFilterBytes: size})
		for i := range 2000 {
			v, err := s.Vector(Counters, "key-"+strconv.Itoa(i))
			if err != nil || v.Get("r"+strconv.Itoa(i%3)) != e || len(v) != 1 {
				t.Fatalf("size %d: vector %d after reopen: %v, %v", size, i, v, err)
			}
			if v, err := s.Vector(Likes, "key-"+strconv.Itoa(i)); len(v) != 0 || err != nil {
				t.Fatalf("size %d: a likes vector nobody wrote: %v, %v", size, v, err)
			}
			if v, err := s.Vector(Counters, "nokey-"+strconv.Itoa(i)); len(v) != 0 || err != nil {
				t.Fatalf("size %d: a vector nobody wrote: %v, %v", size, v, err)
			}
		}
		commit(t, s, func(b *Batch) { b.PutVectorEntry(Likes, "late", "r0", crdt.PN{}, e) })
		if v, err := s.Vector(Likes, "late"); v.Get("r0") != e || err != nil {
			t.Fatalf("size %d: late vector: %v, %v", size, v, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// A vector key too short to name a vector fails the open instead of
// leaving a vector out of the filter.
func TestVectorFilterMalformedKey(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, Config{Dir: dir})
	commit(t, s, func(b *Batch) {
		_ = b.b.Set(append(segmentPrefix(3), "v/c/no-replica"...), crdt.AppendPN(nil, crdt.PN{P: 1}), nil)
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(Config{Dir: dir}); err == nil {
		_ = s.Close()
		t.Fatal("opened a store with a malformed vector key")
	}
}

// A filter allocates a page the first time a key sets a bit in it: a few
// keys hold a few pages, never more than the size, and what is set is
// found, from any page, while setters race on new pages.
func TestRecordFilterAllocatesPagesAsKeysLand(t *testing.T) {
	f := newRecordFilter(64 << 20)
	if got := f.allocated.Load(); got != 0 {
		t.Fatalf("a new filter allocated %d pages", got)
	}
	if f.bytes() > 200<<10 {
		t.Fatalf("a new filter of 64 MiB holds %d bytes", f.bytes())
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				f.add("item-"+strconv.Itoa(i), "user-"+strconv.Itoa(g))
			}
		}()
	}
	wg.Wait()
	for g := range 4 {
		for i := range 100 {
			if !f.mayContain("item-"+strconv.Itoa(i), "user-"+strconv.Itoa(g)) {
				t.Fatalf("false negative for item-%d, user-%d", i, g)
			}
		}
	}
	if pages := f.allocated.Load(); pages < 300 || pages > 400 {
		t.Fatalf("400 keys allocated %d pages, want about one each (at most 400)", pages)
	}
	if f.bytes() > 2<<20 {
		t.Fatalf("400 keys hold %d bytes of the filter", f.bytes())
	}
	for i := range 200_000 {
		f.add("many-"+strconv.Itoa(i), "u")
	}
	if max := int64(64<<20) + int64(len(f.pages))*8; f.bytes() > max {
		t.Fatalf("the filter holds %d bytes, more than its size %d", f.bytes(), max)
	}
	small := newRecordFilter(64) // eight words: one page, masked
	small.add("a", "b")
	if !small.mayContain("a", "b") || small.words() != 8 {
		t.Fatalf("a filter of eight words: %d words, found %v", small.words(), small.mayContain("a", "b"))
	}
}
