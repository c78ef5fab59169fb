package region

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// Reading time windows: a key's net change over a window, or a series of
// points, summed from the slots the writer books (windows.go). Reads
// only: nothing here is on the write path.

// Window is the answer to a window or series read.
type Window struct {
	// From and To bound the window, aligned to Width: [From, To).
	From, To time.Time
	Width    time.Duration
	// SlotWidth is the width of the level read.
	SlotWidth time.Duration
	// Points are the window's slots in time order, empty ones included
	// (Series), or one point for the whole window (Window). Each holds
	// per-replica sums of the slots' entries, whose value is the net
	// change of the count in that interval.
	Points []Point
	// Unreconciled counts records of the key whose excess is not zero yet.
	Unreconciled int
	// Closed: the window ended more than WindowConfig.Past ago, so no new
	// local event can be booked into it.
	Closed bool
}

// Point is one interval of a series.
type Point struct {
	Start  time.Time
	Vector crdt.Vector
}

// Value is the point's net change.
func (p Point) Value() int64 { return p.Vector.Value() }

// Window limits.
const (
	// MaxWindowSlots is the most slots one read sums per key.
	MaxWindowSlots = 100_000
	// MaxSeriesPoints is the most points a series returns.
	MaxSeriesPoints = 10_000
)

// ErrNoWindow: no level of the key covers the asked range.
var ErrNoWindow = errors.New("region: no slots cover that range")

// pickLevel chooses the finest level of (kind, key) that still holds from
// and sums [from, to) in at most MaxWindowSlots slots, with a width that
// divides step (step 0: any).
func (r *Replica) pickLevel(kind storage.Kind, key string, fromMs, toMs, step int64) (level, error) {
	nowMs := r.pclock.NowMs()
	levels := r.windows.levels(kind, key)
	for _, l := range levels {
		if step != 0 && step%l.width != 0 {
			continue
		}
		if l.keep != 0 && fromMs < nowMs-(l.keep+l.width)*1000 {
			continue
		}
		if (toMs-fromMs)/1000/l.width > MaxWindowSlots {
			continue
		}
		return l, nil
	}
	if len(levels) == 0 {
		return level{}, fmt.Errorf("%w: %s %q has no slots configured", ErrNoWindow, kind, key)
	}
	return level{}, fmt.Errorf("%w: levels of %s %q are %s", ErrNoWindow, kind, key, describeLevels(levels))
}

func describeLevels(ls []level) string {
	var parts []string
	for _, l := range ls {
		keep := "forever"
		if l.keep != 0 {
			keep = (time.Duration(l.keep) * time.Second).String()
		}
		parts = append(parts, fmt.Sprintf("%v kept %s", time.Duration(l.width)*time.Second, keep))
	}
	return strings.Join(parts, ", ")
}

func (r *Replica) series(kind storage.Kind, key string, fromMs, toMs, step int64) (Window, error) {
	if err := r.Err(); err != nil {
		return Window{}, err
	}
	if kind != storage.Likes && kind != storage.Counters || key != "" && !storage.ValidItem(kind, key) {
		return Window{}, fmt.Errorf("%w: bad window key %c/%q", ErrInvalid, kind, key)
	}
	if toMs <= fromMs {
		return Window{}, fmt.Errorf("%w: window ends before it starts", ErrInvalid)
	}
	l, err := r.pickLevel(kind, key, fromMs, toMs, step)
	if err != nil {
		return Window{}, err
	}
	from := crdt.SlotStart(fromMs, l.width)
	to := crdt.SlotStart(toMs-1, l.width) + l.width
	if step == 0 {
		step = to - from
	} else {
		from = crdt.SlotStart(from*1000, step)
		to = crdt.SlotStart((to-1)*1000, step) + step
	}
	if (to-from)/step > MaxSeriesPoints {
		return Window{}, fmt.Errorf("%w: %d points, at most %d", ErrInvalid, (to-from)/step, MaxSeriesPoints)
	}
	w := Window{From: time.Unix(from, 0), To: time.Unix(to, 0), Width: time.Duration(step) * time.Second,
		SlotWidth: time.Duration(l.width) * time.Second}
	w.Points = make([]Point, (to-from)/step)
	for i := range w.Points {
		w.Points[i].Start = time.Unix(from+int64(i)*step, 0)
	}
	nowMs := r.pclock.NowMs()
	err = r.addSlots(kind, key, l, from, to, nowMs, func(b crdt.Slot, v crdt.Vector) {
		p := &w.Points[(b.Start-from)/step]
		p.Vector = addVectors(p.Vector, v)
	})
	if err != nil {
		return Window{}, err
	}
	if key != "" {
		r.umu.RLock()
		w.Unreconciled = r.unreconciled[vkey{kind, key}]
		r.umu.RUnlock()
	}
	w.Closed = to*1000+r.cfg.Windows.Past.Milliseconds() <= nowMs
	return w, nil
}

// addSlots calls fn with each slot of (kind, key) at level l starting in
// [from, to) (unix seconds) that has not expired at nowMs.
func (r *Replica) addSlots(kind storage.Kind, key string, l level, from, to, nowMs int64, fn func(b crdt.Slot, v crdt.Vector)) error {
	err := r.store.WindowSeries(kind.Windows(), key, l.width, from, to, func(b crdt.Slot, v crdt.Vector) {
		if !b.Expired(nowMs) {
			fn(b, v)
		}
	})
	if err != nil {
		return fmt.Errorf("read window: %w", err)
	}
	return nil
}

// addVectors adds o's entries to v's, half by half (not a merge: the
// slots of a window are disjoint intervals).
func addVectors(v, o crdt.Vector) crdt.Vector {
	for _, e := range o {
		cur := v.Get(e.Replica)
		v = v.Set(e.Replica, crdt.PN{P: cur.P + e.P, N: cur.N + e.N})
	}
	return v
}

// Sum is the window's total as one point.
func (w Window) Sum() Point {
	p := Point{Start: w.From}
	for _, q := range w.Points {
		p.Vector = addVectors(p.Vector, q.Vector)
	}
	return p
}
