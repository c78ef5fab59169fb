package storage

import (
	"fmt"
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
