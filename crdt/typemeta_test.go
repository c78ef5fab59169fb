package crdt

import (
	"bytes"
	"errors"
	"testing"
)

// The type of a key is the key itself, else its longest registered prefix
// ending at a ':' (with or without the ':'), never a prefix cut inside a
// word.
func TestTypeOf(t *testing.T) {
	reg := map[string]TypeMeta{"video": {Value: TypeInfo{Owner: "v"}}, "video:live:": {Value: TypeInfo{Owner: "live"}},
		"ad": {Value: TypeInfo{Owner: "ad"}}, "x:y": {Value: TypeInfo{Owner: "xy"}}}
	lookup := func(n string) (TypeMeta, bool) { m, ok := reg[n]; return m, ok }
	for key, want := range map[string]string{
		"video": "video", "video:1": "video", "video:live": "video", "video:live:3": "video:live:",
		"video:live:3:4": "video:live:", "videos": "", "vid": "", "ads:1": "", "ad:1": "ad", "x:y": "x:y", "x:y:z": "x:y",
		"x:z": "", ":": "",
	} {
		name, m, ok := TypeOf(key, lookup)
		if name != want || ok != (want != "") || ok && m != reg[want] {
			t.Errorf("TypeOf(%q) = %q %v, want %q", key, name, ok, want)
		}
	}
}

// The register: the larger stamp wins, ties by origin; Merge is
// commutative.
func TestTypeMetaMerge(t *testing.T) {
	a := TypeMeta{Value: TypeInfo{Owner: "a", Status: TypeActive}, HLC: MakeHLC(1000, 0), Origin: "r1"}
	b := TypeMeta{Value: TypeInfo{Owner: "b", Status: TypeInactive}, HLC: MakeHLC(1000, 0), Origin: "r2"}
	c := TypeMeta{Value: TypeInfo{Owner: "c", Status: TypeActive}, HLC: MakeHLC(999, 5), Origin: "r9"}
	for _, order := range [][]TypeMeta{{a, b, c}, {c, b, a}, {b, c, a}} {
		var m TypeMeta
		for _, o := range order {
			m.Merge(o)
		}
		if m != b {
			t.Fatalf("merged %v: %+v, want %+v", order, m, b)
		}
	}
	if !b.Value.Inactive() || a.Value.Inactive() || !(TypeMeta{}).IsZero() {
		t.Fatal("status")
	}
}

func FuzzDecodeTypeMeta(f *testing.F) {
	f.Add(AppendTypeMeta(nil, TypeMeta{Value: TypeInfo{Owner: "media", Status: TypeActive, Description: "views"}, HLC: MakeHLC(1700000000000, 3), Origin: "us-1"}))
	f.Add(AppendTypeMeta(nil, TypeMeta{Value: TypeInfo{Status: TypeInactive}, HLC: 1, Origin: "a"}))
	f.Add(AppendTypeMeta(nil, TypeMeta{Value: TypeInfo{Status: "paused"}, HLC: 1, Origin: "a"}))
	f.Add(AppendTypeMeta(nil, TypeMeta{Value: TypeInfo{Status: TypeActive, Owner: "\xff"}, HLC: 1, Origin: "a"}))
	f.Add([]byte{1, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 0x80, 0x00, 1, 'a', 0, 6, 'a', 'c', 't', 'i', 'v', 'e', 0}) // overlong
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeTypeMeta(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if m.HLC == 0 || !ValidID(m.Origin) || ValidTypeTexts(m.Value.Owner, m.Value.Status, m.Value.Description) != "" {
			t.Fatalf("decoded an invalid type: %+v", m)
		}
		re := AppendTypeMeta(nil, m)
		if !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical input % x: decodes to %+v, which encodes as % x", b, m, re)
		}
		if m2, err := DecodeTypeMeta(re); err != nil || m2 != m {
			t.Fatalf("round trip: %+v %v", m2, err)
		}
	})
}
