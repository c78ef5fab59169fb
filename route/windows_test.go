package route_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/route"
	"github.com/tally-dev/tally/storage"
)

var sampleWindows = []route.Windows{
	{},
	{Code: "no_window", Msg: "no slots cover that range: levels of likes \"k\" are 1s kept 3h0m0s"},
	{Stale: true, Windows: []route.Window{{
		FromMs: 1767225540000, ToMs: 1767225660000, WidthMs: 120000, SlotWidthMs: 1000, Closed: true, StaleFor: true,
		Unreconciled: 3, ApproxError: 0.01,
		Sum:     crdt.Vector{{Replica: "eu-1", PN: crdt.PN{P: 5, N: 1}}, {Replica: "us-1", PN: crdt.PN{P: 2}}},
		Values:  []int64{6},
		Regions: map[string][]int64{"eu": {4}, "us": {2}},
		Std:     []float64{1.5},
	}}},
	{Windows: []route.Window{
		{FromMs: 1767225540000, ToMs: 1767225720000, WidthMs: 60000, SlotWidthMs: 60000, Values: []int64{0, -2, 7},
			Regions: map[string][]int64{"unknown": {0, 0, 1}, "us": {0, -2, 6}}},
		{FromMs: 1767225540000, ToMs: 1767225720000, WidthMs: 60000, SlotWidthMs: 60000, Values: []int64{1, 2, 3}},
	}},
}

func TestWindowsRoundTrip(t *testing.T) {
	for i, ws := range sampleWindows {
		b := route.MarshalWindows(&ws)
		got, err := route.UnmarshalWindows(b)
		if err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, ws) {
			t.Fatalf("sample %d: got %+v, want %+v", i, got, ws)
		}
	}
}

func TestWindowsRefusesMalformed(t *testing.T) {
	good := sampleWindows[2]
	for name, change := range map[string]func(w *route.Window){
		"values short of the points": func(w *route.Window) { w.Values = nil },
		"a region short":             func(w *route.Window) { w.Regions = map[string][]int64{"us": {1, 2}} },
		"points not tiling":          func(w *route.Window) { w.WidthMs = 7 },
		"empty range":                func(w *route.Window) { w.ToMs = w.FromMs },
		"vector out of order": func(w *route.Window) {
			w.Sum = crdt.Vector{{Replica: "us-1", PN: crdt.PN{P: 1}}, {Replica: "eu-1", PN: crdt.PN{P: 1}}}
		},
		"negative error":        func(w *route.Window) { w.Std = []float64{-1} },
		"errors short":          func(w *route.Window) { w.Std = []float64{1, 2} },
		"error target over one": func(w *route.Window) { w.ApproxError = 2 },
	} {
		ws := good
		ws.Windows = []route.Window{good.Windows[0]}
		change(&ws.Windows[0])
		if _, err := route.UnmarshalWindows(route.MarshalWindows(&ws)); !errors.Is(err, route.ErrMalformed) {
			t.Errorf("%s: decoded (%v)", name, err)
		}
	}
	b := route.MarshalWindows(&good)
	for n := range len(b) {
		if _, err := route.UnmarshalWindows(b[:n]); err == nil {
			t.Fatalf("%d of %d bytes decoded", n, len(b))
		}
	}
}

func TestWindowOpsOnTheWire(t *testing.T) {
	req := route.Request{Kind: route.KindOps, From: "us-1", Shard: 7, Ops: []route.Op{
		route.SeriesOp(storage.Counters, []string{"views", ""}, 1767225540000, 1767225660000, time.Minute, true),
	}}
	got, err := route.UnmarshalRequest(req.Marshal())
	if err != nil || !reflect.DeepEqual(got.Ops, req.Ops) {
		t.Fatalf("got %+v (%v), want %+v", got.Ops, err, req.Ops)
	}
	if !got.Ops[0].Kind.Read() || !route.OpWindow.Read() {
		t.Fatal("a window or series is not a read")
	}
	req.Ops[0] = route.WindowLastOp(storage.Likes, "k", time.Hour)
	if got, err := route.UnmarshalRequest(req.Marshal()); err != nil || got.Ops[0].Span.LastMs != 3600000 {
		t.Fatalf("a window of the last hour decoded as %+v (%v)", got.Ops, err)
	}
	// A span of no family, or of a negative last, is refused.
	req.Ops[0] = route.WindowOp(storage.Kind('x'), "k", 1, 2)
	if _, err := route.UnmarshalRequest(req.Marshal()); !errors.Is(err, route.ErrMalformed) {
		t.Fatalf("a window of family x decoded (%v)", err)
	}
	req.Ops[0] = route.WindowLastOp(storage.Likes, "k", -time.Hour)
	if _, err := route.UnmarshalRequest(req.Marshal()); !errors.Is(err, route.ErrMalformed) {
		t.Fatalf("a window of the last -1h decoded (%v)", err)
	}
}

func FuzzWindows(f *testing.F) {
	seeds := make([][]byte, 0, len(sampleWindows))
	for _, ws := range sampleWindows {
		seeds = append(seeds, route.MarshalWindows(&ws))
	}
	fuzzRoundTrip(f, seeds, route.UnmarshalWindows, func(ws route.Windows) []byte { return route.MarshalWindows(&ws) })
}
