package route

import (
	"encoding/binary"
	"math"
	"slices"

	"github.com/tally-dev/tally/crdt"
)

// Detail is what a view read (OpCounterView and the kinds after it)
// answers besides its value: the holder's view the value was read from,
// so a front door shows what the holder's own answer would.
type Detail struct {
	// Vector is each replica's part of the value (OpCounterView,
	// OpLikesView), a valid crdt.Vector: sorted, no duplicate, no zero.
	Vector crdt.Vector
	// Unreconciled counts the records whose excess is not yet zero in the
	// holder's view (region.Read.Unreconciled).
	Unreconciled int64
	// ApproxError is an approximate counter's relative error target, 0
	// for an exact one.
	ApproxError float64
	// Stale: a peer holding the key's shard is unheard-from past its
	// timeout, at the holder. Staleness is ms since the holder last heard
	// from each peer holding the key's shard (-1: never), at most
	// MaxList peers.
	Stale     bool
	Staleness map[string]int64
	// Origin is the replica that accepted OpLikedView's winning like or
	// unlike ("" if none).
	Origin string
	// HLCs are stamps: OpLikedView's one, of the winning like or unlike;
	// OpLikersView's, one for each user listed, in order.
	HLCs []uint64
	// Granted, Spent and Rights are OpBudgetView's: the budget's totals,
	// and the rights each replica holds as far as the holder knows, at
	// most MaxList replicas (Origin is then the holder itself).
	Granted, Spent int64
	Rights         map[string]int64
}

func (d *Detail) size() int {
	n := 32 + len(d.Origin) + 10*len(d.HLCs)
	for _, e := range d.Vector {
		n += len(e.Replica) + 22
	}
	for p := range d.Staleness {
		n += len(p) + 12
	}
	for p := range d.Rights {
		n += len(p) + 12
	}
	return n
}

// appendMap encodes m in key order, one encoding of one map.
func appendMap(b []byte, m map[string]int64) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = appendString(b, k)
		b = binary.AppendVarint(b, m[k])
	}
	return b
}

// intMap reads what appendMap wrote, refusing a key twice; nil when
// empty.
func (d *decoder) intMap() map[string]int64 {
	n := d.count(MaxList)
	if n == 0 {
		return nil
	}
	m := make(map[string]int64, min(n, 64))
	for range n {
		if d.err != nil {
			return nil
		}
		k := d.string()
		if _, twice := m[k]; twice && d.err == nil {
			d.fail("%q twice", k)
		}
		m[k] = d.varint()
	}
	return m
}

func (d *Detail) append(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(d.Vector)))
	for _, e := range d.Vector {
		b = appendString(b, e.Replica)
		b = binary.AppendUvarint(b, e.P)
		b = binary.AppendUvarint(b, e.N)
	}
	b = binary.AppendVarint(b, d.Unreconciled)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(d.ApproxError))
	stale := byte(0)
	if d.Stale {
		stale = 1
	}
	b = append(b, stale)
	b = appendMap(b, d.Staleness)
	b = appendString(b, d.Origin)
	b = binary.AppendUvarint(b, uint64(len(d.HLCs)))
	for _, h := range d.HLCs {
		b = binary.AppendUvarint(b, h)
	}
	b = binary.AppendVarint(b, d.Granted)
	b = binary.AppendVarint(b, d.Spent)
	return appendMap(b, d.Rights)
}

// detail reads what Detail.append wrote, refusing a vector that is not a
// valid crdt.Vector, a peer twice, or more than MaxList of anything.
func (d *decoder) detail() *Detail {
	out := &Detail{}
	n := d.count(MaxList)
	for i := range n {
		if d.err != nil {
			return nil
		}
		e := crdt.Entry{Replica: d.string()}
		e.P, e.N = d.uvarint(), d.uvarint()
		if d.err == nil && (e.P == 0 && e.N == 0 || i > 0 && out.Vector[i-1].Replica >= e.Replica) {
			d.fail("vector entry %q out of order or zero", e.Replica)
		}
		out.Vector = append(out.Vector, e)
	}
	out.Unreconciled = d.varint()
	out.ApproxError = math.Float64frombits(d.fixed64())
	if d.err == nil && (math.IsNaN(out.ApproxError) || out.ApproxError < 0 || out.ApproxError > 1) {
		d.fail("approximate error %v", out.ApproxError)
	}
	switch d.byte() {
	case 0:
	case 1:
		out.Stale = true
	default:
		d.fail("stale flag")
	}
	out.Staleness = d.intMap()
	out.Origin = d.string()
	if n := d.count(MaxList); n > 0 {
		out.HLCs = make([]uint64, 0, min(n, len(d.b)))
		for range n {
			out.HLCs = append(out.HLCs, d.uvarint())
		}
	}
	out.Granted = d.varint()
	out.Spent = d.varint()
	out.Rights = d.intMap()
	if d.err != nil {
		return nil
	}
	return out
}

func (d *decoder) fixed64() uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.fail("short")
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}
