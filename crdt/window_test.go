package crdt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// randSlot draws a valid slot: any key (or the family total ""), any
// width, a start that is a multiple of it and fits 10 hex digits, any keep
// (zero, forever, included).
func randSlot(rng *rand.Rand) Slot {
	b := Slot{}
	if rng.IntN(5) != 0 {
		b.Key = randID(rng, []int{8, MaxIDLen}[rng.IntN(2)])
	}
	switch rng.IntN(4) {
	case 0:
		b.Width = []int64{1, 60, 3600, 86400}[rng.IntN(4)]
	case 1:
		b.Width = MaxSlotWidth - int64(rng.IntN(2))
	default:
		b.Width = 1 + rng.Int64N(MaxSlotWidth)
	}
	n := (maxSlotStart - 1) / b.Width // starts 0, w, ..., n*w all fit
	switch rng.IntN(4) {
	case 0:
		b.Start = 0
	case 1:
		b.Start = n * b.Width
	default:
		b.Start = rng.Int64N(n+1) * b.Width
	}
	switch rng.IntN(4) {
	case 0:
		b.Keep = 0
	case 1:
		b.Keep = MaxSlotKeep - int64(rng.IntN(2))
	default:
		b.Keep = rng.Int64N(MaxSlotKeep + 1)
	}
	return b
}

func TestSlotNameRoundTrip(t *testing.T) {
	rng := newRand(70)
	for i := range 20000 {
		b := randSlot(rng)
		name := b.Name()
		if got := string(b.AppendName([]byte("pre"))); got != "pre"+name {
			t.Fatalf("#%d AppendName = %q, want %q", i, got, "pre"+name)
		}
		got, ok := ParseSlot(name)
		if !ok || got != b {
			t.Fatalf("#%d ParseSlot(%q) = %+v, %v; want %+v", i, name, got, ok, b)
		}
		if !IsSlotName(name) || BaseKey(name) != b.Key {
			t.Fatalf("#%d %q: IsSlotName %v, BaseKey %q; want true, %q", i, name, IsSlotName(name), BaseKey(name), b.Key)
		}
		// The name is the series prefix, the start, '.', the keep.
		want := SeriesPrefix(b.Key, b.Width) + StartName(b.Start) + "." + fmt.Sprint(b.Keep)
		if name != want {
			t.Fatalf("#%d Name = %q, want %q", i, name, want)
		}
		if len(StartName(b.Start)) != 10 {
			t.Fatalf("#%d StartName(%d) = %q: not 10 digits", i, b.Start, StartName(b.Start))
		}
	}
}

// The names of one (key, width) sort by start, and no other series's name
// falls between two of them: a key that is a prefix of another, or a width
// that is a prefix of another, sorts outside the range.
func TestSlotNamesSortByStart(t *testing.T) {
	rng := newRand(71)
	for i := range 5000 {
		a, b := randSlot(rng), randSlot(rng)
		b.Key, b.Width = a.Key, a.Width
		b.Start = rng.Int64N((maxSlotStart-1)/a.Width+1) * a.Width
		if (a.Start < b.Start) != (a.Name() < b.Name()) && a.Start != b.Start {
			t.Fatalf("#%d start %d < %d but names %q, %q sort the other way", i, a.Start, b.Start, a.Name(), b.Name())
		}
		lo, hi := SeriesPrefix(a.Key, a.Width)+StartName(0), SeriesPrefix(a.Key, a.Width)+StartName(maxSlotStart-1)+"/"
		if n := a.Name(); n < lo || n >= hi {
			t.Fatalf("#%d %q outside its series range [%q, %q)", i, n, lo, hi)
		}
		for _, o := range []Slot{
			{Key: a.Key + ":x", Width: a.Width, Start: a.Start, Keep: a.Keep},
			{Key: a.Key, Width: a.Width * 10, Start: a.Start * 10, Keep: a.Keep},
		} {
			if o.Width > MaxSlotWidth || o.Start >= maxSlotStart || len(o.Key) > MaxIDLen {
				continue
			}
			if n := o.Name(); n >= lo && n < hi {
				t.Fatalf("#%d %q of another series sorts inside [%q, %q)", i, n, lo, hi)
			}
		}
	}
}

func TestParseSlotRejects(t *testing.T) {
	long := strings.Repeat("k", MaxIDLen+1)
	for _, name := range []string{
		"",
		"#",
		"a",
		"a#",
		"a#1",
		"a#1.",
		"a#1.0000000000",
		"a#1.0000000000.",
		"a#.0000000000.0",
		"a#1..0",
		"a#1.0000000000.0.",
		"a#1.0000000000.0.0",
		"a#1.0000000000.0/x",
		"a.0000000000.0",          // no '#'
		"a#b#1.0000000000.0",      // a second '#'
		"a#01.0000000000.0",       // leading zero in width
		"a#00.0000000000.0",       // leading zero in width
		"a#60.0000000000.0600",    // leading zero in keep
		"a#60.0000000000.00",      // leading zero in keep
		"a#0.0000000000.0",        // width 0
		"a#60.000000003C.0",       // uppercase hex
		"a#1.ABCDEF0000.0",        // uppercase hex
		"a#60.000000003c0.0",      // 11 hex digits
		"a#60.00000003c.0",        // 9 hex digits
		"a#60.0x0000003c.0",       // hex prefix
		"a#60.00000_003c.0",       // underscore
		"a#60.000000003g.0",       // not hex
		"a#60.000000001e.0",       // start 30 is not a multiple of 60
		"a#7.0000000001.0",        // 1 is not a multiple of 7
		"a#16777217.0000000000.0", // width past MaxSlotWidth
		"a#99999999999.0000000000.0",
		"a#1.0000000000.4294967297", // keep past MaxSlotKeep
		"a#1.0000000000.99999999999",
		"a#1.0000000000.x",
		"a#x.0000000000.0",
		"a#1.0000000000. 0",
		"a b#1.0000000000.0", // bad key chars
		"a/b#1.0000000000.0",
		"a\x00#1.0000000000.0",
		"é#1.0000000000.0",
		long + "#1.0000000000.0", // key too long
	} {
		if b, ok := ParseSlot(name); ok {
			t.Errorf("ParseSlot(%q) = %+v, true; want rejected", name, b)
		}
	}
	// The limits themselves are accepted.
	for _, b := range []Slot{
		{Key: "a", Width: MaxSlotWidth, Start: 0, Keep: MaxSlotKeep},
		{Key: strings.Repeat("k", MaxIDLen), Width: 1, Start: maxSlotStart - 1, Keep: 0},
		{Key: "", Width: 60, Start: 60 * ((maxSlotStart - 1) / 60), Keep: 1},
	} {
		if got, ok := ParseSlot(b.Name()); !ok || got != b {
			t.Errorf("ParseSlot(%q) = %+v, %v; want %+v", b.Name(), got, ok, b)
		}
	}
}

// One slot has exactly one name: a sign on width or keep is not
// canonical (Name never writes one), so ParseSlot must refuse it, or
// "k#+60.….+600" and "k#60.….600" would be two vectors of one slot.
func TestParseSlotRejectsSigns(t *testing.T) {
	for _, name := range []string{
		"a#+1.0000000000.0",
		"a#-1.0000000000.0",
		"a#+60.000000003c.600",
		"a#1.0000000000.+600",
		"a#1.0000000000.+0",
		"a#1.0000000000.-0",
		"a#+0.0000000000.0",
	} {
		if b, ok := ParseSlot(name); ok {
			t.Errorf("ParseSlot(%q) = %+v, true (Name %q); want rejected: not canonical", name, b, b.Name())
		}
	}
}

func TestSlotStart(t *testing.T) {
	cases := []struct{ ms, width, want int64 }{
		{0, 1, 0},
		{999, 1, 0},
		{1000, 1, 1},
		{1999, 60, 0},
		{59_999, 60, 0},
		{60_000, 60, 60},
		{1_700_000_000_123, 1, 1_700_000_000},
		{1_700_000_000_123, 60, 1_699_999_980},
		{1_700_000_000_123, 3600, 1_699_999_200},
		{-1, 1, -1},
		{-1000, 1, -1},
		{-1001, 1, -2},
		{-1, 60, -60},
		{-60_000, 60, -60},
		{-60_001, 60, -120},
		{-3_600_000, 3600, -3600},
	}
	for _, c := range cases {
		if got := SlotStart(c.ms, c.width); got != c.want {
			t.Errorf("SlotStart(%d, %d) = %d, want %d", c.ms, c.width, got, c.want)
		}
	}
	// Property: the start is a multiple of width and the slot holds ms.
	rng := newRand(72)
	for range 20000 {
		ms := rng.Int64N(1<<44) - 1<<43
		w := []int64{1, 7, 60, 3600, 86400, 1 + rng.Int64N(MaxSlotWidth)}[rng.IntN(6)]
		s := SlotStart(ms, w)
		if s%w != 0 || s*1000 > ms || ms >= (s+w)*1000 {
			t.Fatalf("SlotStart(%d, %d) = %d: not the start of the slot holding it", ms, w, s)
		}
	}
}

func TestSlotExpired(t *testing.T) {
	b := Slot{Key: "k", Width: 60, Start: 1_700_000_040, Keep: 600}
	exp := (b.Start+b.Width+b.Keep)*1000 + ExpiryGraceMs
	if got := b.ExpiresMs(); got != exp {
		t.Fatalf("ExpiresMs = %d, want %d", got, exp)
	}
	if b.Expired(exp - 1) {
		t.Fatal("expired 1 ms before ExpiresMs")
	}
	if !b.Expired(exp) || !b.Expired(exp+1) {
		t.Fatal("not expired at or after ExpiresMs")
	}
	if b.Expired(b.Start * 1000) {
		t.Fatal("expired at its own start")
	}
	forever := b
	forever.Keep = 0
	if forever.ExpiresMs() != 0 {
		t.Fatalf("keep 0: ExpiresMs = %d, want 0", forever.ExpiresMs())
	}
	for _, now := range []int64{0, exp, 1 << 62} {
		if forever.Expired(now) {
			t.Fatalf("keep 0 expired at %d", now)
		}
	}
	// Property over random slots: Expired is exactly "now >= ExpiresMs".
	rng := newRand(73)
	for range 5000 {
		b := randSlot(rng)
		e := b.ExpiresMs()
		if b.Keep == 0 {
			continue
		}
		if e <= (b.Start+b.Width)*1000 || b.Expired(e-1) || !b.Expired(e) {
			t.Fatalf("%+v: ExpiresMs %d, Expired(e-1)=%v Expired(e)=%v", b, e, b.Expired(e-1), b.Expired(e))
		}
	}
}

func TestBaseKeyAndIsSlotName(t *testing.T) {
	for _, c := range []struct {
		name, base string
		slot       bool
	}{
		{"post:1", "post:1", false},
		{"post:1#60.000000003c.600", "post:1", true},
		{"#60.000000003c.600", "", true},
		{"", "", false},
	} {
		if got := BaseKey(c.name); got != c.base {
			t.Errorf("BaseKey(%q) = %q, want %q", c.name, got, c.base)
		}
		if got := IsSlotName(c.name); got != c.slot {
			t.Errorf("IsSlotName(%q) = %v, want %v", c.name, got, c.slot)
		}
	}
}

// At is a register field: it encodes with the register, is left out of a
// record with no register, and moves with the winning register on merge.
func TestLikeRecordAt(t *testing.T) {
	rec := &LikeRecord{Liked: true, HLC: MakeHLC(1_700_000_000_500, 1), Origin: "eu-1", At: 1_700_000_000_123,
		Contrib: Vector{{"eu-1", PN{P: 1}}}}
	enc := AppendLikeRecord(nil, rec)
	want := cat(1, 1|4, uv(uint64(rec.HLC)), "eu-1", uv(uint64(rec.At)), 1, "eu-1", 1, 0)
	if !bytes.Equal(enc, want) {
		t.Fatalf("encoding % x, want % x", enc, want)
	}
	got, err := DecodeLikeRecord(enc)
	if err != nil || !got.Equal(rec) || got.At != rec.At {
		t.Fatalf("decode: %+v, %v; want %+v", got, err, rec)
	}
	if rec.BookedMs() != rec.At {
		t.Fatalf("BookedMs = %d, want At %d", rec.BookedMs(), rec.At)
	}
	// Without At the flag is off and the record books at its stamp.
	noAt := rec.Clone()
	noAt.At = 0
	if enc := AppendLikeRecord(nil, noAt); enc[1]&4 != 0 {
		t.Fatalf("flags %#x: at bit set without At", enc[1])
	}
	if noAt.BookedMs() != 1_700_000_000_500 {
		t.Fatalf("BookedMs without At = %d, want the stamp's wall time", noAt.BookedMs())
	}
	// A keyed record carries amount, then at.
	keyed := &KeyedRecord{}
	keyed.Apply("us-1", -3, MakeHLC(1_700_000_001_000, 0))
	keyed.At = 1_700_000_000_999
	kenc := AppendKeyedRecord(nil, keyed)
	if want := cat(1, 1|2|4, uv(uint64(keyed.HLC)), "us-1", binary.AppendVarint(nil, -3), uv(uint64(keyed.At)), 1, "us-1", 0, 3); !bytes.Equal(kenc, want) {
		t.Fatalf("keyed encoding % x, want % x", kenc, want)
	}
	if got, err := DecodeKeyedRecord(kenc); err != nil || !got.Equal(keyed) {
		t.Fatalf("keyed decode: %+v, %v", got, err)
	}

	// Decoding refuses an at bit with no register, a zero at, and an at
	// past 2^47 ms.
	for _, b := range [][]byte{
		cat(1, 4, 0, 0, 0),
		cat(1, 4, 0, 0, uv(5), 0),
		cat(1, 1|4, uv(uint64(rec.HLC)), "eu-1", uv(0), 0),
		cat(1, 1|4, uv(uint64(rec.HLC)), "eu-1", uv(1<<47+1), 0),
		cat(1, 1|8, uv(uint64(rec.HLC)), "eu-1", 0), // unknown flag
	} {
		if r, err := DecodeLikeRecord(b); err == nil || !errors.Is(err, ErrCorrupt) {
			t.Errorf("DecodeLikeRecord(% x) = %+v, %v; want ErrCorrupt", b, r, err)
		}
	}

	// Random records with At round-trip exactly.
	rng := newRand(74)
	for i := range 3000 {
		r := randEncRecord(rng)
		if r.HLC != 0 && rng.IntN(2) == 0 {
			r.At = 1 + rng.Int64N(1<<47)
		}
		b := AppendLikeRecord(nil, r)
		got, err := DecodeLikeRecord(b)
		if err != nil || !got.Equal(r) {
			t.Fatalf("#%d round trip of %+v: %+v, %v", i, r, got, err)
		}
		if re := AppendLikeRecord(nil, got); !bytes.Equal(re, b) {
			t.Fatalf("#%d re-encoding differs", i)
		}
	}
}

func TestLikeRecordAtMerges(t *testing.T) {
	// loser: an older like with a client time; winner: a later unlike
	// without one. The merge takes the winner's At (zero), not a max.
	loser := &LikeRecord{Liked: true, HLC: MakeHLC(100, 0), Origin: "a", At: 90, Contrib: Vector{{"a", PN{P: 1}}}}
	winner := &LikeRecord{Liked: false, HLC: MakeHLC(200, 0), Origin: "b", At: 0, Contrib: Vector{{"b", PN{N: 1}}}}
	for _, order := range [][2]*LikeRecord{{loser, winner}, {winner, loser}} {
		m := order[0].Clone()
		m.Merge(order[1])
		if m.At != 0 || m.HLC != winner.HLC || m.Origin != "b" || m.BookedMs() != 200 {
			t.Fatalf("merge of %+v and %+v = %+v: At must travel with the winning register", order[0], order[1], m)
		}
	}
	winner.At = 150
	for _, order := range [][2]*LikeRecord{{loser, winner}, {winner, loser}} {
		m := order[0].Clone()
		m.Merge(order[1])
		if m.At != 150 || m.BookedMs() != 150 {
			t.Fatalf("merge = %+v, want At 150 from the winner", m)
		}
	}
	// A later write with an earlier client time loses: the client's time
	// orders the register (Wins), whatever the HLC says.
	early := &LikeRecord{Liked: true, HLC: MakeHLC(300, 0), Origin: "c", At: 10}
	m := loser.Clone()
	if m.Merge(early) || m.At != 90 || m.Origin != "a" {
		t.Fatalf("merge = %+v, want a's register with At 90", m)
	}
	if m = early.Clone(); !m.Merge(loser) || m.At != 90 || m.Origin != "a" {
		t.Fatalf("merge = %+v, want a's register with At 90", m)
	}
	// A register differing only in At is another write, and Merge says so.
	same := loser.Clone()
	same.At = 91
	m = loser.Clone()
	if !m.Merge(same) || m.At != 91 {
		t.Fatalf("merge of a register with a larger At: %+v", m)
	}
	// Apply and KeyedRecord.Apply start a fresh register: At back to zero.
	r := loser.Clone()
	r.Apply("a", false, MakeHLC(400, 0))
	if r.At != 0 {
		t.Fatalf("Apply kept the old At %d", r.At)
	}
	// Portion carries At only with the register; Restrict likewise.
	full := &LikeRecord{Liked: true, HLC: 7, Origin: "b", At: 5, Contrib: Vector{{"a", PN{P: 1}}, {"b", PN{P: 1}}}}
	if p := full.Portion("b"); p.At != 5 {
		t.Fatalf("origin portion lost At: %+v", p)
	}
	if p := full.Portion("a"); p.At != 0 {
		t.Fatalf("non-origin portion carries At: %+v", p)
	}
	if p, _ := full.Restrict(func(id string) bool { return id != "b" }); p.At != 0 {
		t.Fatalf("restricted without the origin, At stays: %+v", p)
	}
	if p, _ := full.Restrict(func(string) bool { return true }); p.At != 5 {
		t.Fatalf("restricted to all, At lost: %+v", p)
	}
}
