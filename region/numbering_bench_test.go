package region

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/tally-dev/tally/storage"
)

// BenchmarkLikeNumbered is BenchmarkLikeDurable/batch with like numbering
// on (a sequencer that always has numbers; milestones every 1000): the cost
// the writer adds per counted like, without the KV, which is off the path.
func BenchmarkLikeNumbered(b *testing.B) {
	for _, numbered := range []bool{false, true} {
		b.Run(fmt.Sprintf("numbered=%v", numbered), func(b *testing.B) {
			st, err := storage.Open(storage.Config{Dir: b.TempDir(), Durability: storage.DurabilitySync})
			if err != nil {
				b.Fatal(err)
			}
			cfg := Config{Region: "bench", Replica: "bench-1", Store: st}
			if numbered {
				cfg.Sequences = []*Numbering{{
					Sequence:  "likes",
					Seq:       &fakeSeq{next: 1, avail: 1 << 62},
					Milestone: func(n uint64) bool { return n%1000 == 0 },
				}}
			}
			r, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = r.Close(); _ = st.Close() })
			const batch = 1000
			runWriters(b, 16, "likes", func(ctx context.Context, i int64) error {
				ops := make([]Op, batch)
				for j := range ops {
					ops[j] = Op{Kind: OpLike, Item: "hot", User: "u" + strconv.FormatInt(i*batch+int64(j), 36)}
				}
				_, err := r.Do(ctx, ops)
				return err
			})
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "likes/s")
		})
	}
}

// BenchmarkIncrNumbered: what a numbered counter costs the writer, for
// increments by 1 of keys under its prefix: one logged key per increment.
func BenchmarkIncrNumbered(b *testing.B) {
	for _, numbered := range []bool{false, true} {
		b.Run(fmt.Sprintf("numbered=%v", numbered), func(b *testing.B) {
			st, err := storage.Open(storage.Config{Dir: b.TempDir(), Durability: storage.DurabilitySync})
			if err != nil {
				b.Fatal(err)
			}
			cfg := Config{Region: "bench", Replica: "bench-1", Store: st}
			if numbered {
				cfg.Sequences = []*Numbering{{
					Sequence:  "searches",
					Counts:    CountIncrements,
					Match:     func(k string) bool { return strings.HasPrefix(k, "search:") },
					Seq:       &fakeSeq{next: 1, avail: 1 << 62},
					Milestone: func(n uint64) bool { return n%1000 == 0 },
				}}
			}
			r, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = r.Close(); _ = st.Close() })
			const batch = 1000
			runWriters(b, 16, "increments", func(ctx context.Context, i int64) error {
				ops := make([]Op, batch)
				for j := range ops {
					ops[j] = Op{Kind: OpIncr, Item: "search:k" + strconv.Itoa(j%100), By: 1}
				}
				_, err := r.Do(ctx, ops)
				return err
			})
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "incrs/s")
		})
	}
}

// BenchmarkLikeLists: what the liker and liked-item lists cost the
// writer: two more keys per like that changes a user's state.
func BenchmarkLikeLists(b *testing.B) {
	for _, lists := range []bool{false, true} {
		b.Run(fmt.Sprintf("lists=%v", lists), func(b *testing.B) {
			st, err := storage.Open(storage.Config{Dir: b.TempDir(), Durability: storage.DurabilitySync})
			if err != nil {
				b.Fatal(err)
			}
			r, err := New(Config{Region: "bench", Replica: "bench-1", Store: st, LikeLists: lists})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = r.Close(); _ = st.Close() })
			const batch = 1000
			runWriters(b, 16, "likes", func(ctx context.Context, i int64) error {
				ops := make([]Op, batch)
				for j := range ops {
					ops[j] = Op{Kind: OpLike, Item: "hot", User: "u" + strconv.FormatInt(i*batch+int64(j), 36)}
				}
				_, err := r.Do(ctx, ops)
				return err
			})
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "likes/s")
		})
	}
}
