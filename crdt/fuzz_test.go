package crdt

import (
	"bytes"
	"errors"
	"testing"
)

// The decoders face bytes from other replicas and from disk. For any input
// they must not panic, must fail only with ErrCorrupt, and whatever they
// accept must be canonical: re-encoding gives back exactly the input (so
// digests over stored bytes agree with digests over values) and decoding
// again gives an equal value.

func FuzzDecodePN(f *testing.F) {
	rng := newRand(50)
	for range 16 {
		f.Add(AppendPN(nil, randPN(rng, true)))
	}
	f.Add([]byte{1, 0, 0})
	f.Add([]byte{1, 0x80, 0x00, 0}) // overlong
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodePN(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		re := AppendPN(nil, e)
		if !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical input % x: decodes to %+v, which encodes as % x", b, e, re)
		}
		if e2, err := DecodePN(re); err != nil || e2 != e {
			t.Fatalf("second decode: %+v, %v; first %+v", e2, err, e)
		}
	})
}

func FuzzDecodeVector(f *testing.F) {
	rng := newRand(51)
	for range 16 {
		f.Add(AppendVector(nil, randEncVector(rng)))
	}
	f.Add([]byte{1, 0})
	f.Add(AppendVector(nil, Vector{{"a", PN{P: 1}}, {"b", PN{N: 2}}}))
	f.Add([]byte{1, 2, 1, 'b', 1, 0, 1, 'a', 1, 0}) // unsorted
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := DecodeVector(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if err := checkVector(v); err != nil {
			t.Fatalf("decoded an invalid vector: %v", err)
		}
		for _, e := range v {
			if !ValidID(e.Replica) {
				t.Fatalf("decoded invalid replica id %q", e.Replica)
			}
		}
		re := AppendVector(nil, v)
		if !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical input % x: decodes to %v, which encodes as % x", b, v, re)
		}
		if v2, err := DecodeVector(re); err != nil || !v2.Equal(v) {
			t.Fatalf("second decode: %v, %v; first %v", v2, err, v)
		}
	})
}

func FuzzDecodeLikeRecord(f *testing.F) {
	rng := newRand(52)
	for range 16 {
		f.Add(AppendLikeRecord(nil, randEncRecord(rng)))
	}
	f.Add([]byte{1, 0, 0, 0, 0})
	f.Add(AppendLikeRecord(nil, &LikeRecord{Liked: true, HLC: MakeHLC(1700000000000, 3), Origin: "eu-1",
		Contrib: Vector{{"eu-1", PN{P: 1}}, {"us-1", PN{P: 1, N: 1}}}}))
	f.Add(AppendLikeRecord(nil, &LikeRecord{Liked: true, HLC: MakeHLC(1700000000000, 3), Origin: "eu-1", At: 1700000000500,
		Idem: "tap-1", Contrib: Vector{{"eu-1", PN{P: 1}}}}))
	f.Add(AppendKeyedRecord(nil, &KeyedRecord{HLC: MakeHLC(1700000000000, 3), Origin: "eu-1", Amount: -5,
		Contrib: Vector{{"eu-1", PN{N: 5}}}}))
	fuzzRegister(f, DecodeLikeRecord, AppendLikeRecord, (*LikeRecord).Equal, func(r *LikeRecord) (Vector, bool) {
		return r.Contrib, (r.Origin == "") != (r.HLC == 0) || r.Origin != "" && !ValidID(r.Origin) || r.Liked && r.HLC == 0 ||
			r.Idem != "" && (r.HLC == 0 || !ValidID(r.Idem))
	})
}

func FuzzDecodeKeyedRecord(f *testing.F) {
	rng := newRand(54)
	for range 16 {
		f.Add(AppendKeyedRecord(nil, randEncKeyed(rng)))
	}
	f.Add(AppendKeyedRecord(nil, &KeyedRecord{HLC: MakeHLC(1700000000000, 3), Origin: "eu-1", Amount: -5,
		Contrib: Vector{{"eu-1", PN{N: 5}}}}))
	f.Add(AppendKeyedRecord(nil, &KeyedRecord{Contrib: Vector{{"us-1", PN{P: 2}}}}))
	f.Add(AppendKeyedRecord(nil, &KeyedRecord{HLC: MakeHLC(1700000000000, 3), Origin: "eu-1", Amount: 0, Asked: 1}))
	f.Add(AppendKeyedRecord(nil, &KeyedRecord{HLC: MakeHLC(1700000000000, 4), Origin: "eu-2", Fenced: true, At: 1699999999000,
		Contrib: Vector{{"eu-1", PN{P: 5, N: 5}}}}))
	f.Add(AppendLikeRecord(nil, &LikeRecord{Liked: true, HLC: 5, Origin: "a"}))
	fuzzRegister(f, DecodeKeyedRecord, AppendKeyedRecord, (*KeyedRecord).Equal, func(r *KeyedRecord) (Vector, bool) {
		return r.Contrib, (r.Origin == "") != (r.HLC == 0) || r.Origin != "" && !ValidID(r.Origin) ||
			!r.Applied() && (r.Amount != 0 || r.Asked != 0 || r.At != 0) || r.Asked != 0 && r.Asked == r.Amount ||
			r.Fenced && (!r.Applied() || r.Amount != 0 || r.Asked != 0)
	})
}

// fuzzRegister fuzzes the decoder of one record kind: what it accepts has
// a valid contrib vector, is not inconsistent (bad reports its contrib and
// whether it is), encodes back to the input, and decodes again to itself;
// what it refuses is ErrCorrupt.
func fuzzRegister[R any](f *testing.F, decode func([]byte) (*R, error), encode func([]byte, *R) []byte,
	equal func(*R, *R) bool, bad func(*R) (Vector, bool)) {
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decode(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		contrib, inconsistent := bad(r)
		if err := checkVector(contrib); err != nil {
			t.Fatalf("decoded an invalid contrib: %v", err)
		}
		if inconsistent {
			t.Fatalf("decoded an inconsistent register: %+v", r)
		}
		re := encode(nil, r)
		if !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical input % x: decodes to %+v, which encodes as % x", b, r, re)
		}
		if r2, err := decode(re); err != nil || !equal(r2, r) {
			t.Fatalf("second decode: %+v, %v; first %+v", r2, err, r)
		}
	})
}

// FuzzDecodeRecord: a record of any kind, as replication decodes what a
// peer sends (spend: the name it came under is a spend's). The kind
// decoded is the one the bytes and the name say, and it encodes back to
// the input.
func FuzzDecodeRecord(f *testing.F) {
	rng := newRand(55)
	for range 8 {
		f.Add(AppendLikeRecord(nil, randEncRecord(rng)), false)
		f.Add(AppendKeyedRecord(nil, randEncKeyed(rng)), rng.IntN(2) == 0)
	}
	f.Fuzz(func(t *testing.T, b []byte, spend bool) {
		r, err := DecodeRecord(b, spend)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		keyed := b[1]&2 != 0
		switch r.(type) {
		case *LikeRecord:
			if keyed || spend {
				t.Fatalf("% x (spend %v) decoded to a like record", b, spend)
			}
		case *KeyedRecord:
			if !keyed || spend {
				t.Fatalf("% x (spend %v) decoded to a keyed record", b, spend)
			}
		case *Spend:
			if !keyed || !spend {
				t.Fatalf("% x (spend %v) decoded to a spend", b, spend)
			}
		default:
			t.Fatalf("decoded %T", r)
		}
		if re := AppendRecord(nil, r); !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical input % x: decodes to %+v, which encodes as % x", b, r, re)
		}
	})
}

// FuzzParseSlot: slot names come from peers (merges, anti-entropy
// pages). ParseSlot must not panic, and a name it accepts must be the
// canonical name of the slot it decodes to, with every field in range:
// one slot, one name, one vector.
func FuzzParseSlot(f *testing.F) {
	rng := newRand(53)
	for range 16 {
		f.Add(randSlot(rng).Name())
	}
	f.Add("post:1#60.000000003c.600")
	f.Add("#1.0000000000.0")
	f.Add("a#01.0000000000.0")
	f.Add("a#60.000000003C.0")
	f.Add("a#7.0000000001.0")
	f.Add("a#1.0000000000")
	f.Fuzz(func(t *testing.T, name string) {
		b, ok := ParseSlot(name)
		if !ok {
			if b != (Slot{}) {
				t.Fatalf("ParseSlot(%q) refused but returned %+v", name, b)
			}
			return
		}
		if re := b.Name(); re != name {
			t.Fatalf("ParseSlot(%q) = %+v, whose name is %q: accepted a non-canonical name", name, b, re)
		}
		if b.Key != "" && !ValidID(b.Key) || b.Width < 1 || b.Width > MaxSlotWidth || b.Start < 0 ||
			b.Start >= maxSlotStart || b.Start%b.Width != 0 || b.Keep < 0 || b.Keep > MaxSlotKeep {
			t.Fatalf("ParseSlot(%q) = %+v: field out of range", name, b)
		}
		if BaseKey(name) != b.Key || !IsSlotName(name) {
			t.Fatalf("ParseSlot(%q) = %+v but BaseKey %q", name, b, BaseKey(name))
		}
	})
}
