package region

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tally-dev/tally/storage"
)

// benchWriters are the concurrency levels every durable benchmark runs at.
var benchWriters = []int{1, 16, 256}

// openBenchReplica opens a replica on a fresh real Pebble directory with
// fsync durability, closed when b ends.
func openBenchReplica(b *testing.B) *Replica {
	b.Helper()
	st, err := storage.Open(storage.Config{Dir: b.TempDir(), Durability: storage.DurabilitySync})
	if err != nil {
		b.Fatal(err)
	}
	r, err := New(Config{Region: "bench", Replica: "bench-1", Store: st})
	if err != nil {
		_ = st.Close()
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := r.Close(); err != nil {
			b.Error(err)
		}
		if err := st.Close(); err != nil {
			b.Error(err)
		}
	})
	return r
}

// runWriters runs b.N calls of op spread over writers goroutines, each call
// numbered 0..b.N-1, and reports the rate as unit/s. The first error stops
// the benchmark.
func runWriters(b *testing.B, writers int, unit string, op func(ctx context.Context, i int64) error) {
	b.Helper()
	ctx := context.Background()
	var (
		next   atomic.Int64
		failed atomic.Bool
		wg     sync.WaitGroup
	)
	b.ReportAllocs()
	b.ResetTimer()
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				if err := op(ctx, i); err != nil {
					failed.Store(true)
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if sec := b.Elapsed().Seconds(); sec > 0 {
		b.ReportMetric(float64(b.N)/sec, unit+"/s")
	}
}

// BenchmarkLikeDurable measures acknowledged likes of one hot item, each by
// a new user (so every like changes the count), from 1, 16 and 256
// concurrent writers, fsync on. The replica's writer groups concurrent
// likes into one commit, so likes/s should grow with the writers. The
// batch= case is batched ingest: 16 writers each submit 1000 likes per Do
// call (the counted-events/s target in docs/architecture.md).
func BenchmarkLikeDurable(b *testing.B) {
	for _, writers := range benchWriters {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			r := openBenchReplica(b)
			runWriters(b, writers, "likes", func(ctx context.Context, i int64) error {
				res, err := r.Like(ctx, "hot", "user-"+strconv.FormatInt(i, 10))
				if err == nil && !res.Changed {
					err = fmt.Errorf("like by new user %d did not change the count", i)
				}
				return err
			})
			if rd, err := r.Likes("hot"); err != nil || rd.Value != int64(b.N) {
				b.Fatalf("count %d (%v), want %d", rd.Value, err, b.N)
			}
		})
	}
	b.Run(fmt.Sprintf("batch=%d/writers=%d", benchBatch, benchBatchWriters), func(b *testing.B) {
		r := openBenchReplica(b)
		runBatches(b, r, "likes", func(call int64, ops []Op) {
			for j := range ops {
				user := "user-" + strconv.FormatInt(call*benchBatch+int64(j), 10)
				ops[j] = Op{Kind: OpLike, Item: "hot", User: user}
			}
		})
		if rd, err := r.Likes("hot"); err != nil || rd.Value != int64(b.N)*benchBatch {
			b.Fatalf("count %d (%v), want %d", rd.Value, err, int64(b.N)*benchBatch)
		}
	})
}

// BenchmarkIncrDurable measures acknowledged increments of one hot counter
// without idempotency keys from 1, 16 and 256 concurrent writers, fsync on.
// The batch= case is batched ingest, as for likes. Increments of one key
// in one group commit fold into one vector write, so it is the cheap end.
func BenchmarkIncrDurable(b *testing.B) {
	for _, writers := range benchWriters {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			r := openBenchReplica(b)
			runWriters(b, writers, "incrs", func(ctx context.Context, _ int64) error {
				_, err := r.Incr(ctx, "hot", 1, "")
				return err
			})
			if rd, err := r.Counter("hot"); err != nil || rd.Value != int64(b.N) {
				b.Fatalf("value %d (%v), want %d", rd.Value, err, b.N)
			}
		})
	}
	b.Run(fmt.Sprintf("batch=%d/writers=%d", benchBatch, benchBatchWriters), func(b *testing.B) {
		r := openBenchReplica(b)
		runBatches(b, r, "incrs", func(_ int64, ops []Op) {
			for j := range ops {
				ops[j] = Op{Kind: OpIncr, Item: "hot", By: 1}
			}
		})
		if rd, err := r.Counter("hot"); err != nil || rd.Value != int64(b.N)*benchBatch {
			b.Fatalf("value %d (%v), want %d", rd.Value, err, int64(b.N)*benchBatch)
		}
	})
}

// BenchmarkIncrKeyed is batched ingest of increments of one counter, each
// with a new idempotency key: one keyed record per increment.
func BenchmarkIncrKeyed(b *testing.B) {
	r := openBenchReplica(b)
	runBatches(b, r, "incrs", func(call int64, ops []Op) {
		for j := range ops {
			ops[j] = Op{Kind: OpIncr, Item: "hot", By: 1, IdemKey: "req-" + strconv.FormatInt(call*benchBatch+int64(j), 10)}
		}
	})
	if rd, err := r.Counter("hot"); err != nil || rd.Value != int64(b.N)*benchBatch {
		b.Fatalf("value %d (%v), want %d", rd.Value, err, int64(b.N)*benchBatch)
	}
}

// Batched ingest: benchBatchWriters goroutines each submit benchBatch ops
// per Do call.
const (
	benchBatch        = 1000
	benchBatchWriters = 16
)

// runBatches runs b.N Do calls of benchBatch ops each, filled by fill with
// the call's number, and reports ops/s as unit/s (and calls/s).
func runBatches(b *testing.B, r *Replica, unit string, fill func(call int64, ops []Op)) {
	b.Helper()
	runWriters(b, benchBatchWriters, "calls", func(ctx context.Context, call int64) error {
		ops := make([]Op, benchBatch)
		fill(call, ops)
		res, err := r.Do(ctx, ops)
		if err != nil {
			return err
		}
		for i := range res {
			if res[i].Err != nil {
				return res[i].Err
			}
		}
		return nil
	})
	if sec := b.Elapsed().Seconds(); sec > 0 {
		b.ReportMetric(float64(b.N)*benchBatch/sec, unit+"/s")
	}
}
