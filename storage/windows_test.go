package storage

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/shard"
)

// storedSlot is a slot the test wrote, with its vector.
type storedSlot struct {
	kind Kind
	b    crdt.Slot
	vec  crdt.Vector
}

// putSlot writes every entry of a new slot and lists it in the
// expiry index, as the replica's writer does when it first stores one.
func putSlot(b *Batch, k Kind, bk crdt.Slot, v crdt.Vector) {
	name := bk.Name()
	for _, e := range v {
		b.PutVectorEntry(k, name, e.Replica, crdt.PN{}, e.PN)
	}
	b.IndexWindow(k, name)
}

type seriesPoint struct {
	b   crdt.Slot
	vec crdt.Vector
}

func readSeries(t *testing.T, s *Store, k Kind, key string, width, from, to int64) []seriesPoint {
	t.Helper()
	var got []seriesPoint
	err := s.WindowSeries(k, key, width, from, to, func(b crdt.Slot, v crdt.Vector) {
		got = append(got, seriesPoint{b, v.Clone()})
	})
	if err != nil {
		t.Fatalf("WindowSeries(%s, %q, %d, %d, %d): %v", k, key, width, from, to, err)
	}
	return got
}

// seriesModel is what WindowSeries must return: the slots of (k, key,
// width) starting in [from, to), by start, then by name (one start, two
// keeps are two vectors).
func seriesModel(all []storedSlot, k Kind, key string, width, from, to int64) []seriesPoint {
	var want []seriesPoint
	for _, sb := range all {
		if sb.kind == k && sb.b.Key == key && sb.b.Width == width && sb.b.Start >= from && sb.b.Start < to {
			want = append(want, seriesPoint{sb.b, sb.vec})
		}
	}
	slices.SortFunc(want, func(x, y seriesPoint) int {
		return cmp.Or(cmp.Compare(x.b.Start, y.b.Start), cmp.Compare(x.b.Name()+"/", y.b.Name()+"/"))
	})
	return want
}

func sameSeries(got, want []seriesPoint) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d slots, want %d:\n got %v\nwant %v", len(got), len(want), got, want)
	}
	for i := range got {
		if got[i].b != want[i].b || !got[i].vec.Equal(want[i].vec) {
			return fmt.Errorf("slot %d = %+v %v, want %+v %v", i, got[i].b, got[i].vec, want[i].b, want[i].vec)
		}
	}
	return nil
}

func randSlotVector(rng *rand.Rand) crdt.Vector {
	var v crdt.Vector
	for _, r := range []string{"eu-1", "us-1", "us-2"} {
		if rng.IntN(2) == 0 || len(v) == 0 && r == "us-2" {
			v = v.Set(r, crdt.PN{P: uint64(1 + rng.IntN(50)), N: uint64(rng.IntN(5))})
		}
	}
	return v
}

// WindowSeries returns exactly the slots of one (kind, key, width) in
// [from, to), in start order: not those of a key that is a prefix of
// another ("a" and "a:b", "a" and "a.b"), nor of a width whose digits
// are a prefix of another's (6 and 60), nor of the other kind, nor the
// all-time vector.
func TestWindowSeries(t *testing.T) {
	s := openTest(t, Config{Dir: t.TempDir()})
	defer s.Close()
	rng := rand.New(rand.NewPCG(80, 81))
	const base = 1_700_000_000 / 3600 * 3600
	keys := []string{"a", "a:b", "a.b", "ab", "", "b"}
	widths := []int64{1, 6, 60, 600, 3600}
	var all []storedSlot
	seen := map[string]bool{}
	commit(t, s, func(b *Batch) {
		for range 1500 {
			k := []Kind{CountersWindows, CountersWindows, CountersWindows, LikesWindows}[rng.IntN(4)]
			w := widths[rng.IntN(len(widths))]
			bk := crdt.Slot{
				Key:   keys[rng.IntN(len(keys))],
				Width: w,
				Start: base + int64(rng.IntN(40))*w,
				Keep:  []int64{0, 600, 3600}[rng.IntN(3)],
			}
			if seen[string(k)+bk.Name()] {
				continue
			}
			seen[string(k)+bk.Name()] = true
			v := randSlotVector(rng)
			putSlot(b, k, bk, v)
			all = append(all, storedSlot{k, bk, v})
		}
		// All-time vectors of the same keys, which a series never reads.
		b.PutVectorEntry(Counters, "a", "eu-1", crdt.PN{}, crdt.PN{P: 1000})
		b.PutVectorEntry(Likes, "a", "eu-1", crdt.PN{}, crdt.PN{P: 1000})
	})

	for _, k := range []Kind{CountersWindows, LikesWindows} {
		for _, key := range keys {
			for _, w := range widths {
				ranges := [][2]int64{
					{0, 1<<40 - 1},
					{base, base + 40*w},
					{base + 5*w, base + 17*w},
					{base + 5*w + 1, base + 17*w - 1}, // unaligned: starts in range
					{base + 3*w, base + 3*w + 1},
					{base + 7*w, base + 7*w}, // empty
					{base + 9*w, base + 2*w}, // reversed
				}
				for range 5 {
					from := base + int64(rng.IntN(45))*w - w
					ranges = append(ranges, [2]int64{from, from + int64(rng.IntN(45))*w})
				}
				for _, r := range ranges {
					got := readSeries(t, s, k, key, w, r[0], r[1])
					if err := sameSeries(got, seriesModel(all, k, key, w, r[0], r[1])); err != nil {
						t.Fatalf("WindowSeries(%s, %q, width %d, [%d, %d)): %v", k, key, w, r[0]-base, r[1]-base, err)
					}
				}
			}
		}
	}
	// A key's slots share its all-time vector's anti-entropy segment.
	for _, sb := range all {
		if VectorSegment(sb.b.Name()) != VectorSegment(sb.b.Key) {
			t.Fatalf("%q in anti-entropy segment %d, its key %q in %d", sb.b.Name(), VectorSegment(sb.b.Name()), sb.b.Key, VectorSegment(sb.b.Key))
		}
	}
	found := 0
	if _, err := s.ScanSegment(VectorSegment("a:b"), nil, 1<<30, SegmentVisitor{Vector: func(k Kind, item, replica string, e crdt.PN) {
		if bk, ok := crdt.ParseSlot(item); ok && bk.Key == "a:b" && k.IsWindows() {
			found++
		}
	}}); err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, sb := range all {
		if sb.b.Key == "a:b" {
			want += len(sb.vec)
		}
	}
	if found != want {
		t.Fatalf("anti-entropy segment of a:b holds %d of its slot entries, want %d", found, want)
	}
}

func TestExpiredWindows(t *testing.T) {
	s := openTest(t, Config{Dir: t.TempDir()})
	defer s.Close()
	rng := rand.New(rand.NewPCG(82, 83))
	var all []storedSlot
	commit(t, s, func(b *Batch) {
		for i := range 300 {
			k := []Kind{CountersWindows, LikesWindows}[rng.IntN(2)]
			w := []int64{1, 60, 3600}[rng.IntN(3)]
			bk := crdt.Slot{Key: fmt.Sprintf("k%d", i), Width: w, Start: 1_700_000_000 / w * w, Keep: []int64{0, 60, 600, 3600}[rng.IntN(4)]}
			bk.Start -= int64(rng.IntN(100)) * w
			v := randSlotVector(rng)
			putSlot(b, k, bk, v)
			all = append(all, storedSlot{k, bk, v})
		}
		// Not slots: never indexed.
		b.IndexWindow(CountersWindows, "plain")
		b.IndexWindow(CountersWindows, "a#60.000000001e.600")
	})
	due := func(nowMs int64) []WindowRef {
		var out []storedSlot
		for _, sb := range all {
			if sb.b.Expired(nowMs) {
				out = append(out, sb)
			}
		}
		slices.SortFunc(out, func(x, y storedSlot) int {
			return cmp.Or(cmp.Compare(x.b.ExpiresMs(), y.b.ExpiresMs()), cmp.Compare(x.kind, y.kind), cmp.Compare(x.b.Name(), y.b.Name()))
		})
		refs := []WindowRef{}
		for _, sb := range out {
			refs = append(refs, WindowRef{sb.kind, sb.b.Name()})
		}
		return refs
	}
	var times []int64
	for _, sb := range all {
		if e := sb.b.ExpiresMs(); e != 0 {
			times = append(times, e-1, e, e+1)
		}
	}
	times = append(times, 0, 1<<50)
	slices.Sort(times)
	for _, now := range times {
		want := due(now)
		got, err := s.ExpiredWindows(now, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got == nil {
			got = []WindowRef{}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("ExpiredWindows(%d) = %v,\nwant %v", now, got, want)
		}
		if len(want) > 3 {
			if got, err := s.ExpiredWindows(now, 3); err != nil || !slices.Equal(got, want[:3]) {
				t.Fatalf("ExpiredWindows(%d, 3) = %v, %v; want %v", now, got, err, want[:3])
			}
		}
	}
	// WindowsExpiringIn: [from, to) and the filter.
	from, to := times[len(times)/3], times[2*len(times)/3]
	got, err := s.WindowsExpiringIn(from, to, func(r WindowRef) bool { return r.Kind == LikesWindows })
	if err != nil {
		t.Fatal(err)
	}
	var want []WindowRef
	for _, r := range due(to - 1) {
		if bk, _ := crdt.ParseSlot(r.Name); bk.ExpiresMs() >= from && r.Kind == LikesWindows {
			want = append(want, r)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("WindowsExpiringIn(%d, %d) = %v, want %v", from, to, got, want)
	}
}

// Deleting a slot removes its entries and its index entry, and its
// digest goes back to what it was before the slot was written: the
// store is as if it never had it.
func TestDeleteVectorRestoresDigest(t *testing.T) {
	s := openTest(t, Config{Dir: t.TempDir()})
	defer s.Close()
	keep := crdt.Slot{Key: "post:1", Width: 60, Start: 1_699_999_980, Keep: 600}
	commit(t, s, func(b *Batch) {
		b.PutVectorEntry(Counters, "post:1", "eu-1", crdt.PN{}, crdt.PN{P: 3})
		putSlot(b, CountersWindows, keep, crdt.Vector{{Replica: "eu-1", PN: crdt.PN{P: 3}}})
	})
	before, rootBefore := s.Digests(), s.Root()

	gone := crdt.Slot{Key: "post:1", Width: 60, Start: 1_700_000_040, Keep: 600}
	v := crdt.Vector{{Replica: "eu-1", PN: crdt.PN{P: 2, N: 1}}, {Replica: "us-1", PN: crdt.PN{P: 5}}}
	commit(t, s, func(b *Batch) { putSlot(b, CountersWindows, gone, v) })
	if slices.Equal(s.Digests(), before) {
		t.Fatal("writing a slot left the digests unchanged")
	}
	wantVector(t, s, CountersWindows, gone.Name(), v)
	if refs, _ := s.ExpiredWindows(gone.ExpiresMs(), 0); !slices.Contains(refs, WindowRef{CountersWindows, gone.Name()}) {
		t.Fatalf("slot not in the expiry index: %v", refs)
	}

	commit(t, s, func(b *Batch) { b.DeleteVector(CountersWindows, gone.Name(), v) })
	if got := s.Digests(); !slices.Equal(got, before) || s.Root() != rootBefore {
		t.Fatal("digests after deleting the slot differ from before it was written")
	}
	wantVector(t, s, CountersWindows, gone.Name(), nil)
	refs, err := s.ExpiredWindows(1<<50, 0)
	if err != nil || !slices.Equal(refs, []WindowRef{{CountersWindows, keep.Name()}}) {
		t.Fatalf("expiry index after delete: %v, %v; want only %q", refs, err, keep.Name())
	}
	if got := readSeries(t, s, CountersWindows, "post:1", 60, 0, 1<<40-1); len(got) != 1 || got[0].b != keep {
		t.Fatalf("series after delete: %v", got)
	}
	// The other slot and the all-time vector are untouched.
	wantVector(t, s, CountersWindows, keep.Name(), crdt.Vector{{Replica: "eu-1", PN: crdt.PN{P: 3}}})
	wantVector(t, s, Counters, "post:1", crdt.Vector{{Replica: "eu-1", PN: crdt.PN{P: 3}}})

	// A reopened store computes the same digests from a scan.
	dir := t.TempDir()
	s2 := openTest(t, Config{Dir: dir})
	commit(t, s2, func(b *Batch) {
		b.PutVectorEntry(Counters, "post:1", "eu-1", crdt.PN{}, crdt.PN{P: 3})
		putSlot(b, CountersWindows, keep, crdt.Vector{{Replica: "eu-1", PN: crdt.PN{P: 3}}})
		putSlot(b, CountersWindows, gone, v)
	})
	commit(t, s2, func(b *Batch) { b.DeleteVector(CountersWindows, gone.Name(), v) })
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	s2 = openTest(t, Config{Dir: dir})
	defer s2.Close()
	if !slices.Equal(s2.Digests(), before) {
		t.Fatal("a reopened store's digests differ from a store that never had the slot")
	}
}

// ScanVectors visits every all-time vector of one kind, whole, and none of
// the slots; it stops when fn says so.
func TestScanVectors(t *testing.T) {
	s := openTest(t, Config{Dir: t.TempDir()})
	defer s.Close()
	rng := rand.New(rand.NewPCG(84, 85))
	want := map[string]crdt.Vector{}
	commit(t, s, func(b *Batch) {
		for i := range 200 {
			item := fmt.Sprintf("item:%d", i)
			v := randSlotVector(rng)
			for _, e := range v {
				b.PutVectorEntry(Likes, item, e.Replica, crdt.PN{}, e.PN)
			}
			want[item] = v
			b.PutVectorEntry(Counters, item, "eu-1", crdt.PN{}, crdt.PN{P: 9})
			putSlot(b, LikesWindows, crdt.Slot{Key: item, Width: 60, Start: 1_699_999_980, Keep: 600}, v)
		}
	})
	got := map[string]crdt.Vector{}
	if err := s.ScanVectors(Likes, func(item string, v crdt.Vector) bool {
		if _, dup := got[item]; dup {
			t.Errorf("%q visited twice", item)
		}
		got[item] = v.Clone()
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("ScanVectors visited %d vectors, want %d", len(got), len(want))
	}
	for item, v := range want {
		if !got[item].Equal(v) {
			t.Fatalf("ScanVectors %q = %v, want %v", item, got[item], v)
		}
	}
	n := 0
	if err := s.ScanVectors(Likes, func(string, crdt.Vector) bool { n++; return n < 7 }); err != nil || n != 7 {
		t.Fatalf("ScanVectors after fn returned false: %d calls, %v; want 7", n, err)
	}
}

// ScanVectorsFrom pages through what ScanVectors visits: every vector
// once, whatever the page sizes, resuming after the last item taken.
func TestScanVectorsFromPages(t *testing.T) {
	s := openTest(t, Config{Dir: t.TempDir()})
	defer s.Close()
	want := map[string]bool{}
	commit(t, s, func(b *Batch) {
		for i := range 300 {
			item := fmt.Sprintf("c-%d", i)
			b.PutVectorEntry(Counters, item, "eu-1", crdt.PN{}, crdt.PN{P: 1})
			b.PutVectorEntry(Counters, item, "us-1", crdt.PN{}, crdt.PN{P: 2})
			want[item] = true
		}
		b.PutVectorEntry(Likes, "not-a-counter", "eu-1", crdt.PN{}, crdt.PN{P: 1})
	})
	rng := rand.New(rand.NewPCG(1, 2))
	got := map[string]bool{}
	seg, after, pages := 0, "", 0
	for seg < Segments {
		take := 1 + rng.IntN(7)
		var err error
		seg, after, err = s.ScanVectorsFrom(Counters, seg, after, 1+rng.IntN(300), func(item string, v crdt.Vector) bool {
			if got[item] {
				t.Errorf("%q visited twice", item)
			}
			if v.Value() != 3 {
				t.Errorf("%q: value %d, want 3 (both entries)", item, v.Value())
			}
			got[item] = true
			take--
			return take > 0
		})
		if err != nil {
			t.Fatal(err)
		}
		pages++
	}
	if len(got) != len(want) {
		t.Fatalf("%d pages visited %d vectors, want %d", pages, len(got), len(want))
	}
}

// ScanVectorsOf visits exactly the vectors ScanVectors does whose shard
// is in the set, each once and whole.
func TestScanVectorsOfVisitsTheShardsGiven(t *testing.T) {
	s := openTest(t, Config{Dir: t.TempDir()})
	defer s.Close()
	commit(t, s, func(b *Batch) {
		for i := range 400 {
			item := fmt.Sprintf("l-%d", i)
			b.PutVectorEntry(Likes, item, "eu-1", crdt.PN{}, crdt.PN{P: 1})
			b.PutVectorEntry(Likes, item, "us-1", crdt.PN{}, crdt.PN{P: 2})
			b.PutVectorEntry(Counters, item, "eu-1", crdt.PN{}, crdt.PN{P: 1})
		}
	})
	for _, mod := range []int{1, 2, 3, 1024} {
		in := func(sh int) bool { return sh%mod == 0 }
		want := map[string]bool{}
		if err := s.ScanVectors(Likes, func(item string, _ crdt.Vector) bool {
			if in(shard.Of(item)) {
				want[item] = true
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		if err := s.ScanVectorsOf(Likes, in, func(item string, v crdt.Vector) bool {
			if got[item] || v.Value() != 3 {
				t.Errorf("shards %% %d: %q twice or not whole (%d)", mod, item, v.Value())
			}
			got[item] = true
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, want) {
			t.Fatalf("shards %% %d: ScanVectorsOf visited %d items, want the %d of ScanVectors in those shards", mod, len(got), len(want))
		}
		if mod == 1 && len(got) != 400 {
			t.Fatalf("every shard: %d items, want 400", len(got))
		}
	}
}
