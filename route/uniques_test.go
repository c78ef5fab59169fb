package route_test

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/route"
	"github.com/tally-dev/tally/shard"
)

// sketchOf is a sketch of ids.
func sketchOf(ids ...string) *crdt.HLL {
	h := new(crdt.HLL)
	for _, id := range ids {
		h.AddID(id)
	}
	return h
}

var sampleUniques = []route.Uniques{
	{},
	{Code: "no_window", Msg: "no slots cover that range"},
	{Estimate: 4.0000012, Replicas: []string{"eu-1", "us-1"}, Regions: []string{"eu", "us"}, Stale: true},
	{Estimate: 2, Replicas: []string{"us-1"}, Regions: []string{"unknown"}, ByRegion: map[string]int64{},
		Windowed: true, From: time.UnixMilli(1767222000000), To: time.UnixMilli(1767229200000), SlotWidth: time.Hour, Closed: true},
	{Estimate: 3, Replicas: []string{"eu-1", "us-1"}, Regions: []string{"eu", "us"}, ByRegion: map[string]int64{"eu": 1, "us": 2},
		Sketches: []*crdt.HLL{sketchOf("a"), sketchOf("b", "c")}},
	{Sketches: []*crdt.HLL{}},
}

// Every answer reads back as it was written.
func TestUniquesRoundTrip(t *testing.T) {
	for _, u := range sampleUniques {
		got, err := route.UnmarshalUniques(route.MarshalUniques(&u))
		if err != nil || !reflect.DeepEqual(got, u) {
			t.Errorf("%+v read back as %+v, %v", u, got, err)
		}
	}
}

// What the answer's decoder refuses: another version, a cut or long
// message, an estimate that is no count, replicas out of order or
// without their regions, unknown flags, a slot width not positive, a
// sketch page out of order or zero.
func TestUniquesRefused(t *testing.T) {
	good := route.MarshalUniques(&sampleUniques[4])
	est := func(f float64) []byte {
		b := []byte{route.Version, 0, 0}
		b = append(b, make([]byte, 8)...)
		bits := math.Float64bits(f)
		for i := range 8 {
			b[3+i] = byte(bits >> (8 * i))
		}
		return append(b, 0, 0, 0)
	}
	zero := []byte{route.Version, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	with := func(tail ...byte) []byte { return append(append([]byte{}, zero...), tail...) }
	for name, b := range map[string][]byte{
		"empty":               nil,
		"version 2":           append([]byte{2}, good[1:]...),
		"cut":                 good[:len(good)-1],
		"trailing":            append(append([]byte{}, good...), 0),
		"NaN estimate":        est(math.NaN()),
		"negative estimate":   est(-1),
		"infinite estimate":   est(math.Inf(1)),
		"replicas unsorted":   with(2, 1, 'b', 1, 'a', 2, 1, 'x', 1, 'y', 0),
		"replica twice":       with(2, 1, 'a', 1, 'a', 2, 1, 'x', 1, 'y', 0),
		"a region short":      with(2, 1, 'a', 1, 'b', 1, 1, 'x', 0),
		"unknown flag":        with(0, 0, 1<<5),
		"closed, no window":   with(0, 0, 1<<2),
		"slot width 0":        with(0, 0, 1<<1, 0, 0, 0),
		"slot width negative": with(0, 0, 1<<1, 0, 0, 1),
		"sketch missing":      with(1, 1, 'a', 1, 1, 'x', 1<<4),
		"sketch page range":   with(1, 1, 'a', 1, 1, 'x', 1<<4, 1, 0x80, 0x80, 0x04, 0),
		"sketch page zero":    with(1, 1, 'a', 1, 1, 'x', 1<<4, 1, 0, 0),
	} {
		if _, err := route.UnmarshalUniques(b); !errors.Is(err, route.ErrMalformed) {
			t.Errorf("uniques %s: %v, want ErrMalformed", name, err)
		}
	}
}

func FuzzUniques(f *testing.F) {
	seeds := make([][]byte, 0, len(sampleUniques))
	for _, u := range sampleUniques {
		seeds = append(seeds, route.MarshalUniques(&u))
	}
	fuzzRoundTrip(f, seeds, route.UnmarshalUniques, func(u route.Uniques) []byte { return route.MarshalUniques(&u) })
}

// A query crosses the wire as an OpUniqueRead and reads back as it was.
func TestUniqueReadOpRoundTrip(t *testing.T) {
	for _, q := range []route.UniqueQuery{
		{Keys: []string{"k3"}},
		{Keys: []string{"k3", "v1004"}, ByRegion: true},
		{Keys: []string{"k3"}, Windowed: true, FromMs: -5, ToMs: 0},
		{Keys: []string{"k3"}, Windowed: true, FromMs: 1767222000000, ToMs: 1767229200000, ByRegion: true, Sketches: true},
		{Keys: []string{"k3"}, Sketches: true},
	} {
		req := route.Request{Kind: route.KindOps, Shard: shard.Of("k3"), Ops: []route.Op{route.UniqueReadOp(q)}}
		back, err := route.UnmarshalRequest(req.Marshal())
		if err != nil || len(back.Ops) != 1 || !back.Ops[0].Kind.Read() {
			t.Fatalf("%+v: %+v, %v", q, back, err)
		}
		got, err := route.UniqueQueryOf(&back.Ops[0], back.Shard)
		if err != nil || !reflect.DeepEqual(got, q) {
			t.Errorf("%+v read back as %+v, %v", q, got, err)
		}
	}
}

// What a holder refuses of an OpUniqueRead: no keys or too many, a key
// of another shard, options it does not know, twice or out of order, a
// range without the window option.
func TestUniqueQueryRefused(t *testing.T) {
	many := make([]string, region.MaxUniqueKeys+1)
	for i := range many {
		many[i] = "k3"
	}
	sh := shard.Of("k3")
	other := "k4"
	for shard.Of(other) == sh {
		other += "x"
	}
	for name, o := range map[string]route.Op{
		"no keys":            {Kind: route.OpUniqueRead},
		"too many keys":      {Kind: route.OpUniqueRead, List: many},
		"another shard":      {Kind: route.OpUniqueRead, List: []string{"k3", other}},
		"unknown option":     {Kind: route.OpUniqueRead, List: []string{"k3"}, User: "replica"},
		"option twice":       {Kind: route.OpUniqueRead, List: []string{"k3"}, User: "window,window"},
		"options reordered":  {Kind: route.OpUniqueRead, List: []string{"k3"}, User: "region,window"},
		"trailing comma":     {Kind: route.OpUniqueRead, List: []string{"k3"}, User: "window,"},
		"leading comma":      {Kind: route.OpUniqueRead, List: []string{"k3"}, User: ",region"},
		"range, no window":   {Kind: route.OpUniqueRead, List: []string{"k3"}, AtMs: 1, By: 2},
		"option of a prefix": {Kind: route.OpUniqueRead, List: []string{"k3"}, User: "windows"},
	} {
		if _, err := route.UniqueQueryOf(&o, sh); !errors.Is(err, region.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		} else if !strings.HasPrefix(err.Error(), "region: ") {
			t.Errorf("%s: %q does not read as a replica's error", name, err)
		}
	}
}

// CountUniques names each replica's region (unknown if unnamed), each
// region's estimate and each replica's sketch only when asked, and the
// range only when windowed.
func TestCountUniques(t *testing.T) {
	rd := region.UniqueRead{Estimate: 3.2, Sketch: sketchOf("a", "b", "c"),
		ByReplica: map[string]*crdt.HLL{"us-2": sketchOf("a", "b"), "eu-1": sketchOf("b", "c"), "us-1": sketchOf("c")},
		From:      time.Unix(100, 0), To: time.Unix(200, 0), SlotWidth: time.Minute, Closed: true}
	regions := map[string]string{"us-1": "us", "us-2": "us"}
	got := route.CountUniques(rd, route.UniqueQuery{Keys: []string{"k"}}, regions, true)
	want := route.Uniques{Estimate: 3.2, Replicas: []string{"eu-1", "us-1", "us-2"}, Regions: []string{"unknown", "us", "us"}, Stale: true}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("all time: %+v, want %+v", got, want)
	}
	got = route.CountUniques(rd, route.UniqueQuery{Keys: []string{"k"}, Windowed: true, ByRegion: true, Sketches: true}, regions, false)
	want = route.Uniques{Estimate: 3.2, Replicas: []string{"eu-1", "us-1", "us-2"}, Regions: []string{"unknown", "us", "us"},
		ByRegion: map[string]int64{"unknown": 2, "us": 3}, Sketches: []*crdt.HLL{rd.ByReplica["eu-1"], rd.ByReplica["us-1"], rd.ByReplica["us-2"]},
		Windowed: true, From: rd.From, To: rd.To, SlotWidth: time.Minute, Closed: true}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("windowed: %+v, want %+v", got, want)
	}
}
