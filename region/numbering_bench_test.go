package region

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/tally-dev/tally/storage"
)

// benchBatches runs 16 writers of batches of 1,000 ops (op builds the
// j-th op of batch i) against a replica on a fresh fsync'd store whose
// config tune adjusts, and reports ops/s under unit.
func benchBatches(b *testing.B, unit string, tune func(*Config), op func(i int64, j int) Op) {
	st, err := storage.Open(storage.Config{Dir: b.TempDir(), Durability: storage.DurabilitySync})
	if err != nil {
		b.Fatal(err)
	}
	cfg := Config{Region: "bench", Replica: "bench-1", Store: st}
	tune(&cfg)
	r, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Close(); _ = st.Close() })
	const batch = 1000
	runWriters(b, 16, "batches", func(ctx context.Context, i int64) error {
		ops := make([]Op, batch)
		for j := range ops {
			ops[j] = op(i, j)
		}
		_, err := r.Do(ctx, ops)
		return err
	})
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), unit)
}

// newUserLike is the j-th like of batch i: a new user's like of one hot
// item.
func newUserLike(i int64, j int) Op {
	return Op{Kind: OpLike, Item: "hot", User: "u" + strconv.FormatInt(i*1000+int64(j), 36)}
}

// BenchmarkLikeNumbered is BenchmarkLikeDurable/batch with like numbering
// on (a sequencer that always has numbers; milestones every 1000): the cost
// the writer adds per counted like, without the KV, which is off the path.
func BenchmarkLikeNumbered(b *testing.B) {
	for _, numbered := range []bool{false, true} {
		b.Run(fmt.Sprintf("numbered=%v", numbered), func(b *testing.B) {
			benchBatches(b, "likes/s", func(c *Config) {
				if numbered {
					c.Sequences = []*Numbering{{
						Sequence:  "likes",
						Seq:       &fakeSeq{next: 1, avail: 1 << 62},
						Milestone: func(n uint64) bool { return n%1000 == 0 },
					}}
				}
			}, newUserLike)
		})
	}
}

// BenchmarkIncrNumbered: what a numbered counter costs the writer, for
// increments by 1 of 100 keys under its prefix.
func BenchmarkIncrNumbered(b *testing.B) {
	for _, numbered := range []bool{false, true} {
		b.Run(fmt.Sprintf("numbered=%v", numbered), func(b *testing.B) {
			benchBatches(b, "incrs/s", func(c *Config) {
				if numbered {
					c.Sequences = []*Numbering{{
						Sequence:  "searches",
						Counts:    CountIncrements,
						Match:     func(k string) bool { return strings.HasPrefix(k, "search:") },
						Seq:       &fakeSeq{next: 1, avail: 1 << 62},
						Milestone: func(n uint64) bool { return n%1000 == 0 },
					}}
				}
			}, func(_ int64, j int) Op {
				return Op{Kind: OpIncr, Item: "search:k" + strconv.Itoa(j%100), By: 1}
			})
		})
	}
}

// BenchmarkLikeLists: what the liker and liked-item lists cost the
// writer: two more keys per like that changes a user's state.
func BenchmarkLikeLists(b *testing.B) {
	for _, lists := range []bool{false, true} {
		b.Run(fmt.Sprintf("lists=%v", lists), func(b *testing.B) {
			benchBatches(b, "likes/s", func(c *Config) { c.LikeLists = lists }, newUserLike)
		})
	}
}

// BenchmarkLikeItems: new users' likes spread evenly over 100,000 items,
// the writer's cold path: most likes touch vectors no commit touched
// recently (the item's, and its new one-second and one-minute slots), so
// the writer reads them from the store, or learns that they do not exist.
// Batched as the others are, and single likes from 50 writers as HTTP
// clients send them.
func BenchmarkLikeItems(b *testing.B) {
	const items = 100_000
	like := func(n int64) Op {
		item := "it" + strconv.FormatUint(uint64(n)*0x9e3779b97f4a7c15>>40%items, 10)
		return Op{Kind: OpLike, Item: item, User: "u" + strconv.FormatInt(n, 36)}
	}
	b.Run("batch=1000", func(b *testing.B) {
		benchBatches(b, "likes/s", func(*Config) {}, func(i int64, j int) Op { return like(i*1000 + int64(j)) })
	})
	b.Run("writers=50", func(b *testing.B) {
		r := openBenchReplica(b)
		runWriters(b, 50, "likes", func(ctx context.Context, i int64) error {
			_, err := r.Do(ctx, []Op{like(i)})
			return err
		})
	})
}
