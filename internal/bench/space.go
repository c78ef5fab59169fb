package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

// spaceBenchConfig is what `tallyd bench space` takes.
type spaceBenchConfig struct {
	// Likes is the number of distinct (item, user) pairs liked. Default
	// 1,000,000.
	Likes int
	// Items spreads the likes round-robin over items <Item>-0 ...
	// <Item>-<Items-1>; 1 (the default) likes one item, <Item>.
	Items int
	// Item is the item name (or prefix). Default "post".
	Item string
	// UserPrefix starts every user id. Default "user-".
	UserPrefix string
	// UserIDs says what follows the prefix: "seq" (the user's number n,
	// so 1 to 7 digits for a million users: very compressible), "snowflake"
	// (a random 63-bit decimal number, 18-19 digits, like the ids of many
	// social platforms) or "uuid" (a random UUID, 36 bytes). Default seq.
	UserIDs string
	// LikeLists keeps the liker and liked-item index too, as tallyd does
	// by default. Default true.
	LikeLists bool
	// EventLog keeps the event log too, as tallyd does by default.
	// Default true.
	EventLog bool
}

func defaultSpaceBenchConfig() spaceBenchConfig {
	return spaceBenchConfig{Likes: 1_000_000, Items: 1, Item: "post", UserPrefix: "user-", UserIDs: "seq", LikeLists: true, EventLog: true}
}

// Validate reports every problem with c at once.
func (c spaceBenchConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Likes < 1 || c.Likes > 100_000_000 {
		bad("--likes %d: want 1..100000000", c.Likes)
	}
	if c.Items < 1 || c.Items > c.Likes {
		bad("--items %d: want 1..--likes", c.Items)
	}
	if !crdt.ValidID(c.Item) || len(c.Item) > 100 {
		bad("--item %q: want 1..100 bytes of [A-Za-z0-9_.:@-]", c.Item)
	}
	if !crdt.ValidID(c.UserPrefix) || len(c.UserPrefix) > 100 {
		bad("--user-prefix %q: want 1..100 bytes of [A-Za-z0-9_.:@-]", c.UserPrefix)
	}
	if c.UserIDs != "seq" && c.UserIDs != "snowflake" && c.UserIDs != "uuid" {
		bad("--user-ids %q: want seq, snowflake or uuid", c.UserIDs)
	}
	return errors.Join(errs...)
}

func parseSpaceBench(args []string, help io.Writer) (spaceBenchConfig, error) {
	cfg := defaultSpaceBenchConfig()
	fs := newFlagSet("bench space", func(fs *flag.FlagSet) {
		fs.IntVar(&cfg.Likes, "likes", cfg.Likes, "distinct (item, user) `pairs` to like")
		fs.IntVar(&cfg.Items, "items", cfg.Items, "spread the likes over `N` items")
		fs.StringVar(&cfg.Item, "item", cfg.Item, "the `item` (or, with --items > 1, the item prefix)")
		fs.StringVar(&cfg.UserPrefix, "user-prefix", cfg.UserPrefix, "`prefix` of every user id")
		fs.StringVar(&cfg.UserIDs, "user-ids", cfg.UserIDs, "what follows the prefix: seq, snowflake (random 63-bit decimal) or uuid")
		fs.BoolVar(&cfg.LikeLists, "like-lists", cfg.LikeLists, "keep the liker and liked-item index, as tallyd does by default")
		fs.BoolVar(&cfg.EventLog, "event-log", cfg.EventLog, "keep the event log (one event per like), as tallyd does by default")
	})
	if err := parseBenchFlags(fs, args, help); err != nil {
		return cfg, err
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usagef("bench space: %s", oneLine(err))
	}
	return cfg, nil
}

func (c *cli) benchSpace(ctx context.Context, args []string) error {
	cfg, err := parseSpaceBench(args, c.stdout)
	if err != nil {
		return err
	}
	_, err = runSpaceBench(ctx, cfg, c.stdout)
	return err
}

// spaceResult is what bench space measured.
type spaceResult struct {
	Likes      int
	TableBytes int64 // live sstables after a full compaction
}

// BytesPerLike is the on-disk state per liked pair.
func (r spaceResult) BytesPerLike() float64 { return float64(r.TableBytes) / float64(r.Likes) }

// runSpaceBench likes cfg.Likes distinct pairs through a replica on a fresh
// store, compacts it and reports the sstable bytes per pair.
func runSpaceBench(ctx context.Context, cfg spaceBenchConfig, out io.Writer) (res spaceResult, err error) {
	dir, err := os.MkdirTemp("", "tallyd-space-")
	if err != nil {
		return res, fmt.Errorf("bench space: temp dir: %w", err)
	}
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	// Durability does not change what is stored, only when commits return.
	st, err := storage.Open(storage.Config{Dir: dir, Durability: storage.DurabilityNone})
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	rep, err := region.New(region.Config{Region: "bench", Replica: "bench-1", Store: st, LikeLists: cfg.LikeLists, EventLog: cfg.EventLog})
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, rep.Close()) }()

	fmt.Fprintf(out, "bench space: %d likes by distinct users %s<%s> on %d item(s), replica bench-1, like lists %v, event log %v\n",
		cfg.Likes, cfg.UserPrefix, cfg.UserIDs, cfg.Items, cfg.LikeLists, cfg.EventLog)
	rng := rand.New(rand.NewPCG(1, 2)) // the same ids every run
	user := func(n int) string {
		switch cfg.UserIDs {
		case "snowflake":
			return cfg.UserPrefix + strconv.FormatUint(rng.Uint64()>>1, 10)
		case "uuid":
			var u uuid.UUID
			for i := range u {
				u[i] = byte(rng.Uint32())
			}
			u[6], u[8] = u[6]&0x0f|0x40, u[8]&0x3f|0x80 // version 4, RFC 4122 variant
			return cfg.UserPrefix + u.String()
		}
		return cfg.UserPrefix + strconv.Itoa(n)
	}
	start := time.Now()
	const batch = 4096
	ops := make([]region.Op, 0, batch)
	items := make([]string, cfg.Items)
	for i := range items {
		items[i] = cfg.Item
		if cfg.Items > 1 {
			items[i] = cfg.Item + "-" + strconv.Itoa(i)
		}
	}
	for n := 0; n < cfg.Likes; {
		ops = ops[:0]
		for ; n < cfg.Likes && len(ops) < batch; n++ {
			ops = append(ops, region.Op{Kind: region.OpLike, Item: items[n%len(items)], User: user(n)})
		}
		rs, err := rep.Do(ctx, ops)
		if err != nil {
			return res, fmt.Errorf("bench space: %w", err)
		}
		for i, r := range rs {
			if r.Err != nil {
				return res, fmt.Errorf("bench space: like %s/%s: %w", ops[i].Item, ops[i].User, r.Err)
			}
			if !r.Changed { // a random id drawn twice: count what is stored
				res.Likes--
			}
		}
	}
	liked := time.Since(start)
	if err := st.Compact(ctx); err != nil {
		return res, fmt.Errorf("bench space: %w", err)
	}
	tb, err := st.TableBytes()
	if err != nil {
		return res, fmt.Errorf("bench space: %w", err)
	}
	res.Likes += cfg.Likes
	res.TableBytes = tb
	fmt.Fprintf(out, "  liked in %s, compacted in %s\n", liked.Round(time.Millisecond), (time.Since(start) - liked).Round(time.Millisecond))
	fmt.Fprintf(out, "  sstables: %d bytes for %d liked pairs = %.1f bytes per pair\n", tb, res.Likes, res.BytesPerLike())
	return res, nil
}
