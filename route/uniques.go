package route

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/shard"
)

// A unique count as GET /v1/uniques/{key} and GET /v1/uniques?keys= read
// it (OpUniqueRead): all time or over a range of slots, with each
// region's estimate or each replica's sketch if asked. It is answered in
// an encoding of its own, Uniques, rather than as a Result: the holder's
// estimate, the replicas and regions whose sketches it found, the slots
// it read and its staleness, which no Result field carries. A request
// holding an OpUniqueRead holds nothing else, so its answer's Body is one
// Uniques.

// UniqueQuery is a unique-count read as the entry replica parsed it.
type UniqueQuery struct {
	// Keys are the unique counters whose union is counted: 1 to
	// region.MaxUniqueKeys, sorted, no key twice.
	Keys []string
	// Windowed: the slots starting in [FromMs, ToMs) (unix ms), widened
	// to whole slots of the finest level that covers the range
	// (region.Uniques.Window); else all time.
	Windowed     bool
	FromMs, ToMs int64
	// ByRegion asks each region's estimate (Uniques.ByRegion); Sketches
	// each replica's sketch (Uniques.Sketches), for a union the entry
	// replica merges from several shards' holders.
	ByRegion, Sketches bool
}

// The words of an OpUniqueRead's User, its options, in this order,
// joined by ",".
const (
	optWindow   = "window"
	optByRegion = "region"
	optSketches = "sketches"
)

// UniqueReadOp is the OpUniqueRead of q: its keys as List, its range as
// AtMs (from) and By (to), its options as User.
func UniqueReadOp(q UniqueQuery) Op {
	var opts []string
	for _, o := range [...]struct {
		on   bool
		word string
	}{{q.Windowed, optWindow}, {q.ByRegion, optByRegion}, {q.Sketches, optSketches}} {
		if o.on {
			opts = append(opts, o.word)
		}
	}
	o := Op{Kind: OpUniqueRead, List: q.Keys, User: strings.Join(opts, ",")}
	if q.Windowed {
		o.AtMs, o.By = q.FromMs, q.ToMs
	}
	return o
}

// uniqueQuery reads and checks o, an OpUniqueRead, every one of whose
// keys must be on shard sh (-1: any).
func uniqueQuery(o *Op, sh int) (UniqueQuery, error) {
	q := UniqueQuery{Keys: o.List, FromMs: o.AtMs, ToMs: o.By}
	if len(q.Keys) == 0 || len(q.Keys) > region.MaxUniqueKeys {
		return UniqueQuery{}, fmt.Errorf("%w: a unique count of %d keys, want 1 to %d", region.ErrInvalid, len(q.Keys), region.MaxUniqueKeys)
	}
	for _, k := range q.Keys {
		if sh >= 0 && shard.Of(k) != sh {
			return UniqueQuery{}, fmt.Errorf("%w: key %q is not on shard %d", region.ErrInvalid, k, sh)
		}
	}
	if o.User != "" {
		rest := o.User
		for _, o := range [...]struct {
			on   *bool
			word string
		}{{&q.Windowed, optWindow}, {&q.ByRegion, optByRegion}, {&q.Sketches, optSketches}} {
			if r, ok := strings.CutPrefix(rest, o.word); ok && (r == "" || r[0] == ',') {
				*o.on, rest = true, strings.TrimPrefix(r, ",")
			}
		}
		if rest != "" || strings.HasSuffix(o.User, ",") {
			return UniqueQuery{}, fmt.Errorf("%w: unique-count options %q", region.ErrInvalid, o.User)
		}
	}
	if !q.Windowed && (q.FromMs != 0 || q.ToMs != 0) {
		return UniqueQuery{}, fmt.Errorf("%w: a range without the window option", region.ErrInvalid)
	}
	return q, nil
}

// Uniques is a unique-count read's answer: what a front door renders,
// read at a holder or at the entry replica itself (CountUniques), or
// why it was not read (Code and Msg, as a Result's).
type Uniques struct {
	Code, Msg string
	// Estimate is the distinct ids of the union, unrounded
	// (region.UniqueRead.Estimate).
	Estimate float64
	// Replicas are the replicas whose sketches the read found, sorted,
	// and Regions each one's region as the reader knew it ("unknown" if
	// it did not).
	Replicas, Regions []string
	// ByRegion is each region's own estimate, rounded: the union of its
	// replicas' sketches (asked ByRegion; else nil).
	ByRegion map[string]int64
	// Sketches are each replica's sketch of the keys, in Replicas' order
	// (asked Sketches; else nil).
	Sketches []*crdt.HLL
	// Stale: a peer holding a key's shard is unheard-from past its
	// timeout, at the reader.
	Stale bool
	// Windowed: a read over slots, the union of those of width SlotWidth
	// starting in [From, To), which ended long enough ago that no add can
	// still be booked into them if Closed (region.UniqueRead).
	Windowed  bool
	From, To  time.Time
	SlotWidth time.Duration
	Closed    bool
}

// CountUniques is the answer to q from rd, a read of q's keys, with
// regionOf naming the replicas' regions and stale the reader's word on
// its peers: what a holder answers, and what an entry replica holding
// the keys answers itself.
func CountUniques(rd region.UniqueRead, q UniqueQuery, regionOf map[string]string, stale bool) Uniques {
	u := Uniques{Estimate: rd.Estimate, Stale: stale, Windowed: q.Windowed}
	if q.Windowed {
		u.From, u.To, u.SlotWidth, u.Closed = rd.From, rd.To, rd.SlotWidth, rd.Closed
	}
	u.Replicas = slices.Sorted(func(yield func(string) bool) {
		for id := range rd.ByReplica {
			if !yield(id) {
				return
			}
		}
	})
	if q.ByRegion {
		u.ByRegion = map[string]int64{}
	}
	perRegion := map[string]*crdt.HLL{}
	for _, id := range u.Replicas {
		name, ok := regionOf[id]
		if !ok {
			name = "unknown"
		}
		u.Regions = append(u.Regions, name)
		if q.Sketches {
			u.Sketches = append(u.Sketches, rd.ByReplica[id])
		}
		if q.ByRegion {
			if perRegion[name] == nil {
				perRegion[name] = new(crdt.HLL)
			}
			perRegion[name].Merge(rd.ByReplica[id])
		}
	}
	for name, h := range perRegion {
		u.ByRegion[name] = int64(math.Round(h.Estimate()))
	}
	return u
}

// ReadUniques reads q, checked against shard sh (-1: any), from src's
// replica: its keys' sketches all time or over q's slots, with src's
// staleness for its keys and regionOf naming the replicas' regions.
func ReadUniques(src Source, o *Op, sh int, regionOf map[string]string) (Uniques, error) {
	q, err := uniqueQuery(o, sh)
	if err != nil {
		return Uniques{}, err
	}
	var rd region.UniqueRead
	if q.Windowed {
		rd, err = src.Replica.Uniques().Window(q.Keys, q.FromMs, q.ToMs)
	} else {
		rd, err = src.Replica.Uniques().Read(q.Keys)
	}
	if err != nil {
		return Uniques{}, err
	}
	stale := false
	if src.Staleness != nil {
		stale = slices.ContainsFunc(q.Keys, src.Staleness.StaleFor)
	}
	return CountUniques(rd, q, regionOf, stale), nil
}

// Flags of an encoded Uniques.
const (
	uniquesStale = 1 << iota
	uniquesWindowed
	uniquesClosed
	uniquesByRegion
	uniquesSketches
	numUniquesFlags = iota
)

// MarshalUniques encodes u, the Body of an OpUniqueRead's answer.
func MarshalUniques(u *Uniques) []byte {
	n := 48 + len(u.Code) + len(u.Msg)
	for i := range u.Replicas {
		n += len(u.Replicas[i]) + 4
	}
	for _, r := range u.Regions {
		n += len(r) + 2
	}
	for r := range u.ByRegion {
		n += len(r) + 12
	}
	b := make([]byte, 0, n)
	b = append(b, Version)
	b = appendString(b, u.Code)
	b = appendString(b, u.Msg)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(u.Estimate))
	b = appendStrings(b, u.Replicas)
	b = appendStrings(b, u.Regions)
	var flags byte
	for i, f := range [...]bool{u.Stale, u.Windowed, u.Closed, u.ByRegion != nil, u.Sketches != nil} {
		if f {
			flags |= 1 << i
		}
	}
	b = append(b, flags)
	if u.Windowed {
		b = binary.AppendVarint(b, u.From.UnixMilli())
		b = binary.AppendVarint(b, u.To.UnixMilli())
		b = binary.AppendVarint(b, u.SlotWidth.Milliseconds())
	}
	if u.ByRegion != nil {
		b = appendMap(b, u.ByRegion)
	}
	for _, h := range u.Sketches {
		b = AppendHLL(b, h)
	}
	return b
}

// UnmarshalUniques decodes what MarshalUniques encoded, refusing anything
// malformed or out of bounds: an estimate not a finite count, a region
// for each replica but one, replicas not sorted or twice.
func UnmarshalUniques(b []byte) (Uniques, error) {
	d := decoder{b: b}
	var u Uniques
	d.header()
	u.Code = d.string()
	u.Msg = d.string()
	u.Estimate = math.Float64frombits(d.fixed64())
	if d.err == nil && (math.IsNaN(u.Estimate) || math.IsInf(u.Estimate, 0) || u.Estimate < 0) {
		d.fail("estimate %v", u.Estimate)
	}
	u.Replicas = d.strings()
	for i := 1; i < len(u.Replicas) && d.err == nil; i++ {
		if u.Replicas[i-1] >= u.Replicas[i] {
			d.fail("replica %q out of order or twice", u.Replicas[i])
		}
	}
	u.Regions = d.strings()
	if d.err == nil && len(u.Regions) != len(u.Replicas) {
		d.fail("%d regions for %d replicas", len(u.Regions), len(u.Replicas))
	}
	flags := d.byte()
	if d.err == nil && flags>>numUniquesFlags != 0 {
		d.fail("unknown flags %#x", flags)
	}
	u.Stale, u.Windowed, u.Closed = flags&uniquesStale != 0, flags&uniquesWindowed != 0, flags&uniquesClosed != 0
	if d.err == nil && u.Closed && !u.Windowed {
		d.fail("closed but not windowed")
	}
	if u.Windowed {
		u.From, u.To = time.UnixMilli(d.varint()), time.UnixMilli(d.varint())
		w := d.varint()
		if d.err == nil && (w <= 0 || w > math.MaxInt64/int64(time.Millisecond)) {
			d.fail("slot width %d ms", w)
		}
		u.SlotWidth = time.Duration(w) * time.Millisecond
	}
	if flags&uniquesByRegion != 0 {
		if u.ByRegion = d.intMap(); u.ByRegion == nil && d.err == nil {
			u.ByRegion = map[string]int64{}
		}
	}
	if flags&uniquesSketches != 0 {
		u.Sketches = make([]*crdt.HLL, 0, len(u.Replicas))
		for range u.Replicas {
			if d.err != nil {
				break
			}
			u.Sketches = append(u.Sketches, d.hll())
		}
	}
	if err := d.end(); err != nil {
		return Uniques{}, err
	}
	return u, nil
}

// AppendHLL writes h as its nonzero pages, each its number and its page
// encoding (crdt.AppendHLLPage), after their count.
func AppendHLL(b []byte, h *crdt.HLL) []byte {
	n := 0
	for i := range crdt.HLLPages {
		if !h.Page(i).IsZero() {
			n++
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for i := range crdt.HLLPages {
		if p := h.Page(i); !p.IsZero() {
			b = binary.AppendUvarint(b, uint64(i))
			b = appendBytes(b, crdt.AppendHLLPage(nil, p))
		}
	}
	return b
}

// hll reads what AppendHLL wrote, refusing a page out of range, out of
// order or zero.
func (d *decoder) hll() *crdt.HLL {
	h := new(crdt.HLL)
	n := d.count(crdt.HLLPages)
	last := -1
	for range n {
		i := d.uvarint()
		enc := d.bytes()
		if d.err != nil {
			return nil
		}
		if i >= crdt.HLLPages || int(i) <= last {
			d.fail("sketch page %d out of range or order", i)
			return nil
		}
		var p crdt.HLLPage
		if err := crdt.DecodeHLLPage(enc, &p); err != nil || p.IsZero() {
			d.fail("sketch page %d: %v", i, err)
			return nil
		}
		h.MergePage(int(i), &p)
		last = int(i)
	}
	return h
}
