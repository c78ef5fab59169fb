// The `tallyd bench events` command line: its config, defaults, keys,
// validation and flags.

package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/node"
	"github.com/tally-dev/tally/region"
)

// eventsBenchConfig is what `tallyd bench events` takes.
type eventsBenchConfig struct {
	// URL is the replica to load. Empty starts a standalone replica in
	// process on a temporary data directory, removed at the end. Default
	// empty.
	URL string
	// Mixes lists the event mixes run one after another:
	//   incr: every event is {"type":"incr","key":<item>} (by 1, no
	//         idempotency key), all on one hot counter (or Keys of them);
	//   idem: the same with a new idempotency key on every event (each
	//         is looked up and then stored by the replica);
	//   like: every event likes the hot item <item> (or one of Keys) by
	//         a user never seen before (so every event is counted), or
	//         with Users > 0 by a user drawn from a fixed set;
	//   spend: every event is {"type":"spend","key":<item>} (by 1, no
	//         idempotency key) from a budget (or Keys of them) granted
	//         2^40 first, so none runs out.
	// Default incr,like.
	Mixes []string
	// Batch is the number of events in one POST /v1/events. Default 10000
	// (the route's maximum).
	Batch int
	// Concurrency is how many workers each keep one request in flight over
	// their own keep-alive connection. Default 4.
	Concurrency int
	// Duration is how long each mix starts new requests; requests in flight
	// at the end finish and count. Default 10s.
	Duration time.Duration
	// Item is the hot item (and counter key). Default "hot".
	Item string
	// Keys, if > 1, spreads the events round-robin over the counters (or,
	// for likes, the items) <Item>-0 ... <Item>-<Keys-1>. Default 1: every
	// event is on Item.
	Keys int
	// Users, if > 0, makes likes pick their user uniformly from Users ids
	// shared by all workers, so repeats happen and are not counted. 0 (the
	// default): every like is by a new user.
	Users int
	// Format of request bodies: ndjson or array. Default ndjson.
	Format string
	// sharedConfig: Timeout (default 30s), Token, KeepAlive, and the
	// in-process replica's Durability, LogLevel, TLS and Limits.
	sharedConfig
	// EventLog keeps the in-process replica's event log, as tallyd does
	// by default. Default true.
	EventLog bool
	// Windows is the in-process replica's slot levels, as tallyd
	// serve --windows takes them ("" or "off": no slots). Default
	// tallyd's, "1s:3h,1m:15d,1h:3y".
	Windows string
	// MemEvery, if > 0, samples this process's memory (RSS and Go heap)
	// at this interval and prints each sample and a summary. With an
	// in-process replica that is the replica's memory plus the load
	// generator's (bounded: one body buffer per worker). Default 0 (off).
	MemEvery time.Duration
	// CPUProfile and MemProfile, if set, are files that receive a CPU
	// profile of the whole run and an allocation profile at its end (of
	// this process: with an in-process replica, server and load generator
	// both). Default none.
	CPUProfile, MemProfile string
	// Approx, if > 0, compares approximate counters with exact ones under
	// the same load: the in-process replica makes the counters under
	// approxPrefix approximate at this relative error, every incr and
	// idem mix runs on the exact keys and on the same keys under
	// approxPrefix, Duration each, in alternating halves (exact, approx,
	// approx, exact), and a second table shows what each cost
	// (commits, WAL bytes, own entries handed to replication) and how far
	// the counters ended from the increments sent. Default 0 (off).
	Approx float64
	// Import, if > 0, sends the batches to POST /v1/admin/import rather
	// than /v1/events, each event with an "at" drawn uniformly from the
	// Import before the request (a backfill spread over that much
	// history: with the idem mix and --keys as large as the run, every
	// event a key and a slot of its own). The spend mix is not imported.
	// With --url, --token must then be an admin token. Default 0 (off).
	Import time.Duration
	// Start, if > 0, first adds Start to every counter key of the run
	// (the exact ones and, with Approx, the approximate ones alike), in one
	// increment each, so the mixes run on counters of that size: a hot
	// counter's step depends on its size. Default 0.
	Start int64
}

// approxPrefix is the prefix of the keys bench events makes approximate
// (--approx).
const approxPrefix = "approx."

func defaultEventsBenchConfig() eventsBenchConfig {
	return eventsBenchConfig{
		Mixes:        []string{"incr", "like"},
		Batch:        10000,
		Concurrency:  4,
		Duration:     10 * time.Second,
		Item:         "hot",
		Keys:         1,
		Format:       "ndjson",
		sharedConfig: defaultSharedConfig(30 * time.Second),
		EventLog:     true,
		Windows:      node.DefaultConfig().Windows,
	}
}

// maxBenchEventsBatch is the route's own cap (httpapi.MaxBatchEvents).
const maxBenchEventsBatch = 10000

// maxBenchKeys bounds --keys.
const maxBenchKeys = 10_000_000

// benchKey is the i-th of n keys spread from item: item itself if n is 1.
func benchKey(item string, i, n int) string {
	if n <= 1 {
		return item
	}
	return item + "-" + strconv.Itoa(i)
}

// Validate reports every problem with c at once.
func (c eventsBenchConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.URL != "" {
		if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("--url %q: want http://host:port", c.URL)
		}
	}
	if len(c.Mixes) == 0 {
		bad("--mix: want at least one of incr, idem, like, unique, spend")
	}
	for _, m := range c.Mixes {
		if m != "incr" && m != "idem" && m != "like" && m != "unique" && m != "spend" {
			bad("--mix %q: want incr, idem, like, unique or spend", m)
		}
	}
	if c.Batch < 1 || c.Batch > maxBenchEventsBatch {
		bad("--batch %d: want 1..%d", c.Batch, maxBenchEventsBatch)
	}
	if c.Concurrency < 1 || c.Concurrency > maxBenchConcurrency {
		bad("--concurrency %d: want 1..%d", c.Concurrency, maxBenchConcurrency)
	}
	if c.Duration <= 0 || c.Duration > 24*time.Hour {
		bad("--duration %s: want more than 0 and at most 24h", c.Duration)
	}
	if !crdt.ValidID(c.Item) {
		bad("--item %q: want 1..128 bytes of [A-Za-z0-9_.:@-]", c.Item)
	}
	if c.Keys < 1 || c.Keys > maxBenchKeys {
		bad("--keys %d: want 1..%d", c.Keys, maxBenchKeys)
	} else if c.Keys > 1 && !crdt.ValidID(benchKey(c.Item, c.Keys-1, c.Keys)) {
		bad("--item %q: too long for --keys %d", c.Item, c.Keys)
	}
	if c.Users < 0 {
		bad("--users %d: want 0 (a new user per like) or more", c.Users)
	}
	if c.Format != "ndjson" && c.Format != "array" {
		bad("--format %q: want ndjson or array", c.Format)
	}
	c.sharedConfig.validate(bad)
	nc := node.DefaultConfig()
	nc.Windows = windowsFlag(c.Windows)
	if _, err := nc.WindowConfig(); err != nil {
		bad("--windows: %v", err)
	}
	if c.MemEvery < 0 {
		bad("--mem-every %s: want 0 (off) or more", c.MemEvery)
	}
	if c.Import < 0 {
		bad("--import %s: want 0 (off) or more", c.Import)
	}
	if c.Import > 0 {
		for _, m := range c.Mixes {
			if m == "spend" {
				bad("--import: the spend mix is not imported (budgets have no time windows)")
			}
		}
	}
	if c.Start < 0 || c.Start > region.MaxBy {
		bad("--start %d: want 0..%d", c.Start, int64(region.MaxBy))
	}
	if c.Approx != 0 {
		if !(c.Approx >= region.MinApproxError && c.Approx <= region.MaxApproxError) {
			bad("--approx %v: want a relative error in %v..%v (0: off)", c.Approx, region.MinApproxError, region.MaxApproxError)
		}
		if c.URL != "" {
			bad("--approx configures the in-process replica: leave --url out")
		}
		if !crdt.ValidID(approxPrefix + benchKey(c.Item, c.Keys-1, c.Keys)) {
			bad("--item %q: too long for --approx (keys get the prefix %q)", c.Item, approxPrefix)
		}
	}
	return errors.Join(errs...)
}

func parseEventsBench(args []string, getenv func(string) string, help io.Writer) (eventsBenchConfig, error) {
	cfg := defaultEventsBenchConfig()
	cfg.Token = getenv(envWriteToken)
	mixes := strings.Join(cfg.Mixes, ",")
	fs := newFlagSet("bench events", func(fs *flag.FlagSet) {
		fs.StringVar(&cfg.URL, "url", cfg.URL, "base `URL` of the replica to load (default: start one in process)")
		fs.StringVar(&mixes, "mix", mixes, "comma-separated event `mixes`, run one after another: incr (one hot counter), idem (the same, each with a new idempotency key), like (one hot item, new users), unique (ids into the keys' unique counts: new ids, or with --users N drawn from N), spend (spends of 1 from the keys' budgets, granted 2^40 first)")
		fs.IntVar(&cfg.Batch, "batch", cfg.Batch, "`events` per request (at most 10000)")
		fs.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "`workers`, each with one request in flight")
		fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long each mix sends requests")
		fs.StringVar(&cfg.Item, "item", cfg.Item, "the hot `item` (and counter key)")
		fs.IntVar(&cfg.Keys, "keys", cfg.Keys, "spread the events round-robin over `N` keys <item>-0 ... <item>-<N-1> (1: all on <item>)")
		fs.IntVar(&cfg.Users, "users", cfg.Users, "likes pick from `N` users (0: a new user for every like)")
		fs.StringVar(&cfg.Format, "format", cfg.Format, "request body `format`: ndjson or array")
		cfg.sharedConfig.bind(fs, "replica")
		fs.BoolVar(&cfg.EventLog, "event-log", cfg.EventLog, "keep the in-process replica's event log, as tallyd does by default")
		fs.StringVar(&cfg.Windows, "windows", cfg.Windows, "slot `levels` of the in-process replica, as tallyd serve --windows takes them (\"\" or off: none)")
		fs.DurationVar(&cfg.MemEvery, "mem-every", cfg.MemEvery, "print this process's RSS and Go heap at this `interval` (0: off)")
		fs.StringVar(&cfg.CPUProfile, "cpuprofile", cfg.CPUProfile, "write a CPU profile of the run to `file`")
		fs.StringVar(&cfg.MemProfile, "memprofile", cfg.MemProfile, "write an allocation profile at the end to `file`")
		fs.DurationVar(&cfg.Import, "import", cfg.Import, "send the batches to POST /v1/admin/import, every event at a time drawn from the `span` before now, e.g. 26280h for three years (0: live events to /v1/events)")
		fs.Int64Var(&cfg.Start, "start", cfg.Start, "first add `N` to every counter key (exact and approximate alike), so the mixes run on counters that size")
		fs.Float64Var(&cfg.Approx, "approx", cfg.Approx, "also run incr and idem on keys under "+approxPrefix+" made approximate at this relative `error` (e.g. 0.01), and compare their cost and error with the exact run (0: off)")
	})
	if err := parseBenchFlags(fs, args, help); err != nil {
		return cfg, err
	}
	cfg.Mixes = nil
	for _, m := range strings.Split(mixes, ",") {
		if m = strings.TrimSpace(m); m != "" {
			cfg.Mixes = append(cfg.Mixes, m)
		}
	}
	errs := []error{cfg.Validate()}
	if cfg.URL != "" {
		errs = append(errs, urlOnly(flagsSet(fs), []string{"tls", "limit"})...)
	}
	if err := errors.Join(errs...); err != nil {
		return cfg, usagef("bench events: %s", oneLine(err))
	}
	return cfg, nil
}

// benchEvents runs `tallyd bench events`.
func (c *cli) benchEvents(ctx context.Context, args []string) error {
	cfg, err := parseEventsBench(args, c.getenv, c.stdout)
	if err != nil {
		return err
	}
	_, err = runEventsBench(ctx, cfg, c.stdout, c.stderr)
	return err
}
