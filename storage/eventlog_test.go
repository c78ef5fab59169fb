package storage

import (
	"bytes"
	"errors"
	"testing"

	"github.com/tally-dev/tally/crdt"
)

var eventSamples = []Event{
	{Type: EventLike, Kind: Likes, Key: "post1", User: "alice", P: 1, Count: 1, HLC: crdt.MakeHLC(1_700_000_000_000, 3)},
	{Type: EventUnlike, Kind: Likes, Key: "post1", User: "alice", N: 1, Count: 1, HLC: 7},
	{Type: EventIncr, Kind: Counters, Key: "views", By: -1 << 40, N: 1 << 40, Count: 1, Idem: "req-1", HLC: 8},
	{Type: EventIncr, Kind: Counters, Key: "views", By: 6_000, P: 6_000, Count: 1000, HLC: 9},
	{Type: EventReconcile, Kind: Counters, Key: "views", User: "", Idem: "req-1", P: 5},
	{Type: EventRecovered, Kind: Likes, Key: "post1", P: 1 << 53, N: 1 << 53},
}

func TestEventRoundTrip(t *testing.T) {
	for _, e := range eventSamples {
		got, err := DecodeEvent(AppendEvent(nil, &e))
		if err != nil || got != e {
			t.Errorf("round trip of %+v: %+v, %v", e, got, err)
		}
	}
}

func FuzzDecodeEvent(f *testing.F) {
	for _, e := range eventSamples {
		f.Add(AppendEvent(nil, &e))
	}
	f.Add([]byte{1, 'l', 'l', 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeEvent(b)
		if err != nil {
			if !errors.Is(err, crdt.ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if re := AppendEvent(nil, &e); !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical input % x, re-encoded % x", b, re)
		}
	})
}

// Events are numbered in commit order, survive a reopen, page from any
// seq, and a trim deletes only published ones while the numbering goes on.
func TestEventLog(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, Config{Dir: dir})
	if s.LogLast() != 0 || s.LogID() == "" {
		t.Fatalf("new store: last %d, id %q", s.LogLast(), s.LogID())
	}
	id := s.LogID()
	for range 3 {
		commit(t, s, func(b *Batch) {
			for _, e := range eventSamples {
				b.LogEvent(e)
			}
		})
	}
	if s.LogLast() != 18 {
		t.Fatalf("last seq %d, want 18", s.LogLast())
	}
	s.Close()
	s = openTest(t, Config{Dir: dir})
	defer s.Close()
	if s.LogLast() != 18 || s.LogID() != id {
		t.Fatalf("after reopen: last %d id %q; want 18 %q", s.LogLast(), s.LogID(), id)
	}
	var seqs []uint64
	if err := s.ScanLog(10, 5, func(e Event) bool {
		want := eventSamples[(e.Seq-1)%uint64(len(eventSamples))]
		want.Seq = e.Seq
		if e != want {
			t.Errorf("seq %d: %+v, want %+v", e.Seq, e, want)
		}
		seqs = append(seqs, e.Seq)
		return true
	}); err != nil || len(seqs) != 5 || seqs[0] != 11 || seqs[4] != 15 {
		t.Fatalf("ScanLog(10, 5): %v, %v", seqs, err)
	}
	if err := s.SetLogPublished(12, 12); err != nil {
		t.Fatal(err)
	}
	if first, err := s.LogFirst(); err != nil || first != 13 {
		t.Fatalf("after trimming to 12: first %d, %v", first, err)
	}
	if p, err := s.LogPublished(); err != nil || p != 12 {
		t.Fatalf("published %d, %v", p, err)
	}
	commit(t, s, func(b *Batch) { b.LogEvent(eventSamples[0]) })
	if s.LogLast() != 19 {
		t.Fatalf("after trim, the next seq is %d, want 19", s.LogLast())
	}
}
