package storage

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tally-dev/tally/crdt"
)

// The keys and values a store holds for a like record, a counter's keyed
// record and a budget spend, with their markers and expiry entries,
// captured byte for byte: data directories hold exactly these, and the
// digests peers compare are computed over them.
var goldenRecordKVs = [][2]string{
	{"b4b5/k/~bud/idem-2", "\x01\x03\x83\x80\x80\xc0\xd6\xfc\xf3\xc5\x01\x04eu-1\t\x02\x04eu-1\x00\x05\x04us-1\x05\x05"},
	{"b88d/r/post:1/alice", "\x01\x05\x83\x80\x80\xc0\xd6\xfc\xf3\xc5\x01\x04eu-1\x98\xc8\x95\xff\xbc1\x02\x04eu-1\x01\x00\x04us-1\x01\x01"},
	{"bf34/k/cnt/idem-1", "\x01\x0f\x83\x80\x80\xc0\xd6\xfc\xf3\xc5\x01\x04us-1\x80\x01\x98\xc8\x95\xff\xbc1\x02\x02\x04eu-1@@\x04us-1@\x00"},
	{"e/0000018bcfe56800/cnt/idem-1", ""},
	{"e/0000018bcfe56800/~bud/idem-2", ""},
	{"w/cnt/idem-1", ""},
	{"w/~bud/idem-2", ""},
	{"x/post:1/alice", ""},
}

// The same records as segment layout 1 stored them (before segments
// nested in shards): the "b<B>/" of each replicated key differs.
var goldenRecordKVsLayout1 = [][2]string{
	{"b2b8/k/cnt/idem-1", goldenRecordKVs[2][1]},
	{"bbb1/k/~bud/idem-2", goldenRecordKVs[0][1]},
	{"bc11/r/post:1/alice", goldenRecordKVs[1][1]},
}

const goldenRecordRoot = 0xfcfb02757336e949

func TestGoldenRecordKeys(t *testing.T) {
	s, err := Open(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := crdt.MakeHLC(1700000000000, 3)
	b := s.NewBatch()
	b.PutLikeRecord("post:1", "alice", nil, &crdt.LikeRecord{Liked: true, HLC: h, Origin: "eu-1", At: 1699999999000,
		Contrib: crdt.Vector{{Replica: "eu-1", PN: crdt.PN{P: 1}}, {Replica: "us-1", PN: crdt.PN{P: 1, N: 1}}}})
	b.SetMarker(Likes, "post:1", "alice", true)
	b.PutKeyedRecord("cnt", "idem-1", nil, &crdt.KeyedRecord{HLC: h, Origin: "us-1", Amount: 64, Asked: 1,
		At: 1699999999000, Contrib: crdt.Vector{{Replica: "eu-1", PN: crdt.PN{P: 64, N: 64}}, {Replica: "us-1", PN: crdt.PN{P: 64}}}})
	b.SetMarker(Counters, "cnt", "idem-1", true)
	b.PutSpend("bud", "idem-2", nil, &crdt.Spend{HLC: h, Origin: "eu-1", Amount: -5,
		Contrib: crdt.Vector{{Replica: "eu-1", PN: crdt.PN{N: 5}}, {Replica: "us-1", PN: crdt.PN{P: 5, N: 5}}}})
	b.SetMarker(Budgets, "bud", "idem-2", true)
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()

	checkGoldenRecords(t, s)
}

func checkGoldenRecords(t *testing.T, s *Store) {
	t.Helper()
	it, err := s.db.NewIter(&pebble.IterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got [][2]string
	for it.First(); it.Valid(); it.Next() {
		if it.Key()[0] != prefixMeta {
			got = append(got, [2]string{string(it.Key()), string(it.Value())})
		}
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(goldenRecordKVs) {
		t.Fatalf("%d keys, want %d: %q", len(got), len(goldenRecordKVs), got)
	}
	for i, kv := range got {
		if kv != goldenRecordKVs[i] {
			t.Errorf("key %d: %q = %q, want %q = %q", i, kv[0], kv[1], goldenRecordKVs[i][0], goldenRecordKVs[i][1])
		}
	}
	if r := s.Root(); r != goldenRecordRoot {
		t.Errorf("root %#x, want %#x", r, uint64(goldenRecordRoot))
	}
}

// A store of segment layout 1 is moved to layout 2 at open, once: every
// record lands where layout 2 puts it, the digests are those of layout 2,
// and the records read back.
func TestMigrateSegments(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	// Rewind the fresh store to layout 1: no layout metadata, the
	// layout-1 keys, and the local keys that have no segment.
	b := s.db.NewBatch()
	_ = b.Delete(metaKey(metaSegmentLayout), nil)
	for _, kv := range goldenRecordKVsLayout1 {
		_ = b.Set([]byte(kv[0]), []byte(kv[1]), nil)
	}
	for _, kv := range goldenRecordKVs[3:] {
		_ = b.Set([]byte(kv[0]), []byte(kv[1]), nil)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second open finds layout 2 and moves nothing
		s, err = Open(Config{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		checkGoldenRecords(t, s)
		if r, ok, err := s.LikeRecord("post:1", "alice"); err != nil || !ok || !r.Liked {
			t.Fatalf("like record after migration: %+v, %v, %v", r, ok, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
