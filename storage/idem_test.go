package storage

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/tally-dev/tally/crdt"
)

var idemSamples = []IdemValue{
	{HasBy: true},
	{Value: 1, AtMs: 1, By: 1, HasBy: true},
	{Value: -1, AtMs: -1, By: -1, HasBy: true},
	{Value: 42, AtMs: 1_700_000_000_000, By: 5, HasBy: true},
	{Value: -42, AtMs: 1_700_000_000_000, By: -42, HasBy: true},
	{Value: 63, AtMs: 64, By: 1 << 40, HasBy: true},
	{Value: -64, AtMs: -65, By: -(1 << 40), HasBy: true},
	{Value: math.MaxInt64, AtMs: math.MinInt64, By: math.MaxInt64, HasBy: true},
	{Value: math.MinInt64, AtMs: math.MaxInt64, By: math.MinInt64, HasBy: true},
}

func TestIdemValueRoundTrip(t *testing.T) {
	for _, v := range idemSamples {
		b := AppendIdemValue(nil, v)
		if b[0] != 2 {
			t.Errorf("%+v: version byte %d", v, b[0])
		}
		got, err := DecodeIdemValue(b)
		if err != nil || got != v {
			t.Errorf("DecodeIdemValue(AppendIdemValue(%+v)) = %+v, %v", v, got, err)
		}
		// Append appends: a prefix is kept.
		pre := []byte("xyz")
		b2 := AppendIdemValue(pre, v)
		if !bytes.Equal(b2[:3], []byte("xyz")) || !bytes.Equal(b2[3:], b) {
			t.Errorf("AppendIdemValue with prefix = %x", b2)
		}
	}
}

func TestIdemValueEncoding(t *testing.T) {
	// Pin the format: it is on disk.
	for _, tc := range []struct {
		v    IdemValue
		want []byte
	}{
		{IdemValue{HasBy: true}, []byte{2, 0, 0, 0}},
		{IdemValue{Value: 1, AtMs: -1, By: 1, HasBy: true}, []byte{2, 2, 1, 2}},
		{IdemValue{Value: 64, AtMs: -65, By: -1, HasBy: true}, []byte{2, 0x80, 0x01, 0x81, 0x01, 1}},
	} {
		if got := AppendIdemValue(nil, tc.v); !bytes.Equal(got, tc.want) {
			t.Errorf("AppendIdemValue(%+v) = %x, want %x", tc.v, got, tc.want)
		}
	}
	// Version 1, written before the amount was stored, still decodes:
	// without an amount to compare a retry against.
	for _, tc := range []struct {
		b    []byte
		want IdemValue
	}{
		{[]byte{1, 0, 0}, IdemValue{}},
		{[]byte{1, 2, 1}, IdemValue{Value: 1, AtMs: -1}},
		{[]byte{1, 0x80, 0x01, 0x81, 0x01}, IdemValue{Value: 64, AtMs: -65}},
	} {
		if got, err := DecodeIdemValue(tc.b); err != nil || got != tc.want {
			t.Errorf("DecodeIdemValue(%x) = %+v, %v; want %+v", tc.b, got, err, tc.want)
		}
	}
}

func TestDecodeIdemValueRejects(t *testing.T) {
	good := AppendIdemValue(nil, IdemValue{Value: 300, AtMs: 1_700_000_000_000})
	cases := map[string][]byte{
		"nil":             nil,
		"empty":           {},
		"version 0":       {0, 0, 0},
		"version 3":       {3, 0, 0, 0},
		"no amount":       {2, 0, 0},
		"version only":    {1},
		"no time":         {1, 0},
		"truncated value": {1, 0x80},
		"truncated time":  good[:len(good)-1],
		"trailing byte":   append(append([]byte(nil), good...), 0),
		"overlong value":  {1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0},
		"11-byte varint":  {1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00, 0},
		// Non-minimal varints: they decode to 0 under encoding/binary, but
		// AppendIdemValue never writes them, so a value would have two
		// encodings.
		"padded value": {1, 0x80, 0x00, 0},
		"padded time":  {1, 0, 0x81, 0x80, 0x00},
	}
	for name, b := range cases {
		v, err := DecodeIdemValue(b)
		if err == nil {
			t.Errorf("%s: DecodeIdemValue(%x) = %+v, want error", name, b, v)
			continue
		}
		if !errors.Is(err, crdt.ErrCorrupt) {
			t.Errorf("%s: error %v does not wrap crdt.ErrCorrupt", name, err)
		}
		if v != (IdemValue{}) {
			t.Errorf("%s: returned %+v with the error", name, v)
		}
	}
}

func FuzzDecodeIdemValue(f *testing.F) {
	for _, v := range idemSamples {
		f.Add(AppendIdemValue(nil, v))
	}
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte{1, 0x80, 0x00, 0})
	f.Add([]byte{2, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := DecodeIdemValue(b)
		if err != nil {
			if !errors.Is(err, crdt.ErrCorrupt) {
				t.Fatalf("DecodeIdemValue(%x): error %v does not wrap ErrCorrupt", b, err)
			}
			return
		}
		enc := AppendIdemValue(nil, v)
		if b[0] == 2 && !bytes.Equal(enc, b) {
			t.Fatalf("DecodeIdemValue(%x) = %+v, which encodes as %x", b, v, enc)
		}
		// A version-1 value comes back as version 2 with the same answer.
		if again, err := DecodeIdemValue(enc); err != nil || again.Value != v.Value || again.AtMs != v.AtMs {
			t.Fatalf("re-encoding %+v gave %+v, %v", v, again, err)
		}
	})
}

func FuzzIdemValueRoundTrip(f *testing.F) {
	for _, v := range idemSamples {
		f.Add(v.Value, v.AtMs, v.By)
	}
	f.Fuzz(func(t *testing.T, value, atMs, by int64) {
		v := IdemValue{Value: value, AtMs: atMs, By: by, HasBy: true}
		got, err := DecodeIdemValue(AppendIdemValue(nil, v))
		if err != nil || got != v {
			t.Fatalf("round trip of %+v = %+v, %v", v, got, err)
		}
	})
}

// ScanIdempotency pages through every stored key exactly once, in key
// order, whatever the page size, and skips other kinds of keys; a deleted
// key is gone from the scan and from Idempotency.
func TestScanIdempotencyPages(t *testing.T) {
	s := openTest(t, Config{Dir: t.TempDir()})
	defer s.Close()
	var want []string
	commit(t, s, func(b *Batch) {
		for i := range 25 {
			key, idem := fmt.Sprintf("views:%d", i%3), fmt.Sprintf("req-%02d", i)
			b.PutIdempotency(key, idem, IdemValue{Value: int64(i), AtMs: int64(1000 + i)})
			want = append(want, fmt.Sprintf("%s/%s=%d@%d", key, idem, i, 1000+i))
		}
		b.PutMeta("hlc", []byte("x")) // 'm' sorts after 'i': must not be visited
		b.PutLikeRecord("post", "u1", nil, sampleRecord())
	})
	slices.Sort(want)
	for _, limit := range []int{1, 2, 7, 25, 26, 100} {
		var got []string
		var cursor []byte
		pages := 0
		for {
			next, err := s.ScanIdempotency(cursor, limit, func(e IdemEntry) error {
				got = append(got, fmt.Sprintf("%s/%s=%d@%d", e.Key, e.Idem, e.Value, e.AtMs))
				return nil
			})
			if err != nil {
				t.Fatalf("limit %d: %v", limit, err)
			}
			pages++
			if next == nil {
				break
			}
			if pages > 30 {
				t.Fatalf("limit %d: scan does not end", limit)
			}
			cursor = next
		}
		if !slices.Equal(got, want) {
			t.Errorf("limit %d: visited\n%v\nwant\n%v", limit, got, want)
		}
	}

	stop := errors.New("stop")
	if _, err := s.ScanIdempotency(nil, 100, func(IdemEntry) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("visitor error: %v", err)
	}
	s.Close()
	if _, err := s.ScanIdempotency(nil, 1, func(IdemEntry) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("closed store: %v", err)
	}
}
