package storage

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/tally-dev/tally/crdt"
)

// Compact moves everything into sstables: TableBytes then counts the
// whole state, which reads back unchanged.
func TestCompactAndTableBytes(t *testing.T) {
	s := openTest(t, Config{Dir: t.TempDir()})
	defer s.Close()
	if n, err := s.TableBytes(); err != nil || n != 0 {
		t.Fatalf("empty store: %d table bytes, %v", n, err)
	}
	rec := sampleRecord()
	commit(t, s, func(b *Batch) {
		for i := range 1000 {
			b.PutLikeRecord("post", "user-"+strconv.Itoa(i), nil, rec)
		}
		b.PutVectorEntry(Likes, "post", "eu-1", crdt.PN{}, crdt.PN{P: 1000})
	})
	if err := s.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	n, err := s.TableBytes()
	if err != nil || n <= 0 {
		t.Fatalf("after compaction: %d table bytes, %v", n, err)
	}
	got, ok, err := s.LikeRecord("post", "user-999")
	if err != nil || !ok || !got.Equal(rec) {
		t.Fatalf("record after compaction: %+v, %v, %v", got, ok, err)
	}
	wantVector(t, s, Likes, "post", crdt.Vector{{Replica: "eu-1", PN: crdt.PN{P: 1000}}})
	if u, err := s.MemoryUse(); err != nil || u.MemTables <= 0 || u.RecordFilter <= 0 || u.RecordFilter > 64<<20+128<<10 || u.VectorFilter <= 0 || u.VectorFilter > 16<<20+32<<10 || u.BlockCache < 0 {
		t.Errorf("MemoryUse = %+v, %v", u, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Compact on a closed store: %v", err)
	}
	if _, err := s.MemoryUse(); !errors.Is(err, ErrClosed) {
		t.Errorf("MemoryUse on a closed store: %v", err)
	}
	if _, err := s.TableBytes(); !errors.Is(err, ErrClosed) {
		t.Errorf("TableBytes on a closed store: %v", err)
	}
}

// Pebble charges memtables to the block cache. Under steady writes (one
// memtable filling while another flushes) blocks must still be cached:
// before Open made room for the memtables, the cache held nothing and
// every lookup read its blocks from the file again.
//
// The sizes are the defaults (64 MiB cache, 32 MiB memtables) scaled down
// by 8, which keeps their ratio, so two memtables would again reserve the
// whole cache without that room; an eighth of the records to write.
func TestBlockCacheUnderWrites(t *testing.T) {
	const memtable = 4 << 20
	s := openTest(t, Config{Dir: t.TempDir(), RecordFilterBytes: -1, CacheBytes: 2 * memtable, MemTableBytes: memtable})
	defer s.Close()
	rec := sampleRecord()
	for r := range 40 { // ~6 MB of records: more than one full memtable
		commit(t, s, func(b *Batch) {
			for i := range 2500 {
				b.PutLikeRecord("hot", "u"+strconv.Itoa(r*2500+i), nil, rec)
			}
		})
		for i := range 100 {
			if _, ok, err := s.LikeRecord("hot", "u"+strconv.Itoa(i*25)); !ok || err != nil {
				t.Fatalf("record %d: %v, %v", i*25, ok, err)
			}
		}
	}
	u, err := s.MemoryUse()
	if err != nil {
		t.Fatal(err)
	}
	if u.MemTables < memtable || u.BlockCache == 0 {
		t.Fatalf("memtables %d bytes, block cache %d bytes: want a full memtable and a non-empty cache", u.MemTables, u.BlockCache)
	}
}
