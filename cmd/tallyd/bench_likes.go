package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/crdt"
)

// likesBenchConfig is what `tallyd bench likes` takes.
type likesBenchConfig struct {
	// URL is the replica to load, e.g. http://127.0.0.1:8081. Empty starts
	// a standalone replica in process, on a temporary data directory (under
	// $TMPDIR) removed at the end. Default empty.
	URL string
	// Concurrency lists the levels run one after another: at level n, n
	// workers each send one request at a time over their own keep-alive
	// connection. Default 1,16,256.
	Concurrency []int
	// Duration is how long each level starts new requests; requests in
	// flight at the end finish and count. Default 10s.
	Duration time.Duration
	// MaxRequests also ends a level once this many requests were started;
	// 0 means no limit. Default 0.
	MaxRequests int64
	// Item is the liked item. Default "hot".
	Item string
	// Zipf, if > 0, spreads likes over the items <Item>-0 ... <Item>-<Zipf-1>
	// with Zipf-distributed popularity (s = 1.1) instead of one hot item.
	// Default 0.
	Zipf int
	// Timeout bounds one request. Default 10s.
	Timeout time.Duration
	// Token is sent as a bearer token. Default: env TALLY_WRITE_TOKEN.
	Token string
	// Durability of the in-process replica: fsync or none. Default fsync.
	Durability string
	// LogLevel of the in-process replica. Default "error".
	LogLevel string
}

func defaultLikesBenchConfig() likesBenchConfig {
	return likesBenchConfig{
		Concurrency: []int{1, 16, 256},
		Duration:    10 * time.Second,
		Item:        "hot",
		Timeout:     10 * time.Second,
		Durability:  "fsync",
		LogLevel:    "error",
	}
}

// maxBenchConcurrency bounds a level's workers (and so its connections).
const maxBenchConcurrency = 10000

// Validate reports every problem with c at once.
func (c likesBenchConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.URL != "" {
		if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("--url %q: want http://host:port", c.URL)
		}
	}
	if len(c.Concurrency) == 0 {
		bad("--concurrency: want at least one level, e.g. 1,16,256")
	}
	for _, n := range c.Concurrency {
		if n < 1 || n > maxBenchConcurrency {
			bad("--concurrency %d: want 1..%d", n, maxBenchConcurrency)
		}
	}
	if c.Duration <= 0 || c.Duration > time.Hour {
		bad("--duration %s: want more than 0 and at most 1h", c.Duration)
	}
	if c.MaxRequests < 0 {
		bad("--requests %d: want 0 (no limit) or more", c.MaxRequests)
	}
	if !crdt.ValidID(c.Item) || len(c.Item) > 100 {
		bad("--item %q: want 1..100 bytes of [A-Za-z0-9_.:@-]", c.Item)
	}
	if c.Zipf < 0 || c.Zipf == 1 {
		bad("--zipf %d: want 0 (one hot item) or at least 2 items", c.Zipf)
	}
	if c.Timeout <= 0 {
		bad("--timeout %s: want more than 0", c.Timeout)
	}
	if !validToken(c.Token) {
		bad("--token: must be printable ASCII without spaces")
	}
	if c.Durability != "fsync" && c.Durability != "none" {
		bad("--durability %q: want fsync or none", c.Durability)
	}
	if hclog.LevelFromString(c.LogLevel) == hclog.NoLevel {
		bad("--log-level %q: want trace, debug, info, warn or error", c.LogLevel)
	}
	return errors.Join(errs...)
}

func parseLikesBench(args []string, getenv func(string) string, help io.Writer) (likesBenchConfig, error) {
	cfg := defaultLikesBenchConfig()
	cfg.Token = getenv(envWriteToken)
	conc := "1,16,256"
	fs := newFlagSet("bench likes", func(fs *flag.FlagSet) {
		fs.StringVar(&cfg.URL, "url", cfg.URL, "base `URL` of the replica to load (default: start one in process)")
		fs.StringVar(&conc, "concurrency", conc, "comma-separated concurrency `levels`, run one after another")
		fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long each level sends requests")
		fs.Int64Var(&cfg.MaxRequests, "requests", cfg.MaxRequests, "also end a level after this many `requests` (0: no limit)")
		fs.StringVar(&cfg.Item, "item", cfg.Item, "the liked `item`")
		fs.IntVar(&cfg.Zipf, "zipf", cfg.Zipf, "spread likes over `N` items <item>-0..<item>-N-1 by a Zipf law (0: one hot item)")
		fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "bound on one request")
		fs.StringVar(&cfg.Token, "token", cfg.Token, "bearer `token` for the write route (env "+envWriteToken+")")
		fs.StringVar(&cfg.Durability, "durability", cfg.Durability, "`mode` of the in-process replica: fsync or none")
		fs.StringVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "log `level` of the in-process replica")
	})
	if err := parseBenchFlags(fs, args, help); err != nil {
		return cfg, err
	}
	var err error
	if cfg.Concurrency, err = parseInts(conc); err != nil {
		return cfg, usagef("bench likes: --concurrency: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usagef("bench likes: %s", oneLine(err))
	}
	return cfg, nil
}

// benchLikes runs `tallyd bench likes`.
func (c *cli) benchLikes(ctx context.Context, args []string) error {
	cfg, err := parseLikesBench(args, c.getenv, c.stdout)
	if err != nil {
		return err
	}
	_, err = runLikesBench(ctx, cfg, c.stdout, c.stderr)
	return err
}

// likesLevelResult is one concurrency level's outcome.
type likesLevelResult struct {
	Concurrency int
	Requests    int64 // started and finished, ok or not
	Errors      int64 // transport failures and non-2xx answers
	FirstError  string
	Elapsed     time.Duration // first request start to last request end
	Latency     histogram     // of successful requests only
}

// OKPerSec is the rate of successful requests.
func (r *likesLevelResult) OKPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests-r.Errors) / r.Elapsed.Seconds()
}

// runLikesBench runs every level against cfg.URL or an in-process replica,
// printing a table to out as levels finish.
func runLikesBench(ctx context.Context, cfg likesBenchConfig, out, logOut io.Writer) ([]*likesLevelResult, error) {
	base, target := strings.TrimSuffix(cfg.URL, "/"), cfg.URL
	if base == "" {
		log := hclog.New(&hclog.LoggerOptions{Name: "tallyd", Level: hclog.LevelFromString(cfg.LogLevel), Output: logOut})
		n, dir, err := startBenchReplica(ctx, cfg.Durability, log)
		if err != nil {
			return nil, err
		}
		defer func() {
			if err := stopBenchReplica(ctx, n, dir); err != nil {
				log.Warn("stopping the in-process replica", "error", err)
			}
		}()
		base = "http://" + n.Addr().String()
		target = fmt.Sprintf("in-process replica at %s (durability %s, data %s)", base, cfg.Durability, dir)
	}
	if err := checkReady(ctx, base); err != nil {
		return nil, err
	}
	what := fmt.Sprintf("item %q", cfg.Item)
	if cfg.Zipf > 0 {
		what = fmt.Sprintf("%d items %s-0..%s-%d (Zipf s=1.1)", cfg.Zipf, cfg.Item, cfg.Item, cfg.Zipf-1)
	}
	fmt.Fprintf(out, "bench likes: PUT /v1/likes/{item}/{new user} on %s\n  %s, %s per level\n\n", what, target, cfg.Duration)
	// Fixed widths, since each row prints as soon as its level ends.
	const row = "%11v %9v %7v %8v %9v %9v %9v %9v\n"
	fmt.Fprintf(out, row, "concurrency", "requests", "errors", "ok/s", "p50", "p99", "p999", "max")
	var results []*likesLevelResult
	run := newRunID()
	for i, conc := range cfg.Concurrency {
		lv := &likesLevel{cfg: cfg, base: base, users: fmt.Sprintf("%s.%d", run, i), conc: conc}
		r := lv.run(ctx)
		results = append(results, r)
		h := &r.Latency
		fmt.Fprintf(out, row, conc, r.Requests, r.Errors, fmt.Sprintf("%.0f", r.OKPerSec()),
			ms(h.Quantile(0.50)), ms(h.Quantile(0.99)), ms(h.Quantile(0.999)), ms(h.Max()))
		if err := ctx.Err(); err != nil {
			return results, fmt.Errorf("bench likes: interrupted: %w", err)
		}
	}
	for _, r := range results {
		if r.Errors > 0 {
			fmt.Fprintf(out, "concurrency %d: %d errors; first: %s\n", r.Concurrency, r.Errors, r.FirstError)
		}
	}
	return results, nil
}

// newRunID is a random tag that keeps this run's users apart from any
// earlier run's against the same replica.
func newRunID() string { return "b" + strconv.FormatUint(rand.Uint64()&0xffffffffff, 36) }

// startBenchReplica starts a standalone replica on a fresh temporary
// directory, listening on a free loopback port.
func startBenchReplica(ctx context.Context, durability string, log hclog.Logger) (*node, string, error) {
	dir, err := os.MkdirTemp("", "tallyd-bench-")
	if err != nil {
		return nil, "", fmt.Errorf("bench: temp data dir: %w", err)
	}
	cfg := DefaultConfig()
	cfg.Region, cfg.Replica, cfg.DataDir = "bench", "bench-1", dir
	cfg.Listen, cfg.Durability = "127.0.0.1:0", durability
	n, err := startNode(ctx, cfg, nodeOptions{Logger: log})
	if err != nil {
		return nil, "", errors.Join(err, os.RemoveAll(dir))
	}
	return n, dir, nil
}

// stopBenchReplica closes n and removes its data directory.
func stopBenchReplica(ctx context.Context, n *node, dir string) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	return errors.Join(n.Close(sctx), os.RemoveAll(dir))
}

// checkReady fails unless base answers GET /readyz with 200.
func checkReady(ctx context.Context, base string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("bench: %s not reachable: %w", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("bench: %s/readyz: %s: %s", base, resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// likesLevel is one concurrency level in progress.
type likesLevel struct {
	cfg    likesBenchConfig
	base   string
	users  string // prefix of this level's user ids
	conc   int
	client *http.Client
	stopAt time.Time
	issued atomic.Int64
}

// likesWorker is one worker's tally, merged when the level ends.
type likesWorker struct {
	id       int
	requests int64
	errors   int64
	firstErr error
	latency  histogram
}

func (lv *likesLevel) run(ctx context.Context) *likesLevelResult {
	tr := &http.Transport{
		MaxIdleConns:        lv.conc,
		MaxIdleConnsPerHost: lv.conc,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	lv.client = &http.Client{Transport: tr}
	workers := make([]*likesWorker, lv.conc)
	var wg sync.WaitGroup
	start := time.Now()
	lv.stopAt = start.Add(lv.cfg.Duration)
	for i := range workers {
		w := &likesWorker{id: i}
		workers[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			lv.work(ctx, w)
		}()
	}
	wg.Wait()
	res := &likesLevelResult{Concurrency: lv.conc, Elapsed: time.Since(start)}
	for _, w := range workers {
		res.Requests += w.requests
		res.Errors += w.errors
		if w.firstErr != nil && res.FirstError == "" {
			res.FirstError = oneLine(w.firstErr)
		}
		res.Latency.Merge(&w.latency)
	}
	return res
}

// work sends likes until the level's time or request budget runs out or
// ctx ends.
func (lv *likesLevel) work(ctx context.Context, w *likesWorker) {
	var pick func() string
	if lv.cfg.Zipf > 0 {
		z := rand.NewZipf(rand.New(rand.NewPCG(rand.Uint64(), uint64(w.id))), 1.1, 1, uint64(lv.cfg.Zipf-1))
		pick = func() string { return lv.cfg.Item + "-" + strconv.FormatUint(z.Uint64(), 10) }
	} else {
		pick = func() string { return lv.cfg.Item }
	}
	prefix := "/v1/likes/"
	userPrefix := lv.users + "." + strconv.Itoa(w.id) + "."
	for seq := 0; ctx.Err() == nil && time.Now().Before(lv.stopAt); seq++ {
		if lv.cfg.MaxRequests > 0 && lv.issued.Add(1) > lv.cfg.MaxRequests {
			return
		}
		path := prefix + pick() + "/" + userPrefix + strconv.Itoa(seq)
		t0 := time.Now()
		err := lv.put(ctx, path)
		d := time.Since(t0)
		if err != nil && ctx.Err() != nil {
			return // interrupted, not a failure of the server
		}
		w.requests++
		if err != nil {
			w.errors++
			if w.firstErr == nil {
				w.firstErr = err
			}
			continue
		}
		w.latency.Record(d)
	}
}

// put sends one like and reads the whole answer, so the connection is
// reused.
func (lv *likesLevel) put(ctx context.Context, path string) error {
	ctx, cancel := context.WithTimeout(ctx, lv.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, lv.base+path, nil)
	if err != nil {
		return err
	}
	if lv.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+lv.cfg.Token)
	}
	resp, err := lv.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("PUT %s: %s: %s", path, resp.Status, bytes.TrimSpace(body))
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}
