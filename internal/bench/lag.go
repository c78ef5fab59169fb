package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/internal/base/poll"
	"github.com/tally-dev/tally/internal/deploy"
	"github.com/tally-dev/tally/internal/localnet"
	"github.com/tally-dev/tally/node"
)

// replBenchConfig is what `tallyd bench replication` takes. It always runs
// its own in-process local deployment (as `tallyd local --port 0` would)
// on a temporary directory removed at the end.
type replBenchConfig struct {
	// Regions are the regions started, one replica each. At least two.
	// Default us,eu,ap.
	Regions []string
	// Samples is how many likes the lag measurement sends, rotating the
	// origin region; each yields one lag per other region. Default 300.
	Samples int
	// Heals is how many cut-write-heal rounds run. Default 5.
	Heals int
	// CutFor is how long both sides of a cut are written to. Default 2s.
	CutFor time.Duration
	// CutWriters is how many concurrent writers each side of a cut gets.
	// Default 4.
	CutWriters int
	// Timeout bounds the wait for one like to become visible everywhere,
	// and for the regions to agree after a heal; past it the bench fails.
	// Default 60s.
	Timeout time.Duration
	// Durability of the replicas: fsync or none. Default fsync.
	Durability string
	// LogLevel of the deployment's log, on stderr. Default "error".
	LogLevel string
	LogJSON  bool
}

func defaultReplBenchConfig() replBenchConfig {
	return replBenchConfig{
		Regions:    []string{"us", "eu", "ap"},
		Samples:    300,
		Heals:      5,
		CutFor:     2 * time.Second,
		CutWriters: 4,
		Timeout:    60 * time.Second,
		Durability: "fsync",
		LogLevel:   "error",
	}
}

// Validate reports every problem with c at once.
func (c replBenchConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(c.Regions) < 2 {
		bad("--regions %q: want at least two regions", strings.Join(c.Regions, ","))
	} else if err := (localnet.Config{Regions: c.Regions, Dir: "-"}).Validate(); err != nil {
		bad("--regions: %s", strings.TrimPrefix(oneLine(err), "localnet config: "))
	}
	if c.Samples < 0 || c.Samples > 1_000_000 {
		bad("--samples %d: want 0..1000000", c.Samples)
	}
	if c.Heals < 0 || c.Heals > 1000 {
		bad("--heals %d: want 0..1000", c.Heals)
	}
	if c.CutFor <= 0 || c.CutFor > 10*time.Minute {
		bad("--cut-for %s: want more than 0 and at most 10m", c.CutFor)
	}
	if c.CutWriters < 1 || c.CutWriters > 256 {
		bad("--cut-writers %d: want 1..256", c.CutWriters)
	}
	if c.Timeout <= 0 {
		bad("--timeout %s: want more than 0", c.Timeout)
	}
	if c.Durability != "fsync" && c.Durability != "none" {
		bad("--durability %q: want fsync or none", c.Durability)
	}
	if hclog.LevelFromString(c.LogLevel) == hclog.NoLevel {
		bad("--log-level %q: want trace, debug, info, warn or error", c.LogLevel)
	}
	return errors.Join(errs...)
}

func parseReplBench(args []string, help io.Writer) (replBenchConfig, error) {
	cfg := defaultReplBenchConfig()
	regions := strings.Join(cfg.Regions, ",")
	fs := newFlagSet("bench replication", func(fs *flag.FlagSet) {
		fs.StringVar(&regions, "regions", regions, "comma-separated region `names`, one replica each")
		fs.IntVar(&cfg.Samples, "samples", cfg.Samples, "`number` of likes whose lag is measured")
		fs.IntVar(&cfg.Heals, "heals", cfg.Heals, "`number` of cut-write-heal rounds")
		fs.DurationVar(&cfg.CutFor, "cut-for", cfg.CutFor, "how long both sides of a cut are written to")
		fs.IntVar(&cfg.CutWriters, "cut-writers", cfg.CutWriters, "concurrent `writers` per side of a cut")
		fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "longest wait for a like to show or the regions to agree")
		fs.StringVar(&cfg.Durability, "durability", cfg.Durability, "`mode`: fsync or none")
		fs.StringVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "log `level` of the deployment")
		fs.BoolVar(&cfg.LogJSON, "log-json", cfg.LogJSON, "log JSON lines instead of text")
	})
	if err := parseBenchFlags(fs, args, help); err != nil {
		return cfg, err
	}
	cfg.Regions = nil
	for _, r := range strings.Split(regions, ",") {
		if r = strings.TrimSpace(r); r != "" {
			cfg.Regions = append(cfg.Regions, r)
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usagef("bench replication: %s", oneLine(err))
	}
	return cfg, nil
}

// benchReplication runs `tallyd bench replication`.
func (c *cli) benchReplication(ctx context.Context, args []string) error {
	cfg, err := parseReplBench(args, c.stdout)
	if err != nil {
		return err
	}
	log := newLogger(c.stderr, cfg.LogLevel, cfg.LogJSON)
	fmt.Fprintf(c.stdout, "bench replication: starting regions %s in process (embedded NATS, durability %s)...\n",
		strings.Join(cfg.Regions, ","), cfg.Durability)
	t0 := time.Now()
	d, err := startBenchDeployment(ctx, benchDeploy{Regions: cfg.Regions, Durability: cfg.Durability, LogLevel: cfg.LogLevel}, c.env, log)
	if err != nil {
		return err
	}
	defer func() {
		if err := d.Close(ctx); err != nil {
			log.Warn("stopping the deployment", "error", err)
		}
	}()
	b := &replBench{cfg: cfg, d: d, api: newRegionClients(d.urls, len(cfg.Regions)*(2*cfg.CutWriters+2))}
	defer func() {
		for _, c := range b.api {
			c.CloseIdleConnections()
		}
	}()
	if err := b.warmUp(ctx); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "ready after %s (data %s)\n\n", time.Since(t0).Round(time.Millisecond), d.dir)
	if err := b.lag(ctx, c.stdout); err != nil {
		return err
	}
	return b.heals(ctx, c.stdout)
}

// benchDeployment is an in-process local deployment (internal/deploy) on
// a temporary directory and free ports.
type benchDeployment struct {
	*deploy.Deployment
	regions []string
	urls    []string // base URL per replica, in Nodes order (one replica a region: per region)
	dir     string
}

// benchDeploy is what an in-process deployment differs in from `tallyd
// local`'s: the regions, their durability and their log level.
type benchDeploy struct {
	Regions              []string
	Durability, LogLevel string
	// Limits are every replica's rate limits (node.Config.Limits).
	Limits []node.LimitConfig
	// Replicas per region and Copies of each shard (deploy.Config): 0
	// is one replica per region, unsharded, as `tallyd local` runs.
	Replicas, Copies int
	// NoMilestones numbers nothing, as tallyd serve's defaults; false
	// keeps `tallyd local`'s milestone rule.
	NoMilestones bool
	// Node adjusts every replica's config after the fields above.
	Node func(*node.Config)
}

// startBenchDeployment starts cfg.Regions the way `tallyd local` does. On
// error nothing is left running.
func startBenchDeployment(ctx context.Context, cfg benchDeploy, env Env, log hclog.Logger) (*benchDeployment, error) {
	dir, err := os.MkdirTemp("", "tallyd-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: temp data dir: %w", err)
	}
	dcfg := deploy.DefaultConfig()
	dcfg.Regions, dcfg.DataDir, dcfg.Port = cfg.Regions, dir, 0
	dcfg.Durability, dcfg.LogLevel, dcfg.Logger, dcfg.Version = cfg.Durability, cfg.LogLevel, log, env.Version
	dcfg.Replicas, dcfg.Copies = cfg.Replicas, cfg.Copies
	if cfg.NoMilestones {
		dcfg.Milestones = ""
	}
	if len(cfg.Limits) > 0 || cfg.Node != nil {
		dcfg.Node = func(c *node.Config) {
			if len(cfg.Limits) > 0 {
				c.Limits = cfg.Limits
			}
			if cfg.Node != nil {
				cfg.Node(c)
			}
		}
	}
	dep, err := deploy.Start(ctx, dcfg)
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	return &benchDeployment{Deployment: dep, regions: cfg.Regions, urls: dep.URLs(), dir: dir}, nil
}

// Close stops the deployment and removes its data directory.
func (d *benchDeployment) Close(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	return errors.Join(d.Deployment.Close(sctx), os.RemoveAll(d.dir))
}

// replBench measures one running deployment.
type replBench struct {
	cfg replBenchConfig
	d   *benchDeployment
	api []*client.Client // one per region, in d.regions order
}

// Pauses between two reads while waiting for a value. Lag polls tightly
// (three regions: two readers); the wait after a heal reads every region
// twice per poll and must not steal much of the two cores the repair runs
// on, for a resolution of ~1% of the 2 s target.
const (
	lagPollEvery  = time.Millisecond
	healPollEvery = 10 * time.Millisecond
)

// lagJitter bounds the random pause before each lag sample; it spans two
// of the default 10 ms flush intervals.
const lagJitter = 20 * time.Millisecond

// warmUp waits until every region is ready and a like in each region has
// reached every other one: until then, gateway interest may still be
// propagating and the first lags would measure start-up.
func (b *replBench) warmUp(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	for i := range b.api {
		if err := poll.Until(wctx, 20*time.Millisecond, func() error { return b.api[i].Ready(ctx) }); err != nil {
			return fmt.Errorf("bench: region %s not ready within %s: %w", b.d.regions[i], b.cfg.Timeout, err)
		}
	}
	for i := range b.d.regions {
		if _, err := b.sample(ctx, i, "warmup", fmt.Sprintf("warm-%d", i)); err != nil {
			return fmt.Errorf("bench: warm-up: %w", err)
		}
	}
	return nil
}

// lag measures, for cfg.Samples likes with a rotating origin, the time
// from the origin's ack to the like's count showing in each other region.
func (b *replBench) lag(ctx context.Context, out io.Writer) error {
	n := len(b.d.regions)
	hists := make([]histogram, n*n) // [from*n+to]
	var all histogram
	for i := range b.cfg.Samples {
		// Start each sample at a random phase of the replicas' flush
		// ticker: back-to-back samples would lock onto one phase.
		if err := sleepCtx(ctx, rand.N(lagJitter)); err != nil {
			return err
		}
		from := i % n
		lags, err := b.sample(ctx, from, "lag", fmt.Sprintf("lag-%d", i))
		if err != nil {
			return fmt.Errorf("bench: lag sample %d: %w", i, err)
		}
		for to, d := range lags {
			if to != from {
				hists[from*n+to].Record(d)
				all.Record(d)
			}
		}
	}
	fmt.Fprintf(out, "lag: ack of a like in one region -> its count visible in another\n  (%d likes, origin rotating, random 0-%s pause between likes, polled every %s)\n",
		b.cfg.Samples, lagJitter, lagPollEvery)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\tn\tp50\tp99\tmax\t")
	row := func(name string, h *histogram) {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t\n", name, h.Count(), ms(h.Quantile(0.5)), ms(h.Quantile(0.99)), ms(h.Max()))
	}
	for from, a := range b.d.regions {
		for to, c := range b.d.regions {
			if from != to {
				row(a+"->"+c, &hists[from*n+to])
			}
		}
	}
	row("all", &all)
	fmt.Fprintln(tw)
	return tw.Flush()
}

// sample likes item at region from as a new user and waits until every
// other region's count reflects it. It returns, per region, the time from
// the ack to the first read that saw the like (0 for from).
func (b *replBench) sample(ctx context.Context, from int, item, user string) ([]time.Duration, error) {
	liked, err := b.api[from].Like(ctx, item, user)
	if err != nil {
		return nil, err
	}
	ack := time.Now()
	lags := make([]time.Duration, len(b.d.regions))
	errs := make([]error, len(b.d.regions))
	var wg sync.WaitGroup
	for to := range b.d.regions {
		if to == from {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			lags[to], errs[to] = b.waitCount(ctx, to, item, liked.Count, ack)
		}()
	}
	wg.Wait()
	return lags, errors.Join(errs...)
}

// waitCount polls region to until item's count is at least want and
// returns the time since ack.
func (b *replBench) waitCount(ctx context.Context, to int, item string, want int64, ack time.Time) (time.Duration, error) {
	deadline := ack.Add(b.cfg.Timeout)
	for {
		got, err := b.api[to].Likes(ctx, item)
		if err != nil {
			return 0, err
		}
		if got.Count >= want {
			return time.Since(ack), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s: count %d of %s, want %d, after %s", b.d.regions[to], got.Count, item, want, b.cfg.Timeout)
		}
		if err := sleepCtx(ctx, lagPollEvery); err != nil {
			return 0, err
		}
	}
}

// healRound is one cut-write-heal round's outcome.
type healRound struct {
	Cut        string // the region cut from all the others
	CutLikes   int    // likes acknowledged on the cut region's side
	RestLikes  int    // likes acknowledged on the other side
	Expected   int64  // distinct users who liked: the exact final count
	CountAgree time.Duration
	Converged  time.Duration
}

// heals runs cfg.Heals rounds, cutting each region in turn, and prints
// each round and the distribution of both times.
func (b *replBench) heals(ctx context.Context, out io.Writer) error {
	if b.cfg.Heals == 0 {
		return nil
	}
	fmt.Fprintf(out, "heal: cut one region from all others, write to both sides for %s (%d writers a side, some users on both), heal\n",
		b.cfg.CutFor, b.cfg.CutWriters)
	fmt.Fprintln(out, "  counts agree: every region reads the exact count with approx:false")
	fmt.Fprintln(out, "  converged:    every /v1/convergence says converged, from digests compared after the heal")
	fmt.Fprintf(out, "  (times from the heal, polled every %s)\n", healPollEvery)
	// Fixed widths, since each row prints as soon as its round ends.
	const row = "%5v %4v %14v %16v %14v %12v %12v\n"
	fmt.Fprintf(out, row, "round", "cut", "likes cut side", "likes other side", "expected count", "counts agree", "converged")
	var agree, conv histogram
	for k := range b.cfg.Heals {
		r, err := b.healRound(ctx, k)
		if err != nil {
			return fmt.Errorf("bench: heal round %d: %w", k+1, err)
		}
		agree.Record(r.CountAgree)
		conv.Record(r.Converged)
		fmt.Fprintf(out, row, k+1, r.Cut, r.CutLikes, r.RestLikes, r.Expected, ms(r.CountAgree), ms(r.Converged))
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "after heal\tn\tp50\tp99\tmax\t")
	for _, m := range []struct {
		name string
		h    *histogram
	}{{"counts agree", &agree}, {"converged", &conv}} {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t\n", m.name, m.h.Count(), ms(m.h.Quantile(0.5)), ms(m.h.Quantile(0.99)), ms(m.h.Max()))
	}
	return tw.Flush()
}

// healRound cuts region k mod n from the others, writes to both sides,
// heals, and times the way back to agreement.
func (b *replBench) healRound(ctx context.Context, k int) (healRound, error) {
	n := len(b.d.regions)
	cut := k % n
	r := healRound{Cut: b.d.regions[cut]}
	item := fmt.Sprintf("heal-%d", k)
	if err := b.setLinks(ctx, cut, false); err != nil {
		return r, err
	}
	var rest []int
	for i := range n {
		if i != cut {
			rest = append(rest, i)
		}
	}
	users, perSide, err := b.writeBothSides(ctx, item, k, [2][]int{{cut}, rest})
	if err != nil {
		return r, err
	}
	r.CutLikes, r.RestLikes, r.Expected = perSide[0], perSide[1], int64(users)
	healed := time.Now()
	if err := b.setLinks(ctx, cut, true); err != nil {
		return r, err
	}
	r.CountAgree, r.Converged, err = b.waitAgreement(ctx, item, r.Expected, healed)
	return r, err
}

// setLinks cuts (up false) or heals every link between region cut and the
// others, through the admin route.
func (b *replBench) setLinks(ctx context.Context, cut int, up bool) error {
	for i, other := range b.d.regions {
		if i == cut {
			continue
		}
		if _, err := b.api[cut].SetLink(ctx, b.d.regions[cut], other, up); err != nil {
			return err
		}
	}
	return nil
}

// writeBothSides likes item for cfg.CutFor from cfg.CutWriters writers on
// each side (a writer rotates over its side's regions). Every fourth like
// of writer w is by a user that writer w of the other side likes too. It
// returns the number of distinct users liked and the likes per side. Any
// failed like fails the round: its effect on the count would be unknown.
func (b *replBench) writeBothSides(ctx context.Context, item string, k int, sides [2][]int) (users int, perSide [2]int, err error) {
	stopAt := time.Now().Add(b.cfg.CutFor)
	type writer struct {
		side  int
		liked []string
		err   error
	}
	var writers []*writer
	var wg sync.WaitGroup
	for side := range sides {
		for w := range b.cfg.CutWriters {
			wr := &writer{side: side}
			writers = append(writers, wr)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for seq := 0; ctx.Err() == nil && time.Now().Before(stopAt); seq++ {
					user := fmt.Sprintf("h%d-s%d-w%d-%d", k, side, w, seq)
					if seq%4 == 0 {
						user = fmt.Sprintf("h%d-both-w%d-%d", k, w, seq/4)
					}
					at := sides[side][seq%len(sides[side])]
					if _, wr.err = b.api[at].Like(ctx, item, user); wr.err != nil {
						return
					}
					wr.liked = append(wr.liked, user)
				}
			}()
		}
	}
	wg.Wait()
	distinct := map[string]bool{}
	var errs []error
	for _, wr := range writers {
		errs = append(errs, wr.err)
		perSide[wr.side] += len(wr.liked)
		for _, u := range wr.liked {
			distinct[u] = true
		}
	}
	if err := errors.Join(append(errs, ctx.Err())...); err != nil {
		return 0, perSide, err
	}
	return len(distinct), perSide, nil
}

// waitAgreement polls every region from healed on until (a) all read item
// as exactly want with approx false and (b) all report converged from
// digest comparisons made after healed. It returns both times since healed.
func (b *replBench) waitAgreement(ctx context.Context, item string, want int64, healed time.Time) (agree, conv time.Duration, err error) {
	deadline := healed.Add(b.cfg.Timeout)
	for agree == 0 || conv == 0 {
		if agree == 0 {
			ok, err := b.countsAgree(ctx, item, want)
			if err != nil {
				return 0, 0, err
			}
			if ok {
				agree = time.Since(healed)
			}
		}
		if conv == 0 {
			ok, err := b.converged(ctx, healed)
			if err != nil {
				return 0, 0, err
			}
			if ok {
				conv = time.Since(healed)
			}
		}
		if time.Now().After(deadline) {
			return agree, conv, fmt.Errorf("regions do not agree on %s = %d %s after the heal (agree %s, converged %s)",
				item, want, b.cfg.Timeout, ms(agree), ms(conv))
		}
		if err := sleepCtx(ctx, healPollEvery); err != nil {
			return 0, 0, err
		}
	}
	return agree, conv, nil
}

// countsAgree reports whether every region reads item as exactly want,
// with approx false.
func (b *replBench) countsAgree(ctx context.Context, item string, want int64) (bool, error) {
	for _, c := range b.api {
		got, err := c.Likes(ctx, item)
		if err != nil {
			return false, err
		}
		if got.Count != want || got.Approx {
			return false, nil
		}
	}
	return true, nil
}

// converged reports whether every region says converged, each from digest
// comparisons with every peer made after since.
func (b *replBench) converged(ctx context.Context, since time.Time) (bool, error) {
	comparedBefore := func(p api.PeerStatus) bool { return p.ComparedAt == nil || p.ComparedAt.Before(since) }
	for _, c := range b.api {
		got, err := c.Convergence(ctx)
		if err != nil {
			return false, err
		}
		if !got.Converged || len(got.Peers) < len(b.d.urls)-1 || slices.ContainsFunc(got.Peers, comparedBefore) {
			return false, nil
		}
	}
	return true, nil
}

// newRegionClients returns a client per region URL, keeping up to conns
// idle keep-alive connections each.
func newRegionClients(urls []string, conns int) []*client.Client {
	out := make([]*client.Client, len(urls))
	for i, u := range urls {
		c, err := client.New(client.Config{BaseURL: u, HTTP: &http.Client{
			Timeout:   10 * time.Second,
			Transport: &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: 90 * time.Second},
		}})
		if err != nil {
			panic(fmt.Sprintf("bench: client of %s: %v", u, err)) // deploy's URLs are http://host:port
		}
		out[i] = c
	}
	return out
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
