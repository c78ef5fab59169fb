package storage

import (
	"bytes"
	"hash/maphash"
	"math/bits"
	"sync/atomic"
)

// recordFilter is an in-memory Bloom filter over every like-record and
// keyed-record key in the store (one filter: a like record and a keyed
// record of the same two names only share bits): "no" means the store
// certainly holds no record for (item, user), so the lookup that a like,
// or a keyed increment, does before it counts can skip Pebble.
//
// Why: most likes are a user's first like of an item, and that lookup was
// the writer's largest cost (over half of its CPU in a profile of batched
// likes): a memtable skiplist seek plus, for each sstable that may hold the
// key, index and data block reads. Pebble's own bloom filters do not help
// much there: there is none for the memtable, and Get does not consult
// them for L6, where a small store keeps most of its data.
//
// Invariant: every record key in the store is in the filter. It is built
// from the store's keys at open (during the scan that computes the segment
// digests, so it costs no extra I/O) and every Batch that writes a record
// adds the key before it commits. Like records are never deleted; an
// expired keyed record leaves its bits behind, which only costs false
// positives, so the filter never needs to forget. A batch that is dropped without committing only
// leaves extra bits: more false positives, never a false negative.
//
// Its size is fixed when the store opens, so memory never grows past
// it however many records arrive. Its words are allocated a page at a
// time, the first time a key sets a bit in that page, so a store of few
// keys holds few pages of it: a replica of a small deployment (and each
// of the test suite's thousands of stores) does not pay the whole size
// up front, zeroing and faulting in 80 MiB per store. A lookup reads one
// pointer more than a flat array (the page table, 128 KiB at the default
// size, stays in cache); a page nobody wrote reads as zeros, which is
// what it would hold. Each key sets 4 bits inside one 64-bit word (a
// blocked filter: one memory access per lookup). At 10 bits of filter per
// record about 2% of lookups of absent keys are false positives, which pay
// the Pebble read they would have paid anyway; as records outgrow the
// filter the rate climbs smoothly (11% at 5 bits per record, 40% at 2.5)
// and the filter saves less and less, but it never gives a wrong answer.
// (4 bits per key: 5 or 6 do slightly better at 10 bits per record and
// worse beyond, and a fixed-size filter must degrade well.)
//
// The words are atomic because readers (Store.LikeRecord from any
// goroutine) test bits while the writer's batches set them; a page is
// published with a compare-and-swap, so two setters of a new page agree
// on one.
type recordFilter struct {
	seed  maphash.Seed
	pages []atomic.Pointer[filterPage]
	mask  uint64 // words - 1
	// allocated counts the pages allocated (MemoryUse).
	allocated atomic.Int64
}

// filterPageWords is how many words a page of a filter holds: 4 KiB.
const filterPageWords = 512

// filterPage is one page of a filter's words.
type filterPage [filterPageWords]atomic.Uint64

// set ORs bits into word w, allocating its page if nobody has yet.
func (f *recordFilter) set(w, bits uint64) {
	slot := &f.pages[w/filterPageWords]
	p := slot.Load()
	if p == nil {
		if slot.CompareAndSwap(nil, new(filterPage)) {
			f.allocated.Add(1)
		}
		p = slot.Load()
	}
	p[w%filterPageWords].Or(bits)
}

// has reports whether word w holds every one of bits (a page never
// allocated holds none).
func (f *recordFilter) has(w, bits uint64) bool {
	p := f.pages[w/filterPageWords].Load()
	return p != nil && p[w%filterPageWords].Load()&bits == bits
}

// words is the filter's size in words; bytes what of it is allocated.
func (f *recordFilter) words() uint64 { return f.mask + 1 }
func (f *recordFilter) bytes() int64 {
	return f.allocated.Load()*filterPageWords*8 + int64(len(f.pages))*8
}

// recordFilterBits is how many bits each key sets in its word.
const recordFilterBits = 4

// newRecordFilter returns a filter of at most size bytes (a power of two
// words), or nil if size is too small to be useful.
func newRecordFilter(size int64) *recordFilter {
	if size < 8 {
		return nil
	}
	n := uint64(1) << (bits.Len64(uint64(size/8)) - 1)
	return &recordFilter{seed: maphash.MakeSeed(), pages: make([]atomic.Pointer[filterPage], (n+filterPageWords-1)/filterPageWords), mask: n - 1}
}

// hash combines the two ids' hashes; ids never contain '/', so hashing them
// apart is as good as hashing the key.
func (f *recordFilter) hash(item, user uint64) (word uint64, set uint64) {
	h := mix64(item ^ bits.RotateLeft64(user, 31) ^ 0x9e3779b97f4a7c15)
	g := mix64(h + 0x632be59bd9b4e019)
	for i := range recordFilterBits {
		set |= 1 << (g >> (6 * i) & 63)
	}
	return h & f.mask, set
}

func (f *recordFilter) add(item, user string) {
	w, set := f.hash(maphash.String(f.seed, item), maphash.String(f.seed, user))
	f.set(w, set)
}

// mayContain reports whether (item, user) may have a record; false is
// certain.
func (f *recordFilter) mayContain(item, user string) bool {
	w, set := f.hash(maphash.String(f.seed, item), maphash.String(f.seed, user))
	return f.has(w, set)
}

// addKey adds a stored record key: the part after "b<B>/r/", which is
// "<item>/<user>". It reports whether rest had that shape.
func (f *recordFilter) addKey(rest []byte) bool {
	item, user, ok := bytes.Cut(rest, []byte{'/'})
	if !ok {
		return false
	}
	w, set := f.hash(maphash.Bytes(f.seed, item), maphash.Bytes(f.seed, user))
	f.set(w, set)
	return true
}

// The vector filter is a second filter of the same kind over every
// vector's (kind, name) in the store: "no" means the store holds no entry
// of that vector, so the writer's first touch of a vector that does not
// exist yet (a like's new one-second and one-minute slots, a first like of
// an item) skips the Pebble read, which is a seek through the memtables
// and every level. It keeps its own bits, so the churn of short-lived
// slots does not raise the record filter's false positives.
//
// Invariant: every vector with an entry in the store is in the filter. It
// is built in the same scan at open, and Batch.PutVectorEntry adds the
// vector before the commit makes the entry visible. Deleted vectors (an
// expired slot, a dropped shard) leave their bits: false positives only.

// vectorKindHash stands for the second name of a vector's key: its kind.
func vectorKindHash(k Kind) uint64 { return mix64(uint64(k) + 0x5851f42d4c957f2d) }

func (f *recordFilter) addVector(k Kind, name string) {
	w, set := f.hash(maphash.String(f.seed, name), vectorKindHash(k))
	f.set(w, set)
}

// mayContainVector reports whether vector (k, name) may have an entry in
// the store; false is certain.
func (f *recordFilter) mayContainVector(k Kind, name string) bool {
	w, set := f.hash(maphash.String(f.seed, name), vectorKindHash(k))
	return f.has(w, set)
}

// addVectorKey adds a stored vector entry's key: the part after
// "b<B>/v/", which is "<kind>/<name>/<replica>". It reports whether rest
// had that shape.
func (f *recordFilter) addVectorKey(rest []byte) bool {
	if len(rest) < 3 || rest[1] != '/' {
		return false
	}
	name, _, ok := bytes.Cut(rest[2:], []byte{'/'})
	if !ok {
		return false
	}
	w, set := f.hash(maphash.Bytes(f.seed, name), vectorKindHash(Kind(rest[0])))
	f.set(w, set)
	return true
}
