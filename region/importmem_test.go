package region

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tally-dev/tally/storage"
)

// A long backfill of distinct keys spread over three years (the slots of
// the last 60 days and the trending sketches of the last month among
// them) leaves the replica's memory within its configured caps, whatever
// the spread: the vector cache holds at most CacheItems vectors, the
// trending sketches at most maxSketches per family, and Pebble's block
// cache and memtables at most what the store reserves for them. (What
// else an import holds, the batch's overlay, is dropped with the batch.)
func TestImportMemoryBoundedBySpread(t *testing.T) {
	ctx := context.Background()
	const cacheItems, cacheBytes, memTable = 640, 1 << 20, 1 << 20
	r, _ := openReplicaStore(t, storage.Config{Dir: t.TempDir(), CacheBytes: cacheBytes, MemTableBytes: memTable}, "A",
		func(c *Config) { c.CacheItems = cacheItems })
	now := time.Now().UnixMilli()
	const threeYears, sixtyDays = 3 * 365 * 24 * 3600 * 1000, 60 * 24 * 3600 * 1000
	rng := rand.New(rand.NewPCG(44, 4))
	const batches, perBatch = 8, 2000
	for b := range batches {
		ops := make([]Op, perBatch)
		for i := range ops {
			k := b*perBatch + i
			span := int64(threeYears)
			if k%3 == 0 {
				span = sixtyDays
			}
			at := now - 1 - rng.Int64N(span)
			// 100 classes: more than maxClasses, so "*" fills too.
			key := fmt.Sprintf("c%d:k%d", k%100, k)
			if k%2 == 0 {
				ops[i] = Op{Kind: OpIncr, Item: key, By: 1, IdemKey: fmt.Sprintf("imp.%d", k), At: at, Import: true}
			} else {
				ops[i] = Op{Kind: OpLike, Item: key, User: fmt.Sprintf("u%d", k%97), At: at, Import: true}
			}
		}
		res, err := r.Do(ctx, ops)
		if err != nil {
			t.Fatal(err)
		}
		for i := range res {
			if res[i].Err != nil {
				t.Fatalf("op %d: %v", i, res[i].Err)
			}
		}
	}
	// Everything was applied: the imports are in the totals.
	if rd, err := r.Counters().Get("c0:k0"); err != nil || rd.Value != 1 {
		t.Fatalf("c0:k0 = %d (%v), want 1", rd.Value, err)
	}
	if n := r.cache.len(); n == 0 || n > cacheItems {
		t.Errorf("vector cache holds %d vectors, want 1..%d (CacheItems)", n, cacheItems)
	}
	// Two families, one replica.
	if n, most := r.trends.len(), 2*maxSketches(); n == 0 || n > most {
		t.Errorf("%d trending sketches, want 1..%d", n, most)
	}
	// Each of them is of an interval its level keeps: none of the years
	// before.
	r.trends.mu.Lock()
	for k := range r.trends.m {
		kept := false
		for _, l := range trendLevels {
			kept = kept || k.width == l.width && (k.start+k.width+l.keep)*1000 >= now
		}
		if !kept {
			t.Errorf("a trending sketch of %s at width %ds: past its keep", time.Unix(k.start, 0).UTC(), k.width)
		}
	}
	r.trends.mu.Unlock()
	u, err := r.cfg.Store.MemoryUse()
	if err != nil {
		t.Fatal(err)
	}
	if most := int64(cacheBytes + 3*memTable); u.BlockCache+u.MemTables > most {
		t.Errorf("pebble holds %d bytes in its cache and memtables, want at most %d", u.BlockCache+u.MemTables, most)
	}
}
