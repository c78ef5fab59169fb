package storage

import (
	"bytes"
	"errors"
	"slices"
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
	{Type: EventGrant, Kind: Budgets, Key: "gifts", By: 1000, P: 1000, Count: 1, HLC: 10},
	{Type: EventSpend, Kind: Budgets, Key: "gifts", Idem: "order-7", By: 3, N: 3, Count: 1, HLC: 11},
	{Type: EventTransfer, Kind: Budgets, Key: "gifts", User: "eu-1", By: 500, P: 500, N: 500, Count: 1, HLC: 12},
	{Type: EventRecovered, Kind: Budgets, Key: "gifts", User: "us-1", N: 500, Count: 1},
}

// Moves names the vectors an event raised: a budget event with a user
// names an inbox, and a transfer raises two.
func TestEventMoves(t *testing.T) {
	type move struct {
		k  VectorKey
		pn crdt.PN
	}
	for i, want := range [][]move{
		{{VectorKey{Likes, "post1"}, crdt.PN{P: 1}}},
		6: {{VectorKey{Budgets, "gifts"}, crdt.PN{P: 1000}}},
		7: {{VectorKey{Budgets, "gifts"}, crdt.PN{N: 3}}},
		8: {{VectorKey{Budgets, "gifts~eu-1"}, crdt.PN{P: 500}}, {VectorKey{Budgets, "gifts~us-1"}, crdt.PN{N: 500}}},
		9: {{VectorKey{Budgets, "gifts~us-1"}, crdt.PN{N: 500}}},
	} {
		if want == nil {
			continue
		}
		var got []move
		eventSamples[i].Moves("us-1", func(k VectorKey, pn crdt.PN) { got = append(got, move{k, pn}) })
		if len(got) != len(want) {
			t.Fatalf("event %d moves %+v, want %+v", i, got, want)
		}
		for j := range want {
			if got[j] != want[j] {
				t.Fatalf("event %d moves %+v, want %+v", i, got, want)
			}
		}
	}
}

func TestEventsRoundTrip(t *testing.T) {
	want := make([]Event, len(eventSamples))
	for i, e := range eventSamples {
		e.Seq = 40 + uint64(i)
		want[i] = e
	}
	got, err := DecodeEvents(AppendEvents(nil, want), 40)
	if err != nil || len(got) != len(want) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

func FuzzDecodeEvents(f *testing.F) {
	f.Add(AppendEvents(nil, eventSamples))
	for _, e := range eventSamples {
		f.Add(AppendEvents(nil, []Event{e}))
	}
	f.Add([]byte{1, 1, 'l', 'l', 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		events, err := DecodeEvents(b, 1)
		if err != nil {
			if !errors.Is(err, crdt.ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		for i := range events {
			events[i].Seq = 0 // not encoded
		}
		if re := AppendEvents(nil, events); !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical input % x, re-encoded % x", b, re)
		}
	})
}

// Events are numbered in commit order, survive a reopen, page from any
// seq (also inside a chunk), a commit's events are chunked by LogChunk,
// and a trim deletes whole published chunks while the numbering goes on.
func TestEventLog(t *testing.T) {
	samples := eventSamples[:6] // 6 a commit: chunks start at 1, 7, 13
	dir := t.TempDir()
	s := openTest(t, Config{Dir: dir})
	if s.LogLast() != 0 || s.LogID() == "" {
		t.Fatalf("new store: last %d, id %q", s.LogLast(), s.LogID())
	}
	id := s.LogID()
	for range 3 {
		commit(t, s, func(b *Batch) {
			for _, e := range samples {
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
		want := samples[(e.Seq-1)%uint64(len(samples))]
		want.Seq = e.Seq
		if e != want {
			t.Errorf("seq %d: %+v, want %+v", e.Seq, e, want)
		}
		seqs = append(seqs, e.Seq)
		return true
	}); err != nil || len(seqs) != 5 || seqs[0] != 11 || seqs[4] != 15 {
		t.Fatalf("ScanLog(10, 5): %v, %v", seqs, err)
	}
	if err := s.SetLogPublished(12, 13); err != nil { // the two chunks before 13
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
	// A commit of more than a chunk's events is split.
	commit(t, s, func(b *Batch) {
		for range LogChunk + 3 {
			b.LogEvent(eventSamples[3])
		}
	})
	var chunks []int
	if err := s.ScanChunks(19, func(events []Event) bool {
		chunks = append(chunks, len(events))
		return true
	}); err != nil || len(chunks) != 2 || chunks[0] != LogChunk || chunks[1] != 3 || s.LogLast() != 19+LogChunk+3 {
		t.Fatalf("chunks after 19: %v, %v; last %d", chunks, err, s.LogLast())
	}
}

// MergeLogChunks joins the chunks after a seq into chunks of up to
// LogChunk events, keeps every event, its seq and its order, and leaves
// the chunks at or before that seq as they were.
func TestMergeLogChunks(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, Config{Dir: dir})
	var want []Event
	logCommit := func(n int) {
		commit(t, s, func(b *Batch) {
			for range n {
				e := eventSamples[len(want)%len(eventSamples)]
				b.LogEvent(e)
				e.Seq = uint64(len(want) + 1)
				want = append(want, e)
			}
		})
	}
	// Chunks of 2 (1-2, 3-4), then 200 commits of 3 events (5-604), then
	// one of LogChunk (605-1116).
	logCommit(2)
	logCommit(2)
	for range 200 {
		logCommit(3)
	}
	logCommit(LogChunk)
	sizes := func() (out []int) {
		if err := s.ScanChunks(0, func(events []Event) bool {
			out = append(out, len(events))
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	last, err := s.MergeLogChunks(4)
	if err != nil || last != uint64(len(want)) {
		t.Fatalf("MergeLogChunks(4): last %d, %v; want %d", last, err, len(want))
	}
	// 600 events of 3-event chunks: 170 chunks (510 events) fit in one,
	// the other 30 (90 events) in the next; the full chunk stays alone.
	if got := sizes(); !slices.Equal(got, []int{2, 2, 510, 90, LogChunk}) {
		t.Fatalf("chunk sizes after merging after 4: %v", got)
	}
	check := func() {
		t.Helper()
		var got []Event
		if err := s.ScanLog(0, 1<<30, func(e Event) bool { got = append(got, e); return true }); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("the log holds %d events, want %d, or they changed", len(got), len(want))
		}
	}
	check()
	// Nothing to merge: nothing changes, and a later merge starts at the
	// next chunk boundary.
	if last, err := s.MergeLogChunks(uint64(len(want))); err != nil || last != uint64(len(want)) {
		t.Fatalf("MergeLogChunks(last): %d, %v", last, err)
	}
	logCommit(1)
	logCommit(1)
	if last, err := s.MergeLogChunks(uint64(len(want) - 2)); err != nil || last != uint64(len(want)) {
		t.Fatalf("MergeLogChunks of the two new chunks: %d, %v", last, err)
	}
	if got := sizes(); !slices.Equal(got, []int{2, 2, 510, 90, LogChunk, 2}) {
		t.Fatalf("chunk sizes after merging the two new ones: %v", got)
	}
	s.Close()
	s = openTest(t, Config{Dir: dir})
	defer s.Close()
	if s.LogLast() != uint64(len(want)) {
		t.Fatalf("after reopen: last %d, want %d", s.LogLast(), len(want))
	}
	check()
	if totals, err := s.LogTotals("us-1"); err != nil || totals.Events != uint64(len(want)) || totals.First != 1 {
		t.Fatalf("audit after merging: %+v, %v", totals, err)
	}
}

// Each logged like and unlike is in the pair's history, oldest first,
// other events and other pairs not.
func TestHistory(t *testing.T) {
	s := openTest(t, Config{Dir: t.TempDir()})
	defer s.Close()
	commit(t, s, func(b *Batch) {
		b.LogEvent(Event{Type: EventLike, Kind: Likes, Key: "post", User: "u", P: 1, Count: 1, HLC: 10})
		b.LogEvent(Event{Type: EventLike, Kind: Likes, Key: "post", User: "u2", P: 1, Count: 1, HLC: 11})
		b.LogEvent(Event{Type: EventReconcile, Kind: Likes, Key: "post", User: "u", N: 1, Count: 1, HLC: 12})
	})
	commit(t, s, func(b *Batch) {
		b.LogEvent(Event{Type: EventUnlike, Kind: Likes, Key: "post", User: "u", N: 1, Count: 1, HLC: 13})
		b.LogEvent(Event{Type: EventLike, Kind: Likes, Key: "post", User: "u", P: 1, Count: 1, HLC: 14})
		b.LogEvent(Event{Type: EventLike, Kind: Likes, Key: "post.x", User: "u", P: 1, Count: 1, HLC: 15})
	})
	got, err := s.History("post", "u", 100)
	want := []Action{{1, true, 10}, {4, false, 13}, {5, true, 14}}
	if err != nil || len(got) != len(want) {
		t.Fatalf("History = %+v, %v; want %+v", got, err, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("History = %+v, want %+v", got, want)
		}
	}
	if got, _ := s.History("post", "u", 2); len(got) != 2 || got[0].Seq != 4 {
		t.Fatalf("the newest 2: %+v", got)
	}
}
