package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/node"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
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

// eventsMixResult is one mix's outcome.
type eventsMixResult struct {
	Mix string
	// Approx: the run was on the approximate keys (--approx).
	Approx bool
	// Events is how many events were applied (acknowledged, durable);
	// loadResult's Counted how many changed a count: every incr, likes
	// with "changed":true.
	Events int64
	loadResult
	// Cost is what the run cost the in-process replica, and Value how
	// much its counters moved (with --approx; zero otherwise).
	Cost  benchCost
	Value int64
	// Total is the sum of the run's counters after it (with --approx):
	// what an approximate counter's error bound is relative to.
	Total int64
}

// Label names the run in the tables: the mix, and "~" for the
// approximate keys.
func (r *eventsMixResult) Label() string {
	if r.Approx {
		return r.Mix + "~"
	}
	return r.Mix
}

// benchCost is what the in-process replica wrote: commits (each one WAL
// fsync), WAL bytes, own entries handed to replication, and approximate
// increments written and skipped.
type benchCost struct {
	Commits, WALBytes         uint64
	Entries, Written, Skipped float64
}

// add folds another segment of the same mix and keys into r.
func (r *eventsMixResult) add(o *eventsMixResult) {
	r.Events += o.Events
	r.Requests += o.Requests
	r.Errors += o.Errors
	r.Units += o.Units
	r.Counted += o.Counted
	if r.FirstError == "" {
		r.FirstError = o.FirstError
	}
	r.Elapsed += o.Elapsed
	r.Latency.Merge(&o.Latency)
	r.Cost = benchCost{Commits: r.Cost.Commits + o.Cost.Commits, WALBytes: r.Cost.WALBytes + o.Cost.WALBytes,
		Entries: r.Cost.Entries + o.Cost.Entries, Written: r.Cost.Written + o.Cost.Written, Skipped: r.Cost.Skipped + o.Cost.Skipped}
	r.Value += o.Value
	r.Total = o.Total // the later segment's
}

func (c benchCost) sub(o benchCost) benchCost {
	return benchCost{Commits: c.Commits - o.Commits, WALBytes: c.WALBytes - o.WALBytes,
		Entries: c.Entries - o.Entries, Written: c.Written - o.Written, Skipped: c.Skipped - o.Skipped}
}

// EventsPerSec is the rate of applied events.
func (r *eventsMixResult) EventsPerSec() float64 { return perSec(r.Events, r.Elapsed) }

// CountedPerSec is the rate of counted events.
func (r *eventsMixResult) CountedPerSec() float64 { return perSec(r.Counted, r.Elapsed) }

func perSec(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// runEventsBench runs every mix against cfg.URL or an in-process replica,
// printing a row per mix (and memory samples, if asked) to out.
func runEventsBench(ctx context.Context, cfg eventsBenchConfig, out, logOut io.Writer) (_ []*eventsMixResult, err error) {
	base, target := strings.TrimSuffix(cfg.URL, "/"), cfg.URL
	var store func() (storage.MemoryUse, error)
	var measure func(keys []string) (benchCost, int64, error) // in-process only
	var tlsc *tls.Config
	if base == "" {
		log := cfg.logger(logOut)
		n, err := startBenchReplica(ctx, benchReplica{Durability: cfg.Durability, EventLog: cfg.EventLog, Windows: cfg.Windows,
			Approx: cfg.Approx, TLS: cfg.TLS, Limits: cfg.Limits}, log)
		if err != nil {
			return nil, err
		}
		defer func() {
			if err := n.stop(ctx); err != nil {
				log.Warn("stopping the in-process replica", "error", err)
			}
		}()
		base, tlsc = n.base, n.tls
		target = fmt.Sprintf("in-process replica at %s (durability %s, windows %q%s, data %s)", base, cfg.Durability, windowsFlag(cfg.Windows),
			cfg.edge(), n.dir)
		if cfg.Approx > 0 {
			target += fmt.Sprintf(", counters under %q approximate at %v", approxPrefix, cfg.Approx)
		}
		store = n.MemoryUse
		measure = func(keys []string) (benchCost, int64, error) { return measureNode(ctx, n, keys) }
	}
	if err := checkReady(ctx, base, tlsc); err != nil {
		return nil, err
	}
	if cfg.CPUProfile != "" {
		stop, err := startCPUProfile(cfg.CPUProfile)
		if err != nil {
			return nil, err
		}
		defer func() { err = errors.Join(err, stop()) }()
	}
	if cfg.MemProfile != "" {
		defer func() { err = errors.Join(err, writeAllocProfile(cfg.MemProfile)) }()
	}
	route := "POST /v1/events"
	if cfg.Import > 0 {
		route = fmt.Sprintf("POST /v1/admin/import (times spread over %s)", cfg.Import)
	}
	fmt.Fprintf(out, "bench events: %s, %d events per request (%s) on %d key(s), %d workers, %s per mix\n  %s\n\n",
		route, cfg.Batch, cfg.Format, cfg.Keys, cfg.Concurrency, cfg.Duration, target)
	var sampler *memSampler
	if cfg.MemEvery > 0 {
		sampler = startMemSampler(ctx, cfg.MemEvery, store, out)
	}
	var results []*eventsMixResult
	run := newRunID()
	keys := make([]string, cfg.Keys)
	approxKeys := make([]string, cfg.Keys)
	for i := range keys {
		keys[i] = benchKey(cfg.Item, i, cfg.Keys)
		approxKeys[i] = approxPrefix + keys[i]
	}
	if cfg.Start > 0 {
		all := keys
		if cfg.Approx > 0 {
			all = append(append([]string(nil), keys...), approxKeys...)
		}
		if err := startCounters(ctx, base, tlsc, cfg.Token, all, cfg.Start); err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "every counter key starts at %d\n\n", cfg.Start)
	}
	runs := 0
	for _, mix := range cfg.Mixes {
		// With --approx, incr and idem run on the exact keys and on the
		// approximate ones in turn, half the duration at a time, in the
		// order exact, approx, approx, exact: whatever drifts over a run
		// (the store grows, compactions start) then weighs on both alike.
		order, seg := []bool{false}, cfg.Duration
		if cfg.Approx > 0 && (mix == "incr" || mix == "idem") { // only counters are approximate
			order, seg = []bool{false, true, true, false}, cfg.Duration/2
		}
		var exact, approx *eventsMixResult
		for _, isApprox := range order {
			k := keys
			if isApprox {
				k = approxKeys
			}
			var before benchCost
			var value int64
			if measure != nil {
				if before, value, err = measure(k); err != nil {
					return results, err
				}
			}
			c := cfg
			c.Duration = seg
			r := (&eventsRun{cfg: c, base: base, tls: tlsc, mix: mix, users: fmt.Sprintf("%s.%d", run, runs), keys: k}).run(ctx)
			runs++
			r.Approx = isApprox
			if measure != nil {
				after, v, err := measure(k)
				if err != nil {
					return results, err
				}
				r.Cost, r.Value, r.Total = after.sub(before), v-value, v
			}
			acc := &exact
			if isApprox {
				acc = &approx
			}
			if *acc == nil {
				*acc = r
			} else {
				(*acc).add(r)
			}
			if ctx.Err() != nil {
				break
			}
		}
		results = append(results, exact)
		if approx != nil {
			results = append(results, approx)
		}
		if ctx.Err() != nil {
			break
		}
	}
	if sampler != nil {
		sampler.stop()
		sampler.summary(out)
		fmt.Fprintln(out)
	}
	const row = "%5v %9v %11v %7v %12v %12v %9v %9v %9v\n"
	fmt.Fprintf(out, row, "mix", "requests", "events", "errors", "events/s", "counted/s", "p50", "p99", "max")
	for _, r := range results {
		h := &r.Latency
		fmt.Fprintf(out, row, r.Label(), r.Requests, r.Events, r.Errors, fmt.Sprintf("%.0f", r.EventsPerSec()),
			fmt.Sprintf("%.0f", r.CountedPerSec()), ms(h.Quantile(0.5)), ms(h.Quantile(0.99)), ms(h.Max()))
	}
	if cfg.Approx > 0 {
		printApproxCosts(out, cfg, results)
	}
	for _, r := range results {
		if r.Errors > 0 {
			fmt.Fprintf(out, "mix %s: %d errors; first: %s\n", r.Mix, r.Errors, r.FirstError)
		}
	}
	if err := ctx.Err(); err != nil {
		return results, fmt.Errorf("bench events: interrupted: %w", err)
	}
	return results, nil
}

// startCPUProfile starts profiling this process into path; the returned
// function stops it and closes the file.
func startCPUProfile(path string) (func() error, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench: cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("bench: cpu profile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("bench: cpu profile: %w", err)
		}
		return nil
	}, nil
}

// writeAllocProfile writes the allocation profile (every allocation since
// the process started, sampled) to path.
func writeAllocProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: alloc profile: %w", err)
	}
	err = pprof.Lookup("allocs").WriteTo(f, 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("bench: alloc profile: %w", err)
	}
	return nil
}

// eventsRun is one mix in progress.
type eventsRun struct {
	cfg    eventsBenchConfig
	base   string
	tls    *tls.Config // trusted for https; nil: the system's roots
	mix    string
	users  string   // prefix of this mix's user ids
	keys   []string // the counters or items, round-robin
	client *http.Client
}

// eventsWorker is one worker's tally, merged when the mix ends.
type eventsWorker struct {
	id   int
	body []byte
	resp bytes.Buffer
	seq  int64
	rnd  uint64 // xorshift state for --users
	trnd uint64 // xorshift state for --import's times
	key  int    // next of eventsRun.keys
}

func (er *eventsRun) run(ctx context.Context) *eventsMixResult {
	conc := er.cfg.Concurrency
	client, closeIdle := newLoadClient(conc, er.tls, er.cfg.KeepAlive)
	defer closeIdle()
	er.client = client
	if er.mix == "spend" {
		if err := er.grantAll(ctx); err != nil {
			return &eventsMixResult{Mix: er.mix, loadResult: loadResult{Errors: 1, FirstError: oneLine(err)}}
		}
	}
	lr := runLoad(ctx, loadConfig{Workers: conc, Duration: er.cfg.Duration}, func(worker int) loadOp {
		w := &eventsWorker{id: worker, rnd: uint64(worker)*0x9e3779b97f4a7c15 + 1, trnd: uint64(worker)*0xbf58476d1ce4e5b9 + 7,
			key: worker * len(er.keys) / conc}
		return func(ctx context.Context) (int64, int64, error) {
			er.fill(w)
			return er.post(ctx, w)
		}
	})
	return &eventsMixResult{Mix: er.mix, Events: lr.Units, loadResult: lr}
}

// work sends batches until the mix's time runs out or ctx ends.

// grantAll grants every key's budget region.MaxBy, in batches of grant
// events, before a spend mix.
func (er *eventsRun) grantAll(ctx context.Context) error {
	w := &eventsWorker{}
	for keys := er.keys; len(keys) > 0; {
		batch := keys[:min(len(keys), maxBenchEventsBatch)]
		keys = keys[len(batch):]
		b := w.body[:0]
		for _, k := range batch {
			b = append(b, `{"type":"grant","key":"`...)
			b = append(b, k...)
			b = append(b, `","by":`...)
			b = strconv.AppendInt(b, region.MaxBy, 10)
			b = append(b, "}\n"...)
		}
		w.body = b
		if _, _, err := er.postBody(ctx, w, "ndjson", len(batch)); err != nil {
			return fmt.Errorf("granting the budgets: %w", err)
		}
	}
	return nil
}

// appendFreshID appends an id no event of this run used before: the run's
// prefix, the worker and the worker's next sequence number.
func (er *eventsRun) appendFreshID(b []byte, w *eventsWorker) []byte {
	b = append(b, er.users...)
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(w.id), 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, w.seq, 10)
	w.seq++
	return b
}

// fill writes the worker's next request body.
func (er *eventsRun) fill(w *eventsWorker) {
	b := w.body[:0]
	array := er.cfg.Format == "array"
	nowMs := time.Now().UnixMilli()
	if array {
		b = append(b, '[')
	}
	for i := range er.cfg.Batch {
		if array && i > 0 {
			b = append(b, ',')
		}
		key := er.keys[w.key]
		if w.key++; w.key == len(er.keys) {
			w.key = 0
		}
		switch er.mix {
		case "spend":
			b = append(b, `{"type":"spend","key":"`...)
			b = append(b, key...)
			b = append(b, '"')
		case "incr":
			b = append(b, `{"type":"incr","key":"`...)
			b = append(b, key...)
			b = append(b, '"')
		case "idem":
			b = append(b, `{"type":"incr","key":"`...)
			b = append(b, key...)
			b = append(b, `","idempotency_key":"`...)
			b = er.appendFreshID(b, w)
			b = append(b, '"')
		case "like", "unique":
			if er.mix == "like" {
				b = append(b, `{"type":"like","item":"`...)
			} else {
				b = append(b, `{"type":"unique","key":"`...)
			}
			b = append(b, key...)
			b = append(b, `","user":"`...)
			if er.cfg.Users > 0 {
				w.rnd ^= w.rnd << 13
				w.rnd ^= w.rnd >> 7
				w.rnd ^= w.rnd << 17
				b = append(b, er.users...)
				b = append(b, ".u"...)
				b = strconv.AppendUint(b, w.rnd%uint64(er.cfg.Users), 10)
			} else {
				b = er.appendFreshID(b, w)
			}
			b = append(b, '"')
		}
		if span := er.cfg.Import.Milliseconds(); span > 0 {
			w.trnd ^= w.trnd << 13
			w.trnd ^= w.trnd >> 7
			w.trnd ^= w.trnd << 17
			b = append(b, `,"at":`...)
			b = strconv.AppendInt(b, nowMs-int64(w.trnd%uint64(span)), 10)
		}
		b = append(b, '}')
		if !array {
			b = append(b, '\n')
		}
	}
	if array {
		b = append(b, ']')
	}
	w.body = b
}

// post sends the worker's body and returns how many events the replica
// applied and how many of those were counted.
func (er *eventsRun) post(ctx context.Context, w *eventsWorker) (applied, counted int64, err error) {
	return er.postBody(ctx, w, er.cfg.Format, er.cfg.Batch)
}

// postBody is post of a body of n events in format (ndjson or array).
func (er *eventsRun) postBody(ctx context.Context, w *eventsWorker, format string, n int) (applied, counted int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, er.cfg.Timeout)
	defer cancel()
	path := "/v1/events"
	if er.cfg.Import > 0 && er.mix != "spend" { // the grants before a spend mix are live
		path = "/v1/admin/import"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, er.base+path, bytes.NewReader(w.body))
	if err != nil {
		return 0, 0, err
	}
	if format == "ndjson" {
		req.Header.Set("Content-Type", "application/x-ndjson")
	} else {
		req.Header.Set("Content-Type", "application/json")
	}
	if er.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+er.cfg.Token)
	}
	resp, err := er.client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	w.resp.Reset()
	if _, err := w.resp.ReadFrom(resp.Body); err != nil {
		return 0, 0, fmt.Errorf("POST /v1/events: reading the answer: %w", err)
	}
	body := w.resp.Bytes()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("POST %s: %s: %s", path, resp.Status, bytes.TrimSpace(body[:min(len(body), 512)]))
	}
	applied, err = jsonIntField(body, "applied")
	if err != nil {
		return 0, 0, err
	}
	rejected, err := jsonIntField(body, "rejected")
	if err != nil {
		return 0, 0, err
	}
	if rejected > 0 {
		return 0, 0, fmt.Errorf("POST /v1/events: %d of %d events rejected: %s", rejected, n,
			bytes.TrimSpace(body[:min(len(body), 512)]))
	}
	switch er.mix {
	case "incr", "spend":
		return applied, applied, nil
	case "idem": // a duplicate key would not count; every key here is new
		return applied, applied - int64(bytes.Count(body, []byte(`"duplicate":true`))), nil
	case "unique": // every id is added; "changed" counts the ones that raised a register
		return applied, applied, nil
	}
	return applied, int64(bytes.Count(body, []byte(`"changed":true`))), nil
}

// jsonIntField finds "name":<integer> at the top of a response body (the
// events answer puts its counts before the results) without decoding the
// whole answer.
func jsonIntField(body []byte, name string) (int64, error) {
	key := `"` + name + `":`
	i := bytes.Index(body, []byte(key))
	if i < 0 {
		return 0, fmt.Errorf("POST /v1/events: no %q in the answer", name)
	}
	rest := body[i+len(key):]
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	n, err := strconv.ParseInt(string(rest[:j]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("POST /v1/events: bad %q in the answer: %w", name, err)
	}
	return n, nil
}

// measureNode reads what the in-process replica has written so far (its
// store's commits and WAL bytes, and from its /metrics the own entries
// handed to replication and the approximate increments written and
// skipped) and the sum of the counters keys.
func measureNode(ctx context.Context, n *benchServer, keys []string) (benchCost, int64, error) {
	ws, err := n.Store().WriteStats()
	if err != nil {
		return benchCost{}, 0, fmt.Errorf("bench: %w", err)
	}
	c := benchCost{Commits: ws.Commits, WALBytes: ws.WALBytes}
	hc, closeIdle := newControlClient(n.tls)
	defer closeIdle()
	cl, err := client.New(client.Config{BaseURL: n.base, HTTP: hc})
	if err != nil {
		return benchCost{}, 0, fmt.Errorf("bench: %w", err)
	}
	metrics, err := cl.Metrics(ctx)
	if err != nil {
		return benchCost{}, 0, fmt.Errorf("bench: %w", err)
	}
	c.Entries = metricValue(metrics, "tally_own_entries_changed_total", "")
	c.Written = metricValue(metrics, "tally_approx_increments_total", `outcome="written"`)
	c.Skipped = metricValue(metrics, "tally_approx_increments_total", `outcome="skipped"`)
	var sum int64
	for _, k := range keys {
		rd, err := n.Replica().Counter(k)
		if err != nil {
			return benchCost{}, 0, fmt.Errorf("bench: read counter %s: %w", k, err)
		}
		sum += rd.Value
	}
	return c, sum, nil
}

// metricValue sums the samples of metric name (as client.Metrics names
// them) whose labels contain labels ("": any).
func metricValue(metrics map[string]float64, name, labels string) float64 {
	sum := 0.0
	for series, v := range metrics {
		rest, ok := strings.CutPrefix(series, name)
		if ok && (rest == "" || rest[0] == '{') && strings.Contains(rest, labels) {
			sum += v
		}
	}
	return sum
}

// printApproxCosts prints, for each run, what it cost the replica and how
// far its counters ended from the increments sent (counted), relative to
// what was sent ("error") and to the counters' total ("of total", what an
// approximate counter's bound is relative to).
func printApproxCosts(out io.Writer, cfg eventsBenchConfig, results []*eventsMixResult) {
	fmt.Fprintf(out, "\nwhat each cost the replica (mix~: the same mix on keys under %q, approximate at %v):\n", approxPrefix, cfg.Approx)
	const row = "%5v %12v %9v %11v %10v %10v %9v %12v %12v %9v %9v\n"
	fmt.Fprintf(out, row, "mix", "events/s", "commits", "WAL bytes", "WAL B/ev", "entries", "skipped", "sent", "value", "error", "of total")
	for _, r := range results {
		if r.Mix == "like" {
			continue
		}
		skipped := "-"
		if r.Approx && r.Cost.Written+r.Cost.Skipped > 0 {
			skipped = fmt.Sprintf("%.1f%%", 100*r.Cost.Skipped/(r.Cost.Written+r.Cost.Skipped))
		}
		walPerEvent, errPct, totalPct := 0.0, "-", "-"
		if r.Events > 0 {
			walPerEvent = float64(r.Cost.WALBytes) / float64(r.Events)
		}
		if r.Counted > 0 {
			errPct = fmt.Sprintf("%+.3f%%", 100*float64(r.Value-r.Counted)/float64(r.Counted))
		}
		if r.Total > 0 {
			totalPct = fmt.Sprintf("%+.3f%%", 100*float64(r.Value-r.Counted)/float64(r.Total))
		}
		fmt.Fprintf(out, row, r.Label(), fmt.Sprintf("%.0f", r.EventsPerSec()), r.Cost.Commits, r.Cost.WALBytes,
			fmt.Sprintf("%.2f", walPerEvent), fmt.Sprintf("%.0f", r.Cost.Entries), skipped, r.Counted, r.Value, errPct, totalPct)
	}
}

// startCounters adds n to every key, in batches of POST /v1/events.
func startCounters(ctx context.Context, base string, tlsc *tls.Config, token string, keys []string, n int64) error {
	hc, closeIdle := newControlClient(tlsc)
	defer closeIdle()
	c, err := client.New(client.Config{BaseURL: base, Token: token, HTTP: hc})
	if err != nil {
		return fmt.Errorf("bench: --start: %w", err)
	}
	for len(keys) > 0 {
		batch := keys[:min(len(keys), maxBenchEventsBatch)]
		keys = keys[len(batch):]
		events := make([]client.Event, len(batch))
		for i, k := range batch {
			events[i] = client.Event{Type: client.EventIncr, Key: k, By: n}
		}
		res, err := c.Events(ctx, events)
		if err != nil {
			return fmt.Errorf("bench: --start: %w", err)
		}
		if res.Rejected > 0 {
			return fmt.Errorf("bench: --start: POST /v1/events: %d of %d events rejected", res.Rejected, len(batch))
		}
	}
	return nil
}
