package storage

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/shard"
)

// The digests a store keeps up to date commit by commit must equal what a
// full scan computes (which is what a reopened store starts from), and two
// stores with the same replicated state must have equal digests whatever
// order they were written in.
func TestDigestsIncrementalMatchScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	type write struct {
		item, who string
		rec       bool
		pn        crdt.PN
	}
	var writes []write
	for i := range 400 {
		w := write{item: fmt.Sprintf("item%d", rng.IntN(30)), who: fmt.Sprintf("r%d", rng.IntN(5)), rec: rng.IntN(2) == 0}
		w.pn = crdt.PN{P: uint64(i + 1), N: uint64(rng.IntN(i + 1))}
		writes = append(writes, w)
	}
	apply := func(s *Store, order []int) {
		vecs := map[string]crdt.PN{}
		recs := map[string]*crdt.LikeRecord{}
		for _, i := range order {
			w := writes[i]
			b := s.NewBatch()
			k := w.item + "/" + w.who
			if w.rec {
				nr := &crdt.LikeRecord{Liked: true, HLC: crdt.HLC(w.pn.P), Origin: w.who, Contrib: crdt.Vector{}.Set(w.who, crdt.PN{P: 1})}
				if old := recs[k]; old != nil {
					merged := old.Clone()
					merged.Merge(nr)
					nr = merged
				}
				b.PutLikeRecord(w.item, w.who, recs[k], nr)
				recs[k] = nr
			} else {
				nv := vecs[k].Merge(w.pn)
				b.PutVectorEntry(Counters, w.item, w.who, vecs[k], nv)
				vecs[k] = nv
			}
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
			b.Close()
		}
	}
	order := make([]int, len(writes))
	for i := range order {
		order[i] = i
	}
	dir := t.TempDir()
	s1, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	apply(s1, order)
	inc := s1.Digests()
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	s1, err = Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	scanned := s1.Digests()
	nonzero := 0
	for b := range inc {
		if inc[b] != scanned[b] {
			t.Fatalf("segment %d: incremental %x, scanned %x", b, inc[b], scanned[b])
		}
		if inc[b] != 0 {
			nonzero++
		}
	}
	if nonzero == 0 {
		t.Fatal("all digests zero")
	}
	// Max-merged state does not depend on the order of writes.
	s2, err := Open(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	apply(s2, order)
	if s1.Root() != s2.Root() {
		t.Fatalf("same state, different roots: %x vs %x", s1.Root(), s2.Root())
	}
	// Paging a segment with a tiny page size visits each entry exactly once.
	for b := range Segments {
		if inc[b] == 0 {
			continue
		}
		seen := map[string]int{}
		var cursor []byte
		for pages := 0; ; pages++ {
			cursor, err = s1.ScanSegment(b, cursor, 1, SegmentVisitor{
				Vector: func(k Kind, item, replica string, e crdt.PN) { seen["v"+item+replica]++ },
				Record: func(item, user string, r crdt.Record) { seen["r"+item+user]++ },
			})
			if err != nil {
				t.Fatal(err)
			}
			if cursor == nil {
				break
			}
			if pages > 1000 {
				t.Fatal("paging does not end")
			}
		}
		for k, n := range seen {
			if n != 1 {
				t.Fatalf("segment %d: %s visited %d times", b, k, n)
			}
		}
		if len(seen) == 0 {
			t.Fatalf("segment %d has a digest but no entries", b)
		}
	}
}

// The hand-written FNV-1a must stay exactly FNV-1a: every replica segments
// and digests keys with it, old and new versions alike.
func TestFNVMatchesHashFNV(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 2000 {
		item, user := randBytes(r), randBytes(r)
		hv := fnv.New32a()
		hv.Write([]byte(crdt.BaseKey(string(item)))) // a slot hashes its key
		sh := shard.Of(string(item)) * SegmentsPerShard
		if got, want := VectorSegment(string(item)), sh+int(hv.Sum32()>>30)%SegmentsPerShard; got != want {
			t.Fatalf("VectorSegment(%q) = %d, hash/fnv %d", item, got, want)
		}
		h := fnv.New32a()
		h.Write(item)
		h.Write([]byte{'/'})
		h.Write(user)
		if got, want := RecordSegment(string(item), string(user)), sh+int(h.Sum32()%SegmentsPerShard); got != want {
			t.Fatalf("RecordSegment(%q, %q) = %d, hash/fnv %d", item, user, got, want)
		}
		h64 := fnv.New64a()
		h64.Write(item)
		h64.Write([]byte{0})
		h64.Write(user)
		if got, want := entryHash(item, user), mix64(h64.Sum64()); got != want {
			t.Fatalf("entryHash(%q, %q) = %x, hash/fnv %x", item, user, got, want)
		}
	}
}

func randBytes(r *rand.Rand) []byte {
	b := make([]byte, r.IntN(40))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// Digest changes of a batch closed without committing vanish, and the
// pooled accumulator they lived in starts the next batch clean.
func TestDigestsOfAbandonedBatch(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, Config{Dir: dir})
	rec := sampleRecord()
	for round := range 3 {
		b := s.NewBatch()
		for i := range 500 {
			b.PutLikeRecord("gone", fmt.Sprintf("u%d-%d", round, i), nil, rec)
		}
		b.Close() // never committed
		commit(t, s, func(b *Batch) {
			for i := range 500 {
				b.PutLikeRecord("kept", fmt.Sprintf("u%d-%d", round, i), nil, rec)
				b.PutVectorEntry(Likes, "kept", "eu-1", crdt.PN{P: uint64(round*500 + i)}, crdt.PN{P: uint64(round*500 + i + 1)})
			}
		})
	}
	inc := s.Digests()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, Config{Dir: dir})
	defer s.Close()
	if scanned := s.Digests(); !slices.Equal(inc, scanned) {
		t.Fatal("incremental digests differ from a scan after abandoned batches")
	}
}

// RootOfShards folds exactly the segments of its shards: over every shard
// it is Root, a change in a segment of another shard leaves it, and one in
// its own shards moves it.
func TestRootOfShards(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	d := make([]uint64, Segments)
	for i := range d {
		d[i] = rng.Uint64()
	}
	all := shard.All()
	if got, want := RootOfShards(d, &all), rootOf(d); got != want {
		t.Fatalf("over every shard %x, Root %x", got, want)
	}
	var ss shard.Set
	for range 50 {
		ss.Add(rng.IntN(shard.Count))
	}
	var none shard.Set
	if got := RootOfShards(d, &none); got != 0 {
		t.Errorf("over no shard %x, want 0", got)
	}
	before := RootOfShards(d, &ss)
	for range 200 {
		seg := rng.IntN(Segments)
		e := slices.Clone(d)
		e[seg] ^= 1 << rng.IntN(64)
		moved := RootOfShards(e, &ss) != before
		if in := ss.Has(SegmentShard(seg)); moved != in {
			t.Fatalf("segment %d (its shard in the set: %v) changed: root moved %v", seg, in, moved)
		}
	}
}

// A segment's entry hashes (SegmentHashes) fold to its digest, its parts'
// to the same, and a scan that keeps one part's entries visits exactly
// those, however small its pages.
func TestSegmentHashesFoldToDigest(t *testing.T) {
	s, err := Open(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := s.NewBatch()
	for i := range 3000 {
		b.PutVectorEntry(Counters, fmt.Sprintf("item%d", i%500), fmt.Sprintf("r%d", i/500), crdt.PN{}, crdt.PN{P: uint64(i + 1)})
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	digests := s.Digests()
	checked := 0
	for seg := range Segments {
		var fold uint64
		perSub := map[int]int{}
		if err := s.SegmentHashes(seg, func(key []byte, sub int, h uint64) {
			if sub < 0 || sub >= SubSegments {
				t.Fatalf("segment %d: part %d out of range", seg, sub)
			}
			if sub != SubSegmentOf(key) {
				t.Fatalf("segment %d key %q: part %d, SubSegmentOf says %d", seg, key, sub, SubSegmentOf(key))
			}
			fold ^= h
			perSub[sub]++
		}); err != nil {
			t.Fatal(err)
		}
		if fold != digests[seg] {
			t.Fatalf("segment %d: hashes fold to %x, digest %x", seg, fold, digests[seg])
		}
		for sub, n := range perSub {
			if seg%7 != 0 {
				break // a sample is enough for the scans
			}
			visited := 0
			var cursor []byte
			for {
				cursor, err = s.ScanSegment(seg, cursor, 1, SegmentVisitor{
					Vector: func(Kind, string, string, crdt.PN) { visited++ },
					Keep:   func(p int, _ uint64) bool { return p == sub },
				})
				if err != nil {
					t.Fatal(err)
				}
				if cursor == nil {
					break
				}
			}
			if visited != n {
				t.Fatalf("segment %d part %d: scan kept %d entries, %d hashed", seg, sub, visited, n)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no part checked")
	}
	if err := s.SegmentHashes(Segments, func([]byte, int, uint64) {}); err == nil {
		t.Fatal("segment out of range: no error")
	}
}

// EntryWriter names, for every stored key SegmentEntries passes, the
// replica the scan of the same key reports: a vector entry's or a sketch
// page's writer, and nothing for a record; SegmentRecord decodes the
// records the scan reports, and nothing else.
func TestEntryWriterIsTheScannedWriter(t *testing.T) {
	s, err := Open(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := s.NewBatch()
	var page crdt.HLLPage
	page[3] = 7
	for i := range 300 {
		item, writer := fmt.Sprintf("item%d", i%60), fmt.Sprintf("r%d", i/60)
		b.PutVectorEntry(Likes, item, writer, crdt.PN{}, crdt.PN{P: uint64(i + 1)})
		b.PutSketchPage(Uniques, item, writer, i%crdt.HLLPages, nil, &page)
		b.PutLikeRecord(item, fmt.Sprintf("u%d", i), nil, &crdt.LikeRecord{Liked: true, HLC: crdt.HLC(i + 1), Origin: writer, Contrib: crdt.Vector{{Replica: writer, PN: crdt.PN{P: 1}}}})
		b.PutKeyedRecord(item, fmt.Sprintf("k%d", i), nil, &crdt.KeyedRecord{HLC: crdt.HLC(i + 1), Origin: writer, Amount: 3, Contrib: crdt.Vector{{Replica: writer, PN: crdt.PN{P: 3}}}})
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	var vectors, sketches, records int
	for seg := range Segments {
		var hashed []string // writers in key order, "" for no writer
		var decoded []crdt.Record
		if err := s.SegmentEntries(seg, func(key, val []byte, _ int, _ uint64) {
			w, ok := EntryWriter(key)
			if !ok {
				w = nil
			}
			hashed = append(hashed, string(w))
			if rec, ok := SegmentRecord(key, val); ok {
				decoded = append(decoded, rec)
			}
		}); err != nil {
			t.Fatal(err)
		}
		var scanned []string
		var recs []crdt.Record
		if _, err := s.ScanSegment(seg, nil, 1<<30, SegmentVisitor{
			Vector: func(_ Kind, _, replica string, _ crdt.PN) { scanned = append(scanned, replica); vectors++ },
			Sketch: func(_ Kind, _, replica string, _ int, _ *crdt.HLLPage) {
				scanned = append(scanned, replica)
				sketches++
			},
			Record: func(_, _ string, rec crdt.Record) { scanned = append(scanned, ""); recs = append(recs, rec); records++ },
		}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(hashed, scanned) {
			t.Fatalf("segment %d: EntryWriter says %q, the scan %q", seg, hashed, scanned)
		}
		if !reflect.DeepEqual(decoded, recs) {
			t.Fatalf("segment %d: SegmentRecord decoded %v, the scan %v", seg, decoded, recs)
		}
	}
	if vectors != 300 || sketches != 300 || records != 600 {
		t.Fatalf("scanned %d vector entries, %d sketch pages, %d records; want 300, 300 and 600", vectors, sketches, records)
	}
}

// EntryWriter and SegmentRecord never panic, a writer EntryWriter finds
// is a nonempty part of the key, and SegmentRecord decodes only
// replicated keys.
func FuzzEntryWriter(f *testing.F) {
	f.Add([]byte("b0a1/v/l/item1/us-1"))
	f.Add([]byte("b0a1/h/u/item1/us-1/0f"))
	f.Add([]byte("b0a1/r/item1/alice"))
	f.Add([]byte("b0a1/v/l//"))
	f.Fuzz(func(t *testing.T, key []byte) {
		w, ok := EntryWriter(key)
		if ok && (len(w) == 0 || !bytes.Contains(key, w)) {
			t.Fatalf("EntryWriter(%q) = %q", key, w)
		}
		if _, ok := SegmentRecord(key, key[min(len(key), 5):]); ok && !bytes.HasPrefix(key, []byte{prefixSegment}) {
			t.Fatalf("SegmentRecord decoded %q, not a replicated key", key)
		}
	})
}
