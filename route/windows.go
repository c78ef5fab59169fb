package route

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

// A window or series read (OpWindow, OpSeries) answers a slot range with
// per-region breakdowns, which no Result carries: it is answered in an
// encoding of its own, Windows, one Window for each key read. The holder
// turns its view into what a front door shows (each point's value, each
// region's share of it by the holder's word on its peers' regions, the
// error bounds of an approximate counter), so the entry replica renders
// the holder's answer as the holder would render its own. A request
// holding one of them holds nothing else.

// Span is a window or series read's range, on the wire for OpWindow and
// OpSeries only: the family (storage.Likes or storage.Counters), the
// range [FromMs, ToMs) the entry replica computed, and a series' step in
// whole seconds (0 for a window). A window's LastMs, if set, is its range
// instead: the last LastMs ms, as the replica reading it ranges them
// (region.Windows.Range: the finest level of the key that covers them).
// ByRegion asks a series for each region's share of each point (a
// window always has it).
type Span struct {
	Family       storage.Kind
	FromMs, ToMs int64
	LastMs       int64
	Step         int64
	ByRegion     bool
}

// hasSpan reports whether an operation of kind k carries a Span.
func (k OpKind) hasSpan() bool { return k == OpWindow || k == OpSeries }

// window reports whether k is a window or series read.
func (k OpKind) window() bool { return k == OpWindow || k == OpSeries }

func (s *Span) append(b []byte) []byte {
	b = append(b, byte(s.Family))
	b = binary.AppendVarint(b, s.FromMs)
	b = binary.AppendVarint(b, s.ToMs)
	b = binary.AppendVarint(b, s.LastMs)
	b = binary.AppendVarint(b, s.Step)
	return append(b, boolByte(s.ByRegion))
}

func (d *decoder) span() Span {
	var s Span
	s.Family = storage.Kind(d.byte())
	if d.err == nil && s.Family != storage.Likes && s.Family != storage.Counters {
		d.fail("window family %d", s.Family)
	}
	s.FromMs = d.varint()
	s.ToMs = d.varint()
	s.LastMs = d.varint()
	if d.err == nil && s.LastMs < 0 {
		d.fail("window of the last %d ms", s.LastMs)
	}
	s.Step = d.varint()
	s.ByRegion = d.flag("by region")
	return s
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// flag reads a byte that must be 0 or 1.
func (d *decoder) flag(what string) bool {
	switch d.byte() {
	case 0:
		return false
	case 1:
		return true
	}
	d.fail("%s flag", what)
	return false
}

// MaxWindowKeys bounds an OpSeries' keys (the API's own bound is lower).
const MaxWindowKeys = 1 << 10

// WindowOp is the OpWindow of key ("" for the family's total) of family
// over [fromMs, toMs).
func WindowOp(family storage.Kind, key string, fromMs, toMs int64) Op {
	return Op{Kind: OpWindow, Key: key, Span: Span{Family: family, FromMs: fromMs, ToMs: toMs}}
}

// WindowLastOp is the OpWindow of key ("" for the family's total) of
// family over the last last, ranged by the replica that reads it.
func WindowLastOp(family storage.Kind, key string, last time.Duration) Op {
	return Op{Kind: OpWindow, Key: key, Span: Span{Family: family, LastMs: last.Milliseconds()}}
}

// SeriesOp is the OpSeries of keys ("" for the family's total) of family
// over [fromMs, toMs) in points of step, with each region's share of
// each point if byRegion.
func SeriesOp(family storage.Kind, keys []string, fromMs, toMs int64, step time.Duration, byRegion bool) Op {
	return Op{Kind: OpSeries, List: keys,
		Span: Span{Family: family, FromMs: fromMs, ToMs: toMs, Step: int64(step / time.Second), ByRegion: byRegion}}
}

// Windows is a holder's answer to an OpWindow or OpSeries: one Window for
// each key read, in the operation's order, or why it was not read (Code
// and Msg, as a Result's).
type Windows struct {
	Code, Msg string
	// Stale: some peer of the holder is unheard-from past its timeout,
	// or the holder has not finished recovering (a series is then not
	// final).
	Stale   bool
	Windows []Window
}

// Window is one key's window or series, as the holder read it.
type Window struct {
	// FromMs and ToMs bound it, [FromMs, ToMs); WidthMs is each point's
	// width (a window's one point: ToMs-FromMs), SlotWidthMs the width
	// of the level read. Points start at FromMs + i*WidthMs.
	FromMs, ToMs, WidthMs, SlotWidthMs int64
	// Closed: no new local event can be booked into it.
	Closed bool
	// Unreconciled counts the key's records whose excess is not zero.
	Unreconciled int64
	// StaleFor: a peer holding the key's shard (any peer, for the
	// family's total) is unheard-from past its timeout, at the holder.
	StaleFor bool
	// ApproxError is an approximate counter's relative error target, 0
	// for an exact counter and for likes.
	ApproxError float64
	// Sum is each replica's part of the whole range (OpWindow only).
	Sum crdt.Vector
	// Values is each point's net change.
	Values []int64
	// Regions is each region's share of each point, by the holder's
	// word on its peers' regions ("unknown" for a replica it cannot
	// place): an OpWindow's always, an OpSeries' with ByRegion.
	Regions map[string][]int64
	// Std is each point's standard error, for an approximate counter's
	// key (not the family's total); else empty.
	Std []float64
}

// WindowSource is what a window or series is read from: a replica and,
// with replication, its word on its peers (each nil without).
type WindowSource struct {
	Replica *region.Replica
	// StaleFor says whether a peer holding key's shard is unheard-from
	// past its timeout; Stale, whether any peer is (or recovery is not
	// finished).
	StaleFor func(key string) bool
	Stale    func() bool
	// Regions maps replica ids to their regions: this replica's, and
	// its peers' as they announced them.
	Regions func() map[string]string
}

// ReadWindows answers o, an OpWindow or OpSeries, from src: what a holder
// answers, and what an entry replica holding the keys' shard reads
// itself, so a front door renders the same answer wherever it was read.
// The first key that fails fails them all, with the replica's error as
// it is.
func ReadWindows(src WindowSource, o *Op) (Windows, error) {
	keys := o.List
	step := o.Span.Step
	switch {
	case o.Kind == OpWindow:
		keys, step = []string{o.Key}, 0
	case o.Kind != OpSeries:
		return Windows{}, fmt.Errorf("%w: operation kind %d is not a window", region.ErrInvalid, o.Kind)
	case len(keys) == 0 || len(keys) > MaxWindowKeys || step < 1:
		return Windows{}, fmt.Errorf("%w: a series of %d keys in steps of %ds", region.ErrInvalid, len(keys), step)
	}
	rep := src.Replica
	regions := map[string]string{}
	if src.Regions != nil {
		regions = src.Regions()
	}
	out := Windows{Stale: src.Stale != nil && src.Stale(), Windows: make([]Window, 0, len(keys))}
	for _, key := range keys {
		var win region.Window
		var err error
		if o.Kind == OpWindow {
			fromMs, toMs := o.Span.FromMs, o.Span.ToMs
			if o.Span.LastMs > 0 {
				fromMs, toMs, err = rep.Windows().Range(o.Span.Family, key, time.Duration(o.Span.LastMs)*time.Millisecond)
			}
			if err == nil {
				win, err = rep.Windows().Of(o.Span.Family, key, fromMs, toMs)
			}
		} else {
			win, err = rep.Windows().Series(o.Span.Family, key, o.Span.FromMs, o.Span.ToMs, time.Duration(step)*time.Second)
		}
		if err != nil {
			return Windows{}, err
		}
		w := Window{FromMs: win.From.UnixMilli(), ToMs: win.To.UnixMilli(), WidthMs: win.Width.Milliseconds(),
			SlotWidthMs: win.SlotWidth.Milliseconds(), Closed: win.Closed, Unreconciled: int64(win.Unreconciled),
			StaleFor: src.StaleFor != nil && src.StaleFor(key), Values: make([]int64, len(win.Points))}
		if o.Kind == OpWindow {
			w.Sum = win.Sum().Vector
		}
		for i, p := range win.Points {
			w.Values[i] = p.Value()
		}
		if o.Kind == OpWindow || o.Span.ByRegion {
			w.Regions = map[string][]int64{}
			for i, p := range win.Points {
				for _, e := range p.Vector {
					name, ok := regions[e.Replica]
					if !ok {
						name = "unknown"
					}
					vals, ok := w.Regions[name]
					if !ok {
						vals = make([]int64, len(win.Points))
						w.Regions[name] = vals
					}
					vals[i] += e.Value()
				}
			}
		}
		if o.Span.Family == storage.Counters {
			w.ApproxError = rep.Counters().ApproxError(key)
		}
		if w.ApproxError > 0 && key != "" {
			counter, err := rep.Counters().Get(key)
			if err != nil {
				return Windows{}, err
			}
			w.Std = make([]float64, len(win.Points))
			for i, p := range win.Points {
				w.Std[i] = region.WindowStd(w.ApproxError, counter.Vector, p.Vector)
			}
		}
		out.Windows = append(out.Windows, w)
	}
	return out, nil
}

// windowMinBytes is the fewest bytes an encoded Window takes.
const windowMinBytes = 16

// MaxWindowPoints bounds a Window's points (region.MaxSeriesPoints).
const MaxWindowPoints = region.MaxSeriesPoints

// MarshalWindows encodes ws, the Body of an OpWindow's or OpSeries'
// answer.
func MarshalWindows(ws *Windows) []byte {
	n := 8 + len(ws.Code) + len(ws.Msg)
	for i := range ws.Windows {
		w := &ws.Windows[i]
		n += 64 + 10*len(w.Values) + 8*len(w.Std)
		for _, e := range w.Sum {
			n += len(e.Replica) + 22
		}
		for g, vs := range w.Regions {
			n += len(g) + 2 + 10*len(vs)
		}
	}
	b := make([]byte, 0, n)
	b = append(b, Version)
	b = appendString(b, ws.Code)
	b = appendString(b, ws.Msg)
	b = append(b, boolByte(ws.Stale))
	b = binary.AppendUvarint(b, uint64(len(ws.Windows)))
	for i := range ws.Windows {
		b = ws.Windows[i].append(b)
	}
	return b
}

func (w *Window) append(b []byte) []byte {
	b = binary.AppendVarint(b, w.FromMs)
	b = binary.AppendVarint(b, w.ToMs)
	b = binary.AppendVarint(b, w.WidthMs)
	b = binary.AppendVarint(b, w.SlotWidthMs)
	b = append(b, boolByte(w.Closed), boolByte(w.StaleFor))
	b = binary.AppendVarint(b, w.Unreconciled)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(w.ApproxError))
	b = appendVector(b, w.Sum)
	b = appendInts(b, w.Values)
	names := make([]string, 0, len(w.Regions))
	for g := range w.Regions {
		names = append(names, g)
	}
	slices.Sort(names)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, g := range names {
		b = appendString(b, g)
		b = appendInts(b, w.Regions[g])
	}
	b = binary.AppendUvarint(b, uint64(len(w.Std)))
	for _, s := range w.Std {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(s))
	}
	return b
}

func appendVector(b []byte, v crdt.Vector) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	for _, e := range v {
		b = appendString(b, e.Replica)
		b = binary.AppendUvarint(b, e.P)
		b = binary.AppendUvarint(b, e.N)
	}
	return b
}

// vector reads what appendVector wrote, refusing what is not a valid
// crdt.Vector (sorted, no replica twice, no zero entry).
func (d *decoder) vector() crdt.Vector {
	n := d.count(MaxList)
	var v crdt.Vector
	for i := range n {
		if d.err != nil {
			return nil
		}
		e := crdt.Entry{Replica: d.string()}
		e.P, e.N = d.uvarint(), d.uvarint()
		if d.err == nil && (e.P == 0 && e.N == 0 || i > 0 && v[i-1].Replica >= e.Replica) {
			d.fail("vector entry %q out of order or zero", e.Replica)
		}
		v = append(v, e)
	}
	return v
}

func appendInts(b []byte, vs []int64) []byte {
	b = binary.AppendUvarint(b, uint64(len(vs)))
	for _, v := range vs {
		b = binary.AppendVarint(b, v)
	}
	return b
}

// ints reads what appendInts wrote, exactly want values.
func (d *decoder) ints(want int) []int64 {
	n := d.count(MaxWindowPoints)
	if d.err == nil && n != want {
		d.fail("%d values for %d points", n, want)
	}
	if d.err != nil {
		return nil
	}
	out := make([]int64, 0, min(n, len(d.b)))
	for range n {
		out = append(out, d.varint())
	}
	return out
}

// UnmarshalWindows decodes what MarshalWindows encoded, refusing anything
// malformed or out of bounds: a window's points must tile its range, and
// its values, regions and errors have one entry per point.
func UnmarshalWindows(b []byte) (Windows, error) {
	d := decoder{b: b}
	var ws Windows
	d.header()
	ws.Code = d.string()
	ws.Msg = d.string()
	ws.Stale = d.flag("stale")
	n := d.count(MaxWindowKeys)
	if n > 0 {
		ws.Windows = make([]Window, 0, min(n, len(d.b)/windowMinBytes+1))
	}
	for range n {
		if d.err != nil {
			break
		}
		ws.Windows = append(ws.Windows, d.window())
	}
	if err := d.end(); err != nil {
		return Windows{}, err
	}
	return ws, nil
}

func (d *decoder) window() Window {
	var w Window
	w.FromMs = d.varint()
	w.ToMs = d.varint()
	w.WidthMs = d.varint()
	w.SlotWidthMs = d.varint()
	w.Closed = d.flag("closed")
	w.StaleFor = d.flag("stale")
	w.Unreconciled = d.varint()
	w.ApproxError = math.Float64frombits(d.fixed64())
	points := 0
	if d.err == nil {
		switch {
		case math.IsNaN(w.ApproxError) || w.ApproxError < 0 || w.ApproxError > 1:
			d.fail("approximate error %v", w.ApproxError)
		case w.FromMs < 0 || w.ToMs <= w.FromMs || w.WidthMs <= 0 || w.SlotWidthMs <= 0 ||
			(w.ToMs-w.FromMs)%w.WidthMs != 0 || (w.ToMs-w.FromMs)/w.WidthMs > MaxWindowPoints:
			d.fail("window [%d, %d) in points of %d ms", w.FromMs, w.ToMs, w.WidthMs)
		case w.Unreconciled < 0 || w.Unreconciled > math.MaxInt32:
			d.fail("%d unreconciled records", w.Unreconciled)
		default:
			points = int((w.ToMs - w.FromMs) / w.WidthMs)
		}
	}
	w.Sum = d.vector()
	w.Values = d.ints(points)
	if n := d.count(MaxList); n > 0 {
		w.Regions = make(map[string][]int64, min(n, 64))
		prev := ""
		for i := range n {
			if d.err != nil {
				break
			}
			g := d.string()
			if d.err == nil && i > 0 && g <= prev {
				d.fail("region %q out of order or twice", g)
			}
			prev = g
			w.Regions[g] = d.ints(points)
		}
	}
	if n := d.count(MaxWindowPoints); d.err == nil && n > 0 {
		if n != points {
			d.fail("%d errors for %d points", n, points)
		}
		w.Std = make([]float64, 0, min(n, len(d.b)/8+1))
		for range n {
			s := math.Float64frombits(d.fixed64())
			if d.err == nil && (math.IsNaN(s) || math.IsInf(s, 0) || s < 0) {
				d.fail("standard error %v", s)
			}
			w.Std = append(w.Std, s)
		}
	}
	return w
}
