package region

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// benchWriters are the concurrency levels every durable benchmark runs at.
var benchWriters = []int{1, 16, 256}

// openBenchReplica opens a replica on a fresh real Pebble directory with
// fsync durability, closed when b ends.
func openBenchReplica(b *testing.B) *Replica {
	b.Helper()
	r, _ := openBenchReplicaWith(b, storage.DurabilitySync, func(*Config) {})
	return r
}

// openBenchReplicaWith opens a replica as openBenchReplica does, with the
// given durability and whatever set changes in its Config.
func openBenchReplicaWith(b *testing.B, d storage.Durability, set func(*Config)) (*Replica, *storage.Store) {
	b.Helper()
	st, err := storage.Open(storage.Config{Dir: b.TempDir(), Durability: d})
	if err != nil {
		b.Fatal(err)
	}
	cfg := Config{Region: "bench", Replica: "bench-1", Store: st}
	set(&cfg)
	r, err := New(cfg)
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
	return r, st
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
				res, err := r.Likes().Like(ctx, "hot", "user-"+strconv.FormatInt(i, 10))
				if err == nil && !res.Changed {
					err = fmt.Errorf("like by new user %d did not change the count", i)
				}
				return err
			})
			if rd, err := r.Likes().Count("hot"); err != nil || rd.Value != int64(b.N) {
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
		if rd, err := r.Likes().Count("hot"); err != nil || rd.Value != int64(b.N)*benchBatch {
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
				_, err := r.Counters().Incr(ctx, "hot", 1, "")
				return err
			})
			if rd, err := r.Counters().Get("hot"); err != nil || rd.Value != int64(b.N) {
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
		if rd, err := r.Counters().Get("hot"); err != nil || rd.Value != int64(b.N)*benchBatch {
			b.Fatalf("value %d (%v), want %d", rd.Value, err, int64(b.N)*benchBatch)
		}
	})
}

// BenchmarkIncrApprox is BenchmarkIncrDurable on an approximate counter
// (target 1%): from single increments, most of which count nothing and so
// wait for no fsync, and in batches, where one hot counter costs exact
// increments one write per commit already.
func BenchmarkIncrApprox(b *testing.B) {
	approx := func(c *Config) { c.Approx = []ApproxRule{{Prefix: "", Error: 0.01}} }
	for _, writers := range benchWriters {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			r, _ := openBenchReplicaWith(b, storage.DurabilitySync, approx)
			runWriters(b, writers, "incrs", func(ctx context.Context, _ int64) error {
				_, err := r.Counters().Incr(ctx, "hot", 1, "")
				return err
			})
		})
	}
	b.Run(fmt.Sprintf("batch=%d/writers=%d", benchBatch, benchBatchWriters), func(b *testing.B) {
		r, _ := openBenchReplicaWith(b, storage.DurabilitySync, approx)
		runBatches(b, r, "incrs", func(_ int64, ops []Op) {
			for j := range ops {
				ops[j] = Op{Kind: OpIncr, Item: "hot", By: 1}
			}
		})
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
	if rd, err := r.Counters().Get("hot"); err != nil || rd.Value != int64(b.N)*benchBatch {
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

// Time windows (windows.go, trending.go).

// windowsOff and windowsNoLevels are the two ways to have no slots: no
// rule at all, and one rule without levels (what tallyd --windows ""
// configures: every commit still folds its bookings, then finds no level).
var (
	windowsOff      = &WindowConfig{}
	windowsNoLevels = &WindowConfig{Rules: []WindowRule{{}}}
)

// BenchmarkIncrKeys is batched ingest of increments spread round-robin over
// 1,000 counters (every Do call touches each once), fsync on, with time
// windows off, configured without levels, and at the default levels (1 s,
// 1 min and 1 h slots of every key and of the family's total). Profile
// it with -cpuprofile to see what the slots cost the writer.
func BenchmarkIncrKeys(b *testing.B) {
	const keys = 1000
	names := make([]string, keys)
	for i := range names {
		names[i] = "c-" + strconv.Itoa(i)
	}
	for _, c := range []struct {
		name string
		wc   *WindowConfig
	}{{"windows=off", windowsOff}, {"windows=nolevels", windowsNoLevels}, {"windows=default", DefaultWindows()}} {
		b.Run(fmt.Sprintf("keys=%d/%s", keys, c.name), func(b *testing.B) {
			r, _ := openBenchReplicaWith(b, storage.DurabilitySync, func(cfg *Config) { cfg.Windows = c.wc })
			runBatches(b, r, "incrs", func(call int64, ops []Op) {
				for j := range ops {
					ops[j] = Op{Kind: OpIncr, Item: names[(call*benchBatch+int64(j))%keys], By: 1}
				}
			})
		})
	}
}

// benchClock is a settable wall clock for a replica (Config.Now).
type benchClock struct{ ms atomic.Int64 }

func (c *benchClock) now() time.Time { return time.UnixMilli(c.ms.Load()) }

// benchEpoch is where the fake clocks of the window benchmarks start: a
// whole day, so every level's slots are aligned to it.
var benchEpoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// openClockedReplica opens a replica without fsync (reads do not care)
// whose clock is clk, set to benchEpoch.
func openClockedReplica(b *testing.B, clk *benchClock, set func(*Config)) (*Replica, *storage.Store) {
	b.Helper()
	clk.ms.Store(benchEpoch.UnixMilli())
	return openBenchReplicaWith(b, storage.DurabilityNone, func(cfg *Config) {
		cfg.Now = clk.now
		set(cfg)
	})
}

// fillSteps runs steps Do calls, the clock set to benchEpoch + i*every
// for the i-th, with the ops fill gives.
func fillSteps(b *testing.B, r *Replica, clk *benchClock, steps int, every time.Duration, fill func(step int, ops []Op) []Op) {
	b.Helper()
	ctx := context.Background()
	var ops []Op
	for i := range steps {
		clk.ms.Store(benchEpoch.Add(time.Duration(i) * every).UnixMilli())
		ops = fill(i, ops[:0])
		res, err := r.Do(ctx, ops)
		if err != nil {
			b.Fatal(err)
		}
		for j := range res {
			if res[j].Err != nil {
				b.Fatal(res[j].Err)
			}
		}
	}
}

// settle deletes the slots expired by the replica's clock and compacts
// the store, so that reads hit sstables and the sweeper has nothing left
// to do while they are timed.
func settle(b *testing.B, r *Replica, st *storage.Store) {
	b.Helper()
	ctx := context.Background()
	if _, err := r.Windows().Expire(ctx); err != nil {
		b.Fatal(err)
	}
	if err := st.Compact(ctx); err != nil {
		b.Fatal(err)
	}
}

// timeReads runs read b.N times and reports, besides ns/op, the p50 and
// p99 of the single calls.
func timeReads(b *testing.B, read func() error) {
	b.Helper()
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if err := read(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Nanoseconds()) }
	b.ReportMetric(q(0.50), "p50-ns")
	b.ReportMetric(q(0.99), "p99-ns")
}

// BenchmarkWindow1h reads the last hour of one counter as GET
// /v1/counters/{key}/window?last=1h does (WindowRange, then WindowOf): 3,600
// slots of 1 s. 100 counters were each incremented every second of that
// hour (fake clock), at the default levels, and the store compacted.
func BenchmarkWindow1h(b *testing.B) {
	const keys = 100
	clk := &benchClock{}
	r, st := openClockedReplica(b, clk, func(*Config) {})
	fillSteps(b, r, clk, 3600, time.Second, func(_ int, ops []Op) []Op {
		for k := range keys {
			ops = append(ops, Op{Kind: OpIncr, Item: "c-" + strconv.Itoa(k), By: 1})
		}
		return ops
	})
	clk.ms.Store(benchEpoch.Add(time.Hour - time.Millisecond).UnixMilli())
	settle(b, r, st)
	for _, key := range []string{"c-7", ""} {
		name := "key=c-7"
		if key == "" {
			name = "key=total"
		}
		b.Run(name, func(b *testing.B) {
			timeReads(b, func() error {
				from, to, err := r.Windows().Range(storage.Counters, key, time.Hour)
				if err != nil {
					return err
				}
				w, err := r.Windows().Of(storage.Counters, key, from, to)
				if err != nil {
					return err
				}
				want := int64(3600)
				if key == "" {
					want *= keys
				}
				if w.SlotWidth != time.Second || w.Sum().Value() != want {
					return fmt.Errorf("window of %q: %d in %v slots, want %d in 1s", key, w.Sum().Value(), w.SlotWidth, want)
				}
				return nil
			})
		})
	}
}

// BenchmarkSeries30d reads 30 days of one counter as GET
// /v1/counters/{key}/series?last=30d&step=1h (or step=1d) does: 720
// slots of 1 h. 100 counters were each incremented once an hour for 30
// days (fake clock), at the default levels; expired slots were swept and
// the store compacted.
func BenchmarkSeries30d(b *testing.B) {
	const keys, hours = 100, 30 * 24
	clk := &benchClock{}
	r, st := openClockedReplica(b, clk, func(*Config) {})
	fillSteps(b, r, clk, hours, time.Hour, func(_ int, ops []Op) []Op {
		for k := range keys {
			ops = append(ops, Op{Kind: OpIncr, Item: "c-" + strconv.Itoa(k), By: 1})
		}
		return ops
	})
	clk.ms.Store(benchEpoch.Add(hours*time.Hour - time.Millisecond).UnixMilli())
	settle(b, r, st)
	for _, step := range []time.Duration{time.Hour, 24 * time.Hour} {
		b.Run("step="+strings.TrimSuffix(step.String(), "0m0s"), func(b *testing.B) {
			timeReads(b, func() error {
				// As httpapi's windowRange: the latest whole steps.
				stepMs := step.Milliseconds()
				to := crdt.SlotStart(r.Now().UnixMilli(), stepMs/1000)*1000 + stepMs
				from := to - (30 * 24 * time.Hour).Milliseconds()
				w, err := r.Windows().Series(storage.Counters, "c-7", from, to, step)
				if err != nil {
					return err
				}
				if w.SlotWidth != time.Hour || len(w.Points) != int(30*24*time.Hour/step) || w.Sum().Value() != hours {
					return fmt.Errorf("series: %d points of %v slots, sum %d", len(w.Points), w.SlotWidth, w.Sum().Value())
				}
				return nil
			})
		})
	}
}

// BenchmarkTrending100k ranks the top 10 liked items of the last 10
// minutes (Windows.Trending, as GET /v1/trending?window=10m): 100,000
// items were each liked once in those 10 minutes and 200,000 more likes
// drawn Zipf-distributed over them (fake clock, 500 likes a second).
func BenchmarkTrending100k(b *testing.B) {
	const items, extra, perStep = 100_000, 200_000, 500
	clk := &benchClock{}
	r, st := openClockedReplica(b, clk, func(*Config) {})
	rng := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(rng, 1.1, 1, items-1)
	like := 0
	fillSteps(b, r, clk, (items+extra)/perStep, time.Second, func(_ int, ops []Op) []Op {
		for range perStep {
			item := like
			if like >= items {
				item = int(zipf.Uint64())
			}
			ops = append(ops, Op{Kind: OpLike, Item: "post-" + strconv.Itoa(item), User: "u-" + strconv.Itoa(like)})
			like++
		}
		return ops
	})
	clk.ms.Store(benchEpoch.Add(10*time.Minute - time.Millisecond).UnixMilli())
	settle(b, r, st)
	var cands int
	timeReads(b, func() error {
		tr, err := r.Windows().Trending(storage.Likes, "", 10*time.Minute, 10, nil)
		if err != nil {
			return err
		}
		if len(tr.Items) != 10 || tr.Items[0].Key != "post-0" {
			return fmt.Errorf("trending: %+v", tr.Items)
		}
		cands = tr.Candidates
		return nil
	})
	b.ReportMetric(float64(cands), "candidates")
}

// windowSpaceKeys sizes BenchmarkWindowSpace: small by default, so that
// `make bench` stays short; docs/benchmarks.md runs it with 1000.
var windowSpaceKeys = flag.Int("windowspace.keys", 200, "counters BenchmarkWindowSpace writes for an hour")

// BenchmarkWindowSpace measures what slots cost on disk:
// -windowspace.keys counters each incremented every second for one hour
// (fake clock), then a full compaction; the sstable bytes against the
// same load with windows off, per key and hour. One run is the
// measurement: use -benchtime=1x.
func BenchmarkWindowSpace(b *testing.B) {
	keys := *windowSpaceKeys
	names := make([]string, keys)
	for i := range names {
		names[i] = "views:video-" + strconv.Itoa(100000+i)
	}
	measure := func(b *testing.B, wc *WindowConfig) float64 {
		clk := &benchClock{}
		r, st := openClockedReplica(b, clk, func(cfg *Config) { cfg.Windows = wc })
		fillSteps(b, r, clk, 3600, time.Second, func(_ int, ops []Op) []Op {
			for _, k := range names {
				ops = append(ops, Op{Kind: OpIncr, Item: k, By: 1})
			}
			return ops
		})
		settle(b, r, st)
		tb, err := st.TableBytes()
		if err != nil {
			b.Fatal(err)
		}
		return float64(tb)
	}
	var off float64
	for _, c := range []struct {
		name string
		wc   *WindowConfig
	}{
		{"windows=off", windowsOff},
		{"windows=1s", &WindowConfig{Rules: []WindowRule{{Levels: DefaultWindowLevels()[:1]}}}},
		{"windows=default", DefaultWindows()},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				tb := measure(b, c.wc)
				b.ReportMetric(tb, "sstable-B")
				if c.wc == windowsOff {
					off = tb
					continue
				}
				b.ReportMetric((tb-off)/float64(keys), "B/key-hour")
			}
		})
	}
}
