package storage

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tally-dev/tally/crdt"
)

// BenchmarkCommitSync measures fsync'd commits of a like-sized batch (record,
// vector entry, marker) from 1, 16 and 256 concurrent committers on a real
// directory. Pebble lets concurrent syncing commits share a WAL fsync, so
// commits/s should grow with the number of committers.
func BenchmarkCommitSync(b *testing.B) {
	for _, committers := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("committers=%d", committers), func(b *testing.B) {
			s, err := Open(Config{Dir: b.TempDir(), Durability: DurabilitySync})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			rec := &crdt.LikeRecord{
				Liked:   true,
				HLC:     crdt.MakeHLC(1_700_000_000_000, 0),
				Origin:  "eu-1",
				Contrib: crdt.Vector{{Replica: "eu-1", PN: crdt.PN{P: 1}}},
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ReportAllocs()
			b.ResetTimer()
			for range committers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						// Fresh keys, so the replaced values are known to be absent.
						item, user := fmt.Sprintf("post:%d", i), fmt.Sprintf("user-%d", i)
						batch := s.NewBatch()
						batch.PutLikeRecord(item, user, nil, rec)
						batch.PutVectorEntry(Likes, item, "eu-1", crdt.PN{}, crdt.PN{P: 1})
						batch.SetMarker(Likes, item, user, false)
						err := batch.Commit()
						batch.Close()
						if err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			if sec := b.Elapsed().Seconds(); sec > 0 {
				b.ReportMetric(float64(b.N)/sec, "commits/s")
			}
		})
	}
}

// BenchmarkScanVectors measures a full scan of one family's vectors (the
// all-time leaderboard's read) over a store of 500 items among the other
// families' keys: the scan visits every segment, so its cost is as much
// the segments' as the items'.
func BenchmarkScanVectors(b *testing.B) {
	s := openTest(b, Config{Dir: b.TempDir()})
	batch := s.NewBatch()
	for i := range 500 {
		item := fmt.Sprintf("post:%d", i)
		batch.PutVectorEntry(Likes, item, "eu-1", crdt.PN{}, crdt.PN{P: uint64(i + 1)})
		batch.PutVectorEntry(Counters, item, "eu-1", crdt.PN{}, crdt.PN{P: 1})
	}
	if err := batch.Commit(); err != nil {
		b.Fatal(err)
	}
	batch.Close()
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		if err := s.ScanVectors(Likes, func(string, crdt.Vector) bool { n++; return true }); err != nil {
			b.Fatal(err)
		}
		if n != 500 {
			b.Fatalf("scanned %d items, want 500", n)
		}
	}
}

// BenchmarkRecordFilterLookup measures a lookup of a key the record
// filter of the default size does not hold (the common one: a user's
// first like of an item), with a million keys in it.
func BenchmarkRecordFilterLookup(b *testing.B) {
	f := newRecordFilter(DefaultConfig().RecordFilterBytes)
	for i := range 1_000_000 {
		f.add("item-"+strconv.Itoa(i%5000), "user-"+strconv.Itoa(i))
	}
	items, users := make([]string, 4096), make([]string, 4093)
	for i := range items {
		items[i] = "item-" + strconv.Itoa(i)
	}
	for i := range users {
		users[i] = "other-" + strconv.Itoa(i)
	}
	hits := 0
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if f.mayContain(items[i%len(items)], users[i%len(users)]) {
			hits++
		}
		i++
	}
	if hits > i/10 {
		b.Fatalf("%d of %d absent keys passed the filter", hits, i)
	}
}
