package bench

import (
	"bytes"
	"context"
	"crypto/tls"
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
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/node"
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
	// Item is the liked item, or with Items > 1 the prefix of the items
	// <Item>-0 ... <Item>-<Items-1>. Default "hot".
	Item string
	// Items is how many items the likes go to: 1 is a single hot item,
	// more draws each like's item by Zipf (s = Zipf). Default 1.
	Items int
	// Zipf is the exponent s of the items' popularity: item k is drawn with
	// probability proportional to 1/(k+1)^s, so <Item>-0 is the hottest.
	// 0 draws items uniformly; otherwise it must be above 1 (what
	// math/rand's Zipf takes). Used only with Items > 1. Default 1.1.
	Zipf float64
	// Users, if > 0, draws each like's user uniformly from that many users
	// of the level, so a user may like an item twice and the second like
	// changes nothing (like Redis's __rand_int__ with -r). 0 gives every
	// like a new user, so every like counts. Default 0.
	Users int64
	// Read sends GET /v1/likes/{item} instead of likes, after one like
	// of every item (as a user of the run) so that each has a count: the
	// read path under the same load, items and connections as the likes.
	// Counted is then how many answers carried a count of 1 or more.
	// Default false.
	Read bool
	// Format of the results on stdout: "table" for people, "csv" (a header,
	// then one row per level as it ends) or "json" (one object at the end)
	// for scripts. With csv and json the description goes to stderr, so
	// stdout holds only the data. Default "table".
	Format string
	// sharedConfig: Timeout (default 10s), Token, KeepAlive, and the
	// in-process replica's Durability, LogLevel, TLS and Limits.
	sharedConfig
}

func defaultLikesBenchConfig() likesBenchConfig {
	return likesBenchConfig{
		Concurrency:  []int{1, 16, 256},
		Duration:     10 * time.Second,
		Item:         "hot",
		Items:        1,
		Zipf:         1.1,
		Format:       "table",
		sharedConfig: defaultSharedConfig(10 * time.Second),
	}
}

const (
	// maxBenchConcurrency bounds a level's workers (and so its connections).
	maxBenchConcurrency = 10000
	// maxBenchItems keeps item ids within the 128 bytes tally accepts.
	maxBenchItems = 1 << 30
)

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
	if c.Items < 1 || c.Items > maxBenchItems {
		bad("--items %d: want 1..%d", c.Items, maxBenchItems)
	}
	if c.Zipf != 0 && !(c.Zipf > 1 && c.Zipf <= 100) {
		bad("--zipf %g: want 0 (uniform) or an exponent s with 1 < s <= 100", c.Zipf)
	}
	if c.Users < 0 {
		bad("--users %d: want 0 (a new user per like) or more", c.Users)
	}
	switch c.Format {
	case "table", "csv", "json":
	default:
		bad("--format %q: want table, csv or json", c.Format)
	}
	c.sharedConfig.validate(bad)
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
		fs.IntVar(&cfg.Items, "items", cfg.Items, "spread likes over `N` items <item>-0..<item>-N-1 (1: the one hot item <item>)")
		fs.Float64Var(&cfg.Zipf, "zipf", cfg.Zipf, "Zipf exponent `s` (> 1) of the items' popularity with --items > 1; 0 is uniform")
		fs.Int64Var(&cfg.Users, "users", cfg.Users, "draw each like's user at random from `N` users (0: a new user per like, so every like counts)")
		fs.BoolVar(&cfg.Read, "read", cfg.Read, "read: GET /v1/likes/{item} instead of likes, after one like of every item")
		fs.StringVar(&cfg.Format, "format", cfg.Format, "results on stdout as `table`, csv or json (csv and json: description on stderr)")
		cfg.sharedConfig.bind(fs, "replica")
	})
	if err := parseBenchFlags(fs, args, help); err != nil {
		return cfg, err
	}
	var err error
	if cfg.Concurrency, err = parseInts(conc); err != nil {
		return cfg, usagef("bench likes: --concurrency: %v", err)
	}
	errs := []error{cfg.Validate()}
	if cfg.URL != "" {
		errs = append(errs, urlOnly(flagsSet(fs), []string{"tls", "limit"})...)
	}
	// --zipf used to take the number of items; say so rather than quietly
	// loading one hot item with an exponent nobody meant.
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "zipf" && cfg.Items == 1 {
			errs = append(errs, fmt.Errorf("--zipf %g has no effect with one item: give --items N (--zipf is the exponent s)", cfg.Zipf))
		}
	})
	if err := errors.Join(errs...); err != nil {
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
	// loadResult's Counted is how many successful likes changed the like
	// set ("changed":true): all of them with a new user per like, fewer
	// when --users makes a user like an item twice.
	loadResult
}

// OKPerSec is the rate of successful requests.
func (r *likesLevelResult) OKPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests-r.Errors) / r.Elapsed.Seconds()
}

// runLikesBench runs every level against cfg.URL or an in-process replica,
// writing each level's figures to out, in cfg.Format, as it finishes.
// logOut gets the replica's log and, for csv and json, the description.
func runLikesBench(ctx context.Context, cfg likesBenchConfig, out, logOut io.Writer) ([]*likesLevelResult, error) {
	base, target := strings.TrimSuffix(cfg.URL, "/"), cfg.URL
	var tlsc *tls.Config
	if base == "" {
		log := cfg.logger(logOut)
		s, err := startBenchReplica(ctx, benchReplica{Durability: cfg.Durability, EventLog: true, Windows: node.DefaultConfig().Windows,
			TLS: cfg.TLS, Limits: cfg.Limits}, log)
		if err != nil {
			return nil, err
		}
		defer func() {
			if err := s.stop(ctx); err != nil {
				log.Warn("stopping the in-process replica", "error", err)
			}
		}()
		base, tlsc = s.base, s.tls
		target = fmt.Sprintf("in-process replica at %s (durability %s%s, data %s)", base, cfg.Durability, cfg.edge(), s.dir)
	}
	if err := checkReady(ctx, base, tlsc); err != nil {
		return nil, err
	}
	rep := newLikesReporter(cfg, target, out, logOut)
	if err := rep.begin(); err != nil {
		return nil, err
	}
	var results []*likesLevelResult
	run := newRunID()
	if cfg.Read {
		if err := seedReads(ctx, cfg, base, tlsc, run); err != nil {
			return nil, err
		}
	}
	for i, conc := range cfg.Concurrency {
		lv := &likesLevel{cfg: cfg, base: base, tls: tlsc, users: fmt.Sprintf("%s.%d", run, i), conc: conc}
		r := lv.run(ctx)
		results = append(results, r)
		if err := rep.level(r); err != nil {
			return results, err
		}
		if err := ctx.Err(); err != nil {
			// What finished still reaches the script reading stdout.
			return results, errors.Join(fmt.Errorf("bench likes: interrupted: %w", err), rep.end(results))
		}
	}
	return results, rep.end(results)
}

// newRunID is a random tag that keeps this run's users apart from any
// earlier run's against the same replica.
func newRunID() string { return "b" + strconv.FormatUint(rand.Uint64()&0xffffffffff, 36) }

// benchReplica is what an in-process replica differs in from tallyd's
// defaults.
type benchReplica struct {
	Durability string // fsync or none
	// EventLog keeps the event log (no NATS: nothing publishes it).
	EventLog bool
	// Windows is node.Config.Windows; "off" is "" (no slots).
	Windows string
	// Approx, if > 0, makes the counters under approxPrefix approximate
	// at this relative error.
	Approx float64
	// TLS serves HTTPS with a certificate made for the run.
	TLS bool
	// Limits are node.Config.Limits.
	Limits []node.LimitConfig
}

// windowsFlag is the node.Config.Windows a --windows flag stands for.
func windowsFlag(s string) string {
	if s == "off" {
		return ""
	}
	return s
}

// benchServer is an in-process standalone replica and how to reach it.
type benchServer struct {
	*node.Node
	dir     string      // its data directory
	certDir string      // its certificate's directory; "" without TLS
	base    string      // http://addr or https://addr
	tls     *tls.Config // what a client needs to trust it; nil without TLS
}

// startBenchReplica starts a standalone replica on a fresh temporary
// directory, listening on a free loopback port.
func startBenchReplica(ctx context.Context, rc benchReplica, log hclog.Logger) (*benchServer, error) {
	dir, err := os.MkdirTemp("", "tallyd-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: temp data dir: %w", err)
	}
	s := &benchServer{dir: dir}
	cfg := node.DefaultConfig()
	cfg.Region, cfg.Replica, cfg.DataDir = "bench", "bench-1", dir
	cfg.Listen, cfg.Durability, cfg.EventLog = "127.0.0.1:0", rc.Durability, rc.EventLog
	cfg.Windows = windowsFlag(rc.Windows)
	cfg.Limits = rc.Limits
	if rc.Approx > 0 {
		cfg.Approx = []node.ApproxConfig{{Prefix: approxPrefix, Error: rc.Approx}}
	}
	if rc.TLS {
		// Beside the data directory, not in it: the store owns that.
		if s.certDir, err = os.MkdirTemp("", "tallyd-bench-tls-"); err != nil {
			return nil, errors.Join(fmt.Errorf("bench: temp tls dir: %w", err), os.RemoveAll(dir))
		}
		cert, err := newBenchCert(s.certDir)
		if err != nil {
			return nil, errors.Join(err, os.RemoveAll(dir), os.RemoveAll(s.certDir))
		}
		cfg.TLSCert, cfg.TLSKey, s.tls = cert.CertFile, cert.KeyFile, cert.Client
	}
	if s.Node, err = node.Start(ctx, cfg, node.Options{Logger: log}); err != nil {
		return nil, errors.Join(err, s.removeDirs())
	}
	s.base = "http://" + s.Addr().String()
	if rc.TLS {
		s.base = "https://" + s.Addr().String()
	}
	return s, nil
}

func (s *benchServer) removeDirs() error {
	err := os.RemoveAll(s.dir)
	if s.certDir != "" {
		err = errors.Join(err, os.RemoveAll(s.certDir))
	}
	return err
}

// stop closes the replica and removes its directories.
func (s *benchServer) stop(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	return errors.Join(s.Close(sctx), s.removeDirs())
}

// checkReady fails unless base answers GET /readyz with 200. tlsc is
// what the client trusts for https (nil: the system's roots).
func checkReady(ctx context.Context, base string, tlsc *tls.Config) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	hc, closeIdle := newControlClient(tlsc)
	defer closeIdle()
	c, err := client.New(client.Config{BaseURL: base, HTTP: hc})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := c.Ready(ctx); err != nil {
		return fmt.Errorf("bench: %s not ready: %w", base, err)
	}
	return nil
}

// likesLevel is one concurrency level in progress.
type likesLevel struct {
	cfg    likesBenchConfig
	base   string
	tls    *tls.Config // trusted for https; nil: the system's roots
	users  string      // prefix of this level's user ids
	conc   int
	client *http.Client
}

func (lv *likesLevel) run(ctx context.Context) *likesLevelResult {
	client, closeIdle := newLoadClient(lv.conc, lv.tls, lv.cfg.KeepAlive)
	defer closeIdle()
	lv.client = client
	lr := runLoad(ctx, loadConfig{Workers: lv.conc, Duration: lv.cfg.Duration, MaxRequests: lv.cfg.MaxRequests}, func(worker int) loadOp {
		pick := newLikePicker(lv.cfg, lv.users, worker, rand.New(rand.NewPCG(rand.Uint64(), uint64(worker))))
		var body bytes.Buffer
		if lv.cfg.Read {
			return func(ctx context.Context) (int64, int64, error) {
				counted, err := lv.get(ctx, "/v1/likes/"+pick.item(), &body)
				if counted {
					return 1, 1, err
				}
				return 1, 0, err
			}
		}
		return func(ctx context.Context) (int64, int64, error) {
			item, user := pick.next()
			changed, err := lv.put(ctx, "/v1/likes/"+item+"/"+user, &body)
			if changed {
				return 1, 1, err
			}
			return 1, 0, err
		}
	})
	return &likesLevelResult{Concurrency: lv.conc, loadResult: lr}
}

// likePicker draws the item and the user of one worker's likes.
type likePicker struct {
	item func() string
	user func() string
}

// newLikePicker draws items as cfg says (one hot item, Zipf or uniform
// over cfg.Items) and users either new per like, under level.worker., or
// uniformly from level's cfg.Users users, shared by the level's workers so
// that likes by the same user really collide.
func newLikePicker(cfg likesBenchConfig, level string, worker int, rng *rand.Rand) *likePicker {
	p := &likePicker{}
	switch {
	case cfg.Items == 1:
		p.item = func() string { return cfg.Item }
	case cfg.Zipf == 0:
		p.item = func() string { return cfg.Item + "-" + strconv.Itoa(rng.IntN(cfg.Items)) }
	default:
		z := rand.NewZipf(rng, cfg.Zipf, 1, uint64(cfg.Items-1))
		p.item = func() string { return cfg.Item + "-" + strconv.FormatUint(z.Uint64(), 10) }
	}
	if cfg.Users > 0 {
		prefix := level + ".u"
		p.user = func() string { return prefix + strconv.FormatInt(rng.Int64N(cfg.Users), 10) }
	} else {
		prefix := level + "." + strconv.Itoa(worker) + "."
		var seq int
		p.user = func() string {
			seq++
			return prefix + strconv.Itoa(seq-1)
		}
	}
	return p
}

// next is the item and user of the next like.
func (p *likePicker) next() (item, user string) { return p.item(), p.user() }

// put sends one like and reads the whole answer into buf, so the
// connection is reused. changed reports whether the like changed the set.
// A substring test rather than a JSON decode: the answer is tally's own
// one-line object, and decoding it would cost the load generator CPU
// that the server on the same cores could use.
func (lv *likesLevel) put(ctx context.Context, path string, buf *bytes.Buffer) (changed bool, err error) {
	if err := lv.do(ctx, http.MethodPut, path, buf); err != nil {
		return false, err
	}
	return bytes.Contains(buf.Bytes(), []byte(`"changed":true`)), nil
}

// do sends one request without a body and reads the whole answer into
// buf (so the connection is reused); an answer other than 2xx is an
// error with the start of its body.
func (lv *likesLevel) do(ctx context.Context, method, path string, buf *bytes.Buffer) error {
	ctx, cancel := context.WithTimeout(ctx, lv.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, lv.base+path, nil)
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
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(body))
	}
	buf.Reset()
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	return nil
}

// seedReads likes every item of cfg once, as user <run>.seed, so that a
// read run finds counts: cfg.Concurrency's first level of workers share
// the items.
func seedReads(ctx context.Context, cfg likesBenchConfig, base string, tlsc *tls.Config, run string) error {
	items := []string{cfg.Item}
	if cfg.Items > 1 {
		items = make([]string, cfg.Items)
		for i := range items {
			items[i] = cfg.Item + "-" + strconv.Itoa(i)
		}
	}
	workers := min(cfg.Concurrency[0], len(items))
	client, closeIdle := newLoadClient(workers, tlsc, true)
	defer closeIdle()
	lv := &likesLevel{cfg: cfg, base: base, client: client}
	errs := make([]error, workers)
	runWorkers(ctx, workers, func(i int) int { return i }, func(ctx context.Context, w int) {
		var body bytes.Buffer
		for i := w; i < len(items) && errs[w] == nil; i += workers {
			_, errs[w] = lv.put(ctx, "/v1/likes/"+items[i]+"/"+run+".seed", &body)
		}
	})
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bench likes: seeding the items to read: %w", err)
	}
	return nil
}

// get reads one item's count into buf; counted reports whether it is 1
// or more (a substring test, as in put).
func (lv *likesLevel) get(ctx context.Context, path string, buf *bytes.Buffer) (counted bool, err error) {
	if err := lv.do(ctx, http.MethodGet, path, buf); err != nil {
		return false, err
	}
	return !bytes.Contains(buf.Bytes(), []byte(`"count":0,`)), nil
}
