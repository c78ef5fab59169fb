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
	// Uniques, if > 0, measures unique counts instead of likes: Uniques
	// distinct ids (named as the users are) are added to the unique count
	// of each of the Items keys, and the report is bytes per key.
	Uniques int
	// UniquesWindows keeps the unique counts' default slots (an
	// hourly and a daily sketch beside each key's), as tallyd does by
	// default. Default true.
	UniquesWindows bool
}

func defaultSpaceBenchConfig() spaceBenchConfig {
	return spaceBenchConfig{Likes: 1_000_000, Items: 1, Item: "post", UserPrefix: "user-", UserIDs: "seq", LikeLists: true, EventLog: true, UniquesWindows: true}
}

// Validate reports every problem with c at once.
func (c spaceBenchConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Likes < 1 || c.Likes > 100_000_000 {
		bad("--likes %d: want 1..100000000", c.Likes)
	}
	if c.Uniques < 0 || c.Uniques > 100_000_000 {
		bad("--uniques %d: want 0 (likes) or 1..100000000 ids per key", c.Uniques)
	}
	if c.Uniques > 0 {
		if c.Items < 1 || c.Items > 1_000_000 || c.Items*c.Uniques > 100_000_000 {
			bad("--items %d: want 1..1000000 keys and at most 100000000 ids in all", c.Items)
		}
	} else if c.Items < 1 || c.Items > c.Likes {
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
		fs.IntVar(&cfg.Uniques, "uniques", cfg.Uniques, "instead of likes, add `N` distinct ids to the unique count of each of --items keys and report bytes per key")
		fs.BoolVar(&cfg.UniquesWindows, "uniques-windows", cfg.UniquesWindows, "with --uniques, keep the default hourly and daily slot sketches too, as tallyd does by default")
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
	Keys, IDs  int   // with --uniques: unique-count keys and ids per key
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
	rcfg := region.Config{Region: "bench", Replica: "bench-1", Store: st, LikeLists: cfg.LikeLists, EventLog: cfg.EventLog}
	if !cfg.UniquesWindows {
		rcfg.Windows = region.DefaultWindows()
		rcfg.Windows.Uniques = []region.WindowLevel{} // empty, not nil: none
	}
	rep, err := region.New(rcfg)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, rep.Close()) }()
	if cfg.Uniques > 0 {
		return runUniquesSpace(ctx, cfg, st, rep, out)
	}

	fmt.Fprintf(out, "bench space: %d likes by distinct users %s<%s> on %d item(s), replica bench-1, like lists %v, event log %v\n",
		cfg.Likes, cfg.UserPrefix, cfg.UserIDs, cfg.Items, cfg.LikeLists, cfg.EventLog)
	user := userIDs(cfg)
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

// userIDs returns the n-th user id of cfg.UserIDs, the same every run.
func userIDs(cfg spaceBenchConfig) func(n int) string {
	rng := rand.New(rand.NewPCG(1, 2))
	return func(n int) string {
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
}

// runUniquesSpace adds cfg.Uniques distinct ids to each of cfg.Items keys'
// unique counts, compacts, and reports the sstable bytes per key.
func runUniquesSpace(ctx context.Context, cfg spaceBenchConfig, st *storage.Store, rep *region.Replica, out io.Writer) (res spaceResult, err error) {
	fmt.Fprintf(out, "bench space: %d distinct ids %s<%s> into each of %d unique count(s), replica bench-1, slot sketches %v\n",
		cfg.Uniques, cfg.UserPrefix, cfg.UserIDs, cfg.Items, cfg.UniquesWindows)
	user := userIDs(cfg)
	start := time.Now()
	const perDo = 40_000 // ids per Do call, in ops of at most region.MaxUniqueIDs
	var ops []region.Op
	n, pending := 0, 0
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		rs, err := rep.Do(ctx, ops)
		if err != nil {
			return fmt.Errorf("bench space: %w", err)
		}
		for i, r := range rs {
			if r.Err != nil {
				return fmt.Errorf("bench space: uniques %s: %w", ops[i].Item, r.Err)
			}
		}
		ops, pending = ops[:0], 0
		return nil
	}
	for k := 0; k < cfg.Items; k++ {
		key := cfg.Item
		if cfg.Items > 1 {
			key = cfg.Item + "-" + strconv.Itoa(k)
		}
		for left := cfg.Uniques; left > 0; {
			m := min(left, region.MaxUniqueIDs, perDo-pending)
			ids := make([]string, m)
			for i := range ids {
				ids[i] = user(n)
				n++
			}
			ops = append(ops, region.Op{Kind: region.OpUniques, Item: key, IDs: ids})
			left, pending = left-m, pending+m
			if pending >= perDo {
				if err := flush(); err != nil {
					return res, err
				}
			}
		}
	}
	if err := flush(); err != nil {
		return res, err
	}
	added := time.Since(start)
	if err := st.Compact(ctx); err != nil {
		return res, fmt.Errorf("bench space: %w", err)
	}
	tb, err := st.TableBytes()
	if err != nil {
		return res, fmt.Errorf("bench space: %w", err)
	}
	res.Keys, res.IDs, res.TableBytes = cfg.Items, cfg.Uniques, tb
	fmt.Fprintf(out, "  added in %s, compacted in %s\n", added.Round(time.Millisecond), (time.Since(start) - added).Round(time.Millisecond))
	fmt.Fprintf(out, "  sstables: %d bytes for %d keys of %d ids = %.0f bytes per key (%.3g per id)\n",
		tb, res.Keys, res.IDs, float64(tb)/float64(res.Keys), float64(tb)/float64(res.Keys)/float64(res.IDs))
	return res, nil
}
