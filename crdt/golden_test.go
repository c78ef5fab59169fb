package crdt

import (
	"bytes"
	"fmt"
	"testing"
)

// Encodings written by earlier versions, captured byte for byte: data
// directories and peers of a mixed-version cluster hold exactly these, so
// each must still decode to its kind of record and encode back unchanged.
var goldenRecords = []struct {
	name string
	b    []byte
	want Record
}{
	{"like", []byte{0x1, 0x5, 0x83, 0x80, 0x80, 0xc0, 0xd6, 0xfc, 0xf3, 0xc5, 0x1, 0x4, 0x65, 0x75, 0x2d, 0x31, 0x98, 0xc8, 0x95,
		0xff, 0xbc, 0x31, 0x2, 0x4, 0x65, 0x75, 0x2d, 0x31, 0x1, 0x0, 0x4, 0x75, 0x73, 0x2d, 0x31, 0x1, 0x1},
		&LikeRecord{Liked: true, HLC: MakeHLC(1700000000000, 3), Origin: "eu-1", At: 1699999999000,
			Contrib: Vector{{"eu-1", PN{P: 1}}, {"us-1", PN{P: 1, N: 1}}}}},
	// Since toggles: flag bit 4, a toggle's idempotency key in the
	// register (an unlike stamped by its client's time here).
	{"like toggled", []byte{0x1, 0x14, 0x83, 0x80, 0x80, 0xc0, 0xd6, 0xfc, 0xf3, 0xc5, 0x1, 0x4, 0x75, 0x73, 0x2d, 0x31, 0x98, 0xc8,
		0x95, 0xff, 0xbc, 0x31, 0x5, 0x74, 0x61, 0x70, 0x2d, 0x37, 0x2, 0x4, 0x65, 0x75, 0x2d, 0x31, 0x1, 0x0, 0x4, 0x75, 0x73, 0x2d,
		0x31, 0x0, 0x1},
		&LikeRecord{HLC: MakeHLC(1700000000000, 3), Origin: "us-1", At: 1699999999000, Idem: "tap-7",
			Contrib: Vector{{"eu-1", PN{P: 1}}, {"us-1", PN{N: 1}}}}},
	{"like portion", []byte{0x1, 0x0, 0x0, 0x0, 0x1, 0x4, 0x75, 0x73, 0x2d, 0x31, 0x1, 0x0},
		&LikeRecord{Contrib: Vector{{"us-1", PN{P: 1}}}}},
	{"keyed", []byte{0x1, 0xf, 0x83, 0x80, 0x80, 0xc0, 0xd6, 0xfc, 0xf3, 0xc5, 0x1, 0x4, 0x75, 0x73, 0x2d, 0x31, 0x80, 0x1, 0x98,
		0xc8, 0x95, 0xff, 0xbc, 0x31, 0x2, 0x2, 0x4, 0x65, 0x75, 0x2d, 0x31, 0x40, 0x40, 0x4, 0x75, 0x73, 0x2d, 0x31, 0x40, 0x0},
		&KeyedRecord{HLC: MakeHLC(1700000000000, 3), Origin: "us-1", Amount: 64, Asked: 1, At: 1699999999000,
			Contrib: Vector{{"eu-1", PN{P: 64, N: 64}}, {"us-1", PN{P: 64}}}}},
	{"keyed portion", []byte{0x1, 0x2, 0x0, 0x0, 0x1, 0x4, 0x65, 0x75, 0x2d, 0x31, 0x2, 0x0},
		&KeyedRecord{Contrib: Vector{{"eu-1", PN{P: 2}}}}},
	{"spend", []byte{0x1, 0x3, 0x83, 0x80, 0x80, 0xc0, 0xd6, 0xfc, 0xf3, 0xc5, 0x1, 0x4, 0x65, 0x75, 0x2d, 0x31, 0x9, 0x2, 0x4,
		0x65, 0x75, 0x2d, 0x31, 0x0, 0x5, 0x4, 0x75, 0x73, 0x2d, 0x31, 0x5, 0x5},
		&Spend{HLC: MakeHLC(1700000000000, 3), Origin: "eu-1", Amount: -5,
			Contrib: Vector{{"eu-1", PN{N: 5}}, {"us-1", PN{P: 5, N: 5}}}}},
}

func TestGoldenRecords(t *testing.T) {
	for _, g := range goldenRecords {
		var (
			got Record
			re  []byte
			err error
		)
		// Each kind's own decoder and encoder, and the ones that take any.
		switch want := g.want.(type) {
		case *LikeRecord:
			var r *LikeRecord
			if r, err = DecodeLikeRecord(g.b); err == nil && !r.Equal(want) {
				t.Errorf("%s: decoded %+v, want %+v", g.name, r, want)
			}
			got, re = r, AppendLikeRecord(nil, r)
		case *KeyedRecord:
			var r *KeyedRecord
			if r, err = DecodeKeyedRecord(g.b); err == nil && !r.Equal(want) {
				t.Errorf("%s: decoded %+v, want %+v", g.name, r, want)
			}
			got, re = r, AppendKeyedRecord(nil, r)
		case *Spend:
			var r *Spend
			if r, err = DecodeSpend(g.b); err == nil && !r.Equal(want) {
				t.Errorf("%s: decoded %+v, want %+v", g.name, r, want)
			}
			got, re = r, AppendSpend(nil, r)
		}
		if err != nil {
			t.Fatalf("%s: %v", g.name, err)
		}
		if !bytes.Equal(re, g.b) {
			t.Errorf("%s: re-encoded % x, want % x", g.name, re, g.b)
		}
		_, spend := g.want.(*Spend)
		anyKind, err := DecodeRecord(g.b, spend)
		if err != nil || fmt.Sprintf("%T %+v", anyKind, anyKind) != fmt.Sprintf("%T %+v", got, got) {
			t.Errorf("%s: DecodeRecord gave %T %+v, %v; want %T %+v", g.name, anyKind, anyKind, err, got, got)
		}
		if re := AppendRecord(nil, anyKind); !bytes.Equal(re, g.b) {
			t.Errorf("%s: AppendRecord gave % x, want % x", g.name, re, g.b)
		}
	}
}

// The two admin-written registers, byte for byte as earlier versions wrote
// them: a block flag (value before the stamp, the zero flag allowed) and
// an event type's metadata (value after the stamp).
var goldenFlags = []struct {
	b    []byte
	want Flag
}{
	{[]byte{0x1, 0x1, 0x83, 0x80, 0x80, 0xc0, 0xd6, 0xfc, 0xf3, 0xc5, 0x1, 0x4, 0x65, 0x75, 0x2d, 0x31},
		Flag{Value: Block{Blocked: true}, HLC: MakeHLC(1700000000000, 3), Origin: "eu-1"}},
	{[]byte{0x1, 0x0, 0x84, 0x80, 0x80, 0xc0, 0xd6, 0xfc, 0xf3, 0xc5, 0x1, 0x4, 0x75, 0x73, 0x2d, 0x31},
		Flag{HLC: MakeHLC(1700000000000, 4), Origin: "us-1"}},
	{[]byte{0x1, 0x0, 0x0, 0x0}, Flag{}},
}

var goldenTypeMeta = []struct {
	b    []byte
	want TypeMeta
}{
	{[]byte{0x1, 0x83, 0x80, 0x80, 0xc0, 0xd6, 0xfc, 0xf3, 0xc5, 0x1, 0x4, 0x65, 0x75, 0x2d, 0x31, 0x5, 0x6d, 0x65, 0x64, 0x69,
		0x61, 0x8, 0x69, 0x6e, 0x61, 0x63, 0x74, 0x69, 0x76, 0x65, 0xb, 0x76, 0x69, 0x64, 0x65, 0x6f, 0x20, 0x76, 0x69, 0x65, 0x77, 0x73},
		TypeMeta{Value: TypeInfo{Owner: "media", Status: TypeInactive, Description: "video views"}, HLC: MakeHLC(1700000000000, 3), Origin: "eu-1"}},
}

func TestGoldenRegisters(t *testing.T) {
	for _, g := range goldenFlags {
		if got, err := DecodeFlag(g.b); err != nil || got != g.want {
			t.Errorf("DecodeFlag(% x) = %+v, %v; want %+v", g.b, got, err, g.want)
		}
		if re := AppendFlag(nil, g.want); !bytes.Equal(re, g.b) {
			t.Errorf("AppendFlag(%+v) = % x, want % x", g.want, re, g.b)
		}
	}
	for _, g := range goldenTypeMeta {
		if got, err := DecodeTypeMeta(g.b); err != nil || got != g.want {
			t.Errorf("DecodeTypeMeta(% x) = %+v, %v; want %+v", g.b, got, err, g.want)
		}
		if re := AppendTypeMeta(nil, g.want); !bytes.Equal(re, g.b) {
			t.Errorf("AppendTypeMeta(%+v) = % x, want % x", g.want, re, g.b)
		}
		if re := AppendRecord(nil, &g.want); !bytes.Equal(re, g.b) {
			t.Errorf("AppendRecord(%+v) = % x, want % x", g.want, re, g.b)
		}
	}
}
