package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/internal/base/poll"
	"github.com/tally-dev/tally/internal/localnet"
	"github.com/tally-dev/tally/node"
	"github.com/tally-dev/tally/shard"
)

// shardsBenchConfig is what `tallyd bench shards` takes. Every
// measurement starts its own in-process deployments (internal/deploy,
// as `tallyd local --replicas N --copies R` runs them) on temporary
// directories removed at the end.
type shardsBenchConfig struct {
	// Measure is what is measured:
	//   space: sstable bytes per replica for the same likes, one
	//          deployment per Replicas value;
	//   likes: single likes/s, latency and process CPU per like, sent
	//          straight to a holder of the item's shard or to a random
	//          replica of the region, one deployment per Replicas value;
	//   heal:  time from healing a cut of CutFor to every replica of
	//          every region reading exact counts;
	//   hot:   batched likes/s and process CPU per like of one item, by
	//          new users, whole on one replica, then split in N parts
	//          over N replicas (node.Config.Hot), one deployment per
	//          Replicas value.
	// Default space.
	Measure string
	// Regions are the regions started. Default us for space and likes,
	// us,eu,ap for heal (which cuts the first from the others).
	Regions []string
	// Replicas per region: a deployment for each value. Default 1,3,6
	// (space), 1,2,3 (likes), 3 (heal, which takes one value).
	Replicas []int
	// Copies of each shard in a region (with more than one replica).
	// Default 2.
	Copies int
	// Likes (space) is how many distinct (item, user) pairs are liked.
	// Default 1,000,000.
	Likes int
	// Items: space spreads the likes round-robin over this many items
	// (default 10,000); likes draws each like's item uniformly from this
	// many (default 100,000); heal likes this many items (default 16).
	Items int
	// Routes (likes) are the ways the load is sent, each run in turn on
	// every deployment: "direct" to a holder of the item's shard (from
	// GET /v1/shards), "random" to any replica of the region (a share of
	// them forwarded over NATS). Default direct,random.
	Routes []string
	// Concurrency (likes, hot) is how many requests are in flight, one
	// per worker. Default 64 (hot: 16, hotConcurrency).
	Concurrency int
	// Batch (hot) is how many likes each POST /v1/events carries.
	// Default 100.
	Batch int
	// Duration (likes) is how long each route is loaded. Default 10s.
	Duration time.Duration
	// Warmup (likes) loads every new deployment this long, direct, before
	// anything is measured. Default 2s.
	Warmup time.Duration
	// CutFor (heal) is how long the first region is cut from the others
	// while both sides are written to. Default 30s.
	CutFor time.Duration
	// CutWriters (heal) is how many writers each side of the cut gets.
	// Default 4.
	CutWriters int
	// Timeout bounds each wait: for a deployment to be ready, for loaded
	// likes to reach every copy, for the regions to agree after a heal.
	// Default 10m.
	Timeout time.Duration
	// Durability of the replicas: fsync or none. Default none for space
	// (what is stored does not depend on it; loading is faster), fsync
	// for likes and heal.
	Durability string
	// Windows (space) keeps the default time windows; off by default,
	// since their slots depend on how many seconds loading took, which
	// differs from one deployment to the next.
	Windows bool
	// EventLog (space) keeps every replica's event log, as tallyd does
	// by default. Default true.
	EventLog bool
	// LogLevel of the deployments' log, on stderr. Default "error".
	LogLevel string
	LogJSON  bool
}

// Measures of bench shards.
const (
	measureSpace = "space"
	measureLikes = "likes"
	measureHeal  = "heal"
	measureMove  = "move"
	measureHot   = "hot"
)

// hotConcurrency is bench shards --measure hot's default concurrency:
// each request carries a batch.
const hotConcurrency = 16

// Routes of bench shards --measure likes.
const (
	routeDirect = "direct"
	routeRandom = "random"
)

func defaultShardsBenchConfig() shardsBenchConfig {
	return shardsBenchConfig{
		Measure:     measureSpace,
		Copies:      2,
		Likes:       1_000_000,
		Routes:      []string{routeDirect, routeRandom},
		Concurrency: 64, // hot: 16 unless --concurrency says
		Batch:       100,
		Duration:    10 * time.Second,
		Warmup:      2 * time.Second,
		CutFor:      30 * time.Second,
		CutWriters:  4,
		Timeout:     10 * time.Minute,
		EventLog:    true,
		LogLevel:    "error",
	}
}

// withDefaults fills the settings whose default depends on the measure
// where they are unset: Regions, Replicas, Items (0) and Durability.
func (c shardsBenchConfig) withDefaults() shardsBenchConfig {
	if len(c.Regions) == 0 {
		c.Regions = []string{"us"}
		if c.Measure == measureHeal {
			c.Regions = []string{"us", "eu", "ap"}
		}
	}
	if len(c.Replicas) == 0 {
		switch c.Measure {
		case measureHot:
			c.Replicas = []int{1, 3}
		case measureLikes:
			c.Replicas = []int{1, 2, 3}
		case measureHeal, measureMove:
			c.Replicas = []int{3}
		default:
			c.Replicas = []int{1, 3, 6}
		}
	}
	if c.Items == 0 {
		switch c.Measure {
		case measureLikes, measureMove:
			c.Items = 100_000
		case measureHeal:
			c.Items = 16
		default:
			c.Items = 10_000
		}
	}
	if c.Durability == "" {
		c.Durability = "fsync"
		if c.Measure == measureSpace {
			c.Durability = "none"
		}
	}
	return c
}

// maxShardsReplicas bounds the replicas per region a bench starts.
const maxShardsReplicas = 16

// Validate reports every problem with c (after withDefaults) at once.
func (c shardsBenchConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch c.Measure {
	case measureSpace, measureLikes, measureHeal, measureMove, measureHot:
	default:
		bad("--measure %q: want space, likes, heal, move or hot", c.Measure)
	}
	if c.Measure == measureHot {
		for _, n := range c.Replicas {
			if n > crdt.MaxParts {
				bad("--replicas %d: hot splits the item in as many parts, at most %d", n, crdt.MaxParts)
			}
		}
	}
	if c.Batch < 1 || c.Batch > maxBenchEventsBatch {
		bad("--batch %d: want 1..%d", c.Batch, maxBenchEventsBatch)
	}
	if err := (localnet.Config{Regions: c.Regions, Dir: "-"}).Validate(); err != nil {
		bad("--regions: %s", strings.TrimPrefix(oneLine(err), "localnet config: "))
	} else if c.Measure == measureHeal && len(c.Regions) < 2 {
		bad("--regions %q: heal cuts the first region from the others: want at least two", strings.Join(c.Regions, ","))
	}
	for _, n := range c.Replicas {
		if n < 1 || n > maxShardsReplicas {
			bad("--replicas %d: want 1..%d per region", n, maxShardsReplicas)
		}
	}
	if (c.Measure == measureHeal || c.Measure == measureMove) && len(c.Replicas) != 1 {
		bad("--replicas: %s takes one number of replicas per region, not %d", c.Measure, len(c.Replicas))
	}
	if c.Measure == measureMove && len(c.Replicas) == 1 && c.Copies >= c.Replicas[0] {
		bad("--copies %d: move takes the first region from --copies to --replicas (%d) copies: want fewer copies", c.Copies, c.Replicas[0])
	}
	if c.Copies < 1 || c.Copies > maxShardsReplicas {
		bad("--copies %d: want 1..%d", c.Copies, maxShardsReplicas)
	}
	if c.Likes < 1 || c.Likes > 100_000_000 {
		bad("--likes %d: want 1..100000000", c.Likes)
	}
	switch {
	case c.Items < 1 || c.Items > maxBenchItems:
		bad("--items %d: want 1..%d", c.Items, maxBenchItems)
	case c.Measure == measureSpace && c.Items > c.Likes:
		bad("--items %d: want at most --likes (%d)", c.Items, c.Likes)
	}
	if len(c.Routes) == 0 {
		bad("--routes: want direct, random or both")
	}
	for _, r := range c.Routes {
		if r != routeDirect && r != routeRandom {
			bad("--routes %q: want direct or random", r)
		}
	}
	if c.Concurrency < 1 || c.Concurrency > maxBenchConcurrency {
		bad("--concurrency %d: want 1..%d", c.Concurrency, maxBenchConcurrency)
	}
	if c.Duration <= 0 || c.Duration > time.Hour {
		bad("--duration %s: want more than 0 and at most 1h", c.Duration)
	}
	if c.Warmup < 0 || c.Warmup > time.Hour {
		bad("--warmup %s: want 0..1h", c.Warmup)
	}
	if c.CutFor <= 0 || c.CutFor > time.Hour {
		bad("--cut-for %s: want more than 0 and at most 1h", c.CutFor)
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

// shardsFlagsOf lists the flags that mean something to each measure;
// giving another is an error rather than silently ignored.
var shardsFlagsOf = map[string][]string{
	measureSpace: {"likes", "items", "windows", "event-log"},
	measureLikes: {"items", "routes", "concurrency", "duration", "warmup"},
	measureHeal:  {"items", "cut-for", "cut-writers"},
	measureMove:  {"items", "concurrency", "duration", "warmup"},
	measureHot:   {"batch", "routes", "concurrency", "duration", "warmup"},
}

func parseShardsBench(args []string, help io.Writer) (shardsBenchConfig, error) {
	cfg := defaultShardsBenchConfig()
	var regions, replicas string
	routes := strings.Join(cfg.Routes, ",")
	fs := newFlagSet("bench shards", func(fs *flag.FlagSet) {
		fs.StringVar(&cfg.Measure, "measure", cfg.Measure, "what to measure: space (bytes per replica), likes (likes/s, direct and forwarded), heal (time to agree after a cut), move (a shard move under load) or hot (batched likes/s of one item, whole on one replica, then split over N)")
		fs.StringVar(&regions, "regions", "", "comma-separated region `names` (default us; heal: us,eu,ap, cutting the first)")
		fs.StringVar(&replicas, "replicas", "", "comma-separated replicas per region, a deployment for each (default 1,3,6; likes: 1,2,3; heal: 3; hot: 1,3, the item split in as many parts)")
		fs.IntVar(&cfg.Copies, "copies", cfg.Copies, "replicas of a region holding each shard")
		fs.IntVar(&cfg.Likes, "likes", cfg.Likes, "space: distinct (item, user) `pairs` to like")
		fs.IntVar(&cfg.Items, "items", 0, "space: spread the likes over `N` items (default 10000); likes: draw items from N (default 100000); heal: like N items (default 16)")
		fs.StringVar(&routes, "routes", routes, "likes: how requests are sent, in turn: direct (to a holder of the item's shard) and/or random (to any replica)")
		fs.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "likes, hot: requests in flight, one per worker (hot: 16 unless given)")
		fs.IntVar(&cfg.Batch, "batch", cfg.Batch, "hot: likes per POST /v1/events")
		fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "likes: how long each route is loaded")
		fs.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "likes: direct load of each new deployment before measuring")
		fs.DurationVar(&cfg.CutFor, "cut-for", cfg.CutFor, "heal: how long the first region is cut off while both sides are written")
		fs.IntVar(&cfg.CutWriters, "cut-writers", cfg.CutWriters, "heal: concurrent `writers` per side of the cut")
		fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "longest wait for readiness, for the likes to reach every copy, for agreement after the heal")
		fs.StringVar(&cfg.Durability, "durability", "", "`mode` of the replicas: fsync or none (default none for space, fsync otherwise)")
		fs.BoolVar(&cfg.Windows, "windows", cfg.Windows, "space: keep the default time windows (their slots depend on how long loading took)")
		fs.BoolVar(&cfg.EventLog, "event-log", cfg.EventLog, "space: keep the event log, as tallyd does by default (a replica logs the likes it accepted)")
		fs.StringVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "log `level` of the deployments")
		fs.BoolVar(&cfg.LogJSON, "log-json", cfg.LogJSON, "log JSON lines instead of text")
	})
	if err := parseBenchFlags(fs, args, help); err != nil {
		return cfg, err
	}
	var errs []error
	cfg.Regions = splitList(regions)
	if replicas != "" {
		n, err := parseInts(replicas)
		if err != nil {
			errs = append(errs, fmt.Errorf("--replicas: %w", err))
		}
		if len(n) == 0 && err == nil {
			errs = append(errs, errors.New("--replicas: want at least one number"))
		}
		cfg.Replicas = n
	}
	cfg.Routes = splitList(routes)
	concurrency := false
	fs.Visit(func(f *flag.Flag) { concurrency = concurrency || f.Name == "concurrency" })
	if cfg.Measure == measureHot && !concurrency {
		cfg.Concurrency = hotConcurrency
	}
	cfg = cfg.withDefaults()
	errs = append(errs, cfg.Validate())
	if own, ok := shardsFlagsOf[cfg.Measure]; ok {
		var others []string
		for _, fl := range shardsFlagsOf {
			others = append(others, fl...)
		}
		fs.Visit(func(f *flag.Flag) {
			if slices.Contains(others, f.Name) && !slices.Contains(own, f.Name) {
				errs = append(errs, fmt.Errorf("--%s means nothing to --measure %s", f.Name, cfg.Measure))
			}
		})
	}
	if err := errors.Join(errs...); err != nil {
		return cfg, usagef("bench shards: %s", oneLine(err))
	}
	return cfg, nil
}

// splitList splits a comma-separated list, dropping empty entries.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// benchShards runs `tallyd bench shards`.
func (c *cli) benchShards(ctx context.Context, args []string) error {
	cfg, err := parseShardsBench(args, c.stdout)
	if err != nil {
		return err
	}
	log := newLogger(c.stderr, cfg.LogLevel, cfg.LogJSON)
	switch cfg.Measure {
	case measureLikes:
		_, err = runShardsLikes(ctx, cfg, c.env, log, c.stdout)
	case measureHeal:
		_, err = runShardsHeal(ctx, cfg, c.env, log, c.stdout)
	case measureMove:
		_, err = runShardsMove(ctx, cfg, c.env, log, c.stdout) // shards_move.go
	case measureHot:
		_, err = runShardsHot(ctx, cfg, c.env, log, c.stdout)
	default:
		_, err = runShardsSpace(ctx, cfg, c.env, log, c.stdout)
	}
	return err
}

// shardedDeployment is a running deployment of a bench shards run and
// what it knows of it: each region's shard map, and per replica (in the
// deployment's Nodes order) its region, id and client.
type shardedDeployment struct {
	*benchDeployment
	maps    map[string]shard.Map
	region  []string // per replica
	id      []string // per replica
	clients []*client.Client
	// holders[r][s] are the indices of region r's holders of shard s.
	holders map[string][][]int
}

// startSharded starts regions with replicas each (copies of each shard)
// and waits until every replica is ready and answers its region's map.
// With one replica a region is unsharded, as `tallyd local` runs it.
func startSharded(ctx context.Context, cfg shardsBenchConfig, replicas int, env Env, log hclog.Logger, adjust func(*node.Config)) (_ *shardedDeployment, err error) {
	bd, err := startBenchDeployment(ctx, benchDeploy{
		Regions: cfg.Regions, Durability: cfg.Durability, LogLevel: cfg.LogLevel,
		Replicas: replicas, Copies: cfg.Copies, NoMilestones: true, Node: adjust,
	}, env, log)
	if err != nil {
		return nil, err
	}
	d := &shardedDeployment{benchDeployment: bd, maps: map[string]shard.Map{}, holders: map[string][][]int{}}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.Close(ctx))
		}
	}()
	d.clients = newRegionClients(bd.urls, cfg.Concurrency+cfg.CutWriters*2+4)
	for _, c := range bd.Configs() {
		d.region, d.id = append(d.region, c.Region), append(d.id, c.Replica)
	}
	wctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	for i, c := range d.clients {
		if err := poll.Until(wctx, 20*time.Millisecond, func() error { return c.Ready(wctx) }); err != nil {
			return nil, fmt.Errorf("bench shards: %s not ready within %s: %w", d.id[i], cfg.Timeout, err)
		}
		answered, err := c.Shards(wctx)
		if err != nil {
			return nil, fmt.Errorf("bench shards: the shard map of %s: %w", d.id[i], err)
		}
		m, err := shard.FromAPI(answered)
		if err != nil {
			return nil, fmt.Errorf("bench shards: the shard map of %s: %w", d.id[i], err)
		}
		if prev, ok := d.maps[d.region[i]]; ok && !prev.Equal(m) {
			return nil, fmt.Errorf("bench shards: %s answers another shard map than its region's other replicas", d.id[i])
		}
		d.maps[d.region[i]] = m
	}
	for r, m := range d.maps {
		hs := make([][]int, shard.Count)
		for s := range hs {
			for _, id := range m.Holders(s) {
				hs[s] = append(hs[s], d.index(id))
			}
			if len(hs[s]) == 0 {
				return nil, fmt.Errorf("bench shards: region %s: nobody holds shard %d", r, s)
			}
		}
		d.holders[r] = hs
	}
	return d, nil
}

// index is the position of replica id in the deployment, -1 if none.
func (d *shardedDeployment) index(id string) int { return slices.Index(d.id, id) }

// of are the indices of region's replicas.
func (d *shardedDeployment) of(region string) []int {
	var out []int
	for i, r := range d.region {
		if r == region {
			out = append(out, i)
		}
	}
	return out
}

// holds reports whether replica i holds shard s in its region's map.
func (d *shardedDeployment) holds(i, s int) bool {
	return slices.Contains(d.holders[d.region[i]][s], i)
}

// Close closes the clients' idle connections and stops the deployment.
func (d *shardedDeployment) Close(ctx context.Context) error {
	for _, c := range d.clients {
		c.CloseIdleConnections()
	}
	return d.benchDeployment.Close(ctx)
}

// convergedSince reports whether every replica says converged, from
// digest comparisons with each of its peers made after since; the error
// is a read that failed.
func (d *shardedDeployment) convergedSince(ctx context.Context, since time.Time) (bool, error) {
	comparedBefore := func(p api.PeerStatus) bool { return p.ComparedAt == nil || p.ComparedAt.Before(since) }
	for i, c := range d.clients {
		got, err := c.Convergence(ctx)
		if err != nil {
			return false, fmt.Errorf("convergence of %s: %w", d.id[i], err)
		}
		if !got.Converged || len(got.Peers) < len(d.id)-1 || slices.ContainsFunc(got.Peers, comparedBefore) {
			return false, nil
		}
	}
	return true, nil
}
