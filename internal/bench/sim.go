package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tally-dev/tally/internal/base/poll"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/replication"
	"github.com/tally-dev/tally/shard"
	"github.com/tally-dev/tally/storage"
)

// simConfig is what `tallyd bench sim` takes: a whole deployment of
// Regions × Replicas sharded replicas in this process, replicating over
// the in-memory transport (replication.MemNetwork) with real Pebble
// stores in a temporary directory.
type simConfig struct {
	// Regions, named r01, r02, ... Default 10.
	Regions int
	// Replicas per region, named r01-1, r01-2, ... Default 6.
	Replicas int
	// Copies of each shard in a region (at most Replicas). Default 2.
	Copies int
	// Items the likes are spread over: like n is of item n mod Items.
	// Default 1,000,000.
	Items int
	// Likes loaded, each by its own user, at one holder of its item's
	// shard in a region drawn at random. Default Items (one like each).
	Likes int
	// Writers are the concurrent Likes.Like calls of the load. Default
	// 256.
	Writers int
	// CutFor is how long the first region is cut from every other one
	// while both sides take likes. Default 60s.
	CutFor time.Duration
	// CutRate is the likes per second written on each side of the cut.
	// Default 500.
	CutRate int
	// VectorWriters are the numbers of replicas whose entries one item's
	// vector is measured with. Default 1,2,6,60.
	VectorWriters []int
	// Check is how many items (spread evenly) are read at every holder
	// to check their exact counts, after the load and after the heal; 0
	// checks every item. Default 10,000.
	Check int
	// Dir holds the run's stores (a temporary directory under it, removed
	// at the end). Default the system's temporary directory.
	Dir string
	// CacheBytes and MemTableBytes of each store: small, so that many
	// stores fit. Default 8 MiB and 8 MiB.
	CacheBytes    int64
	MemTableBytes uint64
	// AEInterval is the replicators' AntiEntropyInterval: how often each
	// compares digests with every peer. Default 1s, as tallyd's.
	AEInterval time.Duration
	// Idle is how long the deployment is watched idle after the load, to
	// measure the background traffic (heartbeats, digest exchanges).
	// Default 5s.
	Idle time.Duration
	// Timeout bounds each wait: for recovery, for convergence after the
	// load and after the heal. Default 10m.
	Timeout time.Duration
	// Seed draws the regions of the likes. Default 1.
	Seed uint64
	// JSON prints the result as JSON instead of the table.
	JSON bool
	// CPUProfile, if set, is a file the run's CPU profile is written to.
	CPUProfile string
	// Print, if set, is a result saved with --json: its tables are
	// printed and nothing runs.
	Print string
}

func defaultSimConfig() simConfig {
	return simConfig{
		Regions: 10, Replicas: 6, Copies: 2, Items: 1_000_000, Writers: 256,
		CutFor: 60 * time.Second, CutRate: 500, VectorWriters: []int{1, 2, 6, 60},
		Check: 10_000, CacheBytes: 8 << 20, MemTableBytes: 8 << 20,
		AEInterval: time.Second, Idle: 5 * time.Second, Timeout: 10 * time.Minute, Seed: 1,
	}
}

// Bounds of bench sim's settings.
const (
	maxSimRegions  = 99
	maxSimReplicas = 99
	maxSimVector   = 10_000
)

// Validate reports every problem with c at once.
func (c simConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Regions < 2 || c.Regions > maxSimRegions {
		bad("--regions %d: want 2..%d (the heal cuts the first from the others)", c.Regions, maxSimRegions)
	}
	if c.Replicas < 1 || c.Replicas > maxSimReplicas {
		bad("--replicas %d: want 1..%d per region", c.Replicas, maxSimReplicas)
	}
	if c.Copies < 1 || c.Copies > max(c.Replicas, 1) {
		bad("--copies %d: want 1..--replicas (%d)", c.Copies, c.Replicas)
	}
	if c.Items < 1 || c.Items > maxBenchItems {
		bad("--items %d: want 1..%d", c.Items, maxBenchItems)
	}
	if c.Likes < 1 || c.Likes > 1_000_000_000 {
		bad("--likes %d: want 1..1000000000", c.Likes)
	}
	if c.Writers < 1 || c.Writers > maxBenchConcurrency {
		bad("--writers %d: want 1..%d", c.Writers, maxBenchConcurrency)
	}
	if c.CutFor <= 0 || c.CutFor > time.Hour {
		bad("--cut-for %s: want more than 0 and at most 1h", c.CutFor)
	}
	if c.CutRate < 1 || c.CutRate > 1_000_000 {
		bad("--cut-rate %d: want 1..1000000 likes/s a side", c.CutRate)
	}
	if len(c.VectorWriters) == 0 {
		bad("--vector-writers: want at least one number")
	}
	for _, k := range c.VectorWriters {
		if k < 1 || k > maxSimVector {
			bad("--vector-writers %d: want 1..%d", k, maxSimVector)
		}
	}
	if c.Check < 0 {
		bad("--check %d: want 0 (every item) or more", c.Check)
	}
	if c.CacheBytes < 1<<20 || c.MemTableBytes < 1<<20 {
		bad("--cache-bytes %d, --memtable-bytes %d: want at least 1 MiB each", c.CacheBytes, c.MemTableBytes)
	}
	if c.AEInterval < 10*time.Millisecond || c.AEInterval > time.Hour {
		bad("--ae-interval %s: want 10ms..1h", c.AEInterval)
	}
	if c.Idle < 0 || c.Idle > time.Hour {
		bad("--idle %s: want 0..1h", c.Idle)
	}
	if c.Timeout <= 0 {
		bad("--timeout %s: want more than 0", c.Timeout)
	}
	return errors.Join(errs...)
}

func parseSim(args []string, help io.Writer) (simConfig, error) {
	cfg := defaultSimConfig()
	vw := "1,2,6,60"
	cacheMiB, memMiB := 8, 8
	fs := newFlagSet("bench sim", func(fs *flag.FlagSet) {
		fs.IntVar(&cfg.Regions, "regions", cfg.Regions, "regions (r01, r02, ...); the first is cut from the others")
		fs.IntVar(&cfg.Replicas, "replicas", cfg.Replicas, "replicas per region")
		fs.IntVar(&cfg.Copies, "copies", cfg.Copies, "holders of each shard in a region")
		fs.IntVar(&cfg.Items, "items", cfg.Items, "items the likes are spread over (like n is of item n mod items)")
		fs.IntVar(&cfg.Likes, "likes", 0, "likes loaded, each by a new user (default: --items, one like per item)")
		fs.IntVar(&cfg.Writers, "writers", cfg.Writers, "concurrent Likes.Like calls while loading")
		fs.DurationVar(&cfg.CutFor, "cut-for", cfg.CutFor, "how long the first region is cut from all others while both sides are written")
		fs.IntVar(&cfg.CutRate, "cut-rate", cfg.CutRate, "likes per second on each side of the cut")
		fs.StringVar(&vw, "vector-writers", vw, "comma-separated numbers of writers of one item's vector to measure")
		fs.IntVar(&cfg.Check, "check", cfg.Check, "items whose exact count is read at every holder after the load and the heal (0: every item)")
		fs.StringVar(&cfg.Dir, "dir", "", "`directory` for the stores (a temporary one under it, removed at the end; default the system's)")
		fs.IntVar(&cacheMiB, "cache-mib", cacheMiB, "block cache of each store, MiB")
		fs.IntVar(&memMiB, "memtable-mib", memMiB, "memtable of each store, MiB")
		fs.DurationVar(&cfg.AEInterval, "ae-interval", cfg.AEInterval, "how often each replica compares digests with every peer (tallyd's anti_entropy_interval)")
		fs.DurationVar(&cfg.Idle, "idle", cfg.Idle, "how long the loaded deployment is watched idle for its background traffic")
		fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "longest wait for recovery, convergence after the load, and after the heal")
		fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the regions the likes go to")
		fs.BoolVar(&cfg.JSON, "json", false, "print the result as JSON (the progress still goes to stderr)")
		fs.StringVar(&cfg.CPUProfile, "cpu-profile", "", "write the run's CPU profile to `file`")
		fs.StringVar(&cfg.Print, "print", "", "print the tables of a result saved with --json from `file`, and run nothing")
	})
	if err := parseBenchFlags(fs, args, help); err != nil {
		return cfg, err
	}
	var errs []error
	if cfg.Likes == 0 {
		cfg.Likes = cfg.Items
	}
	cfg.CacheBytes, cfg.MemTableBytes = int64(cacheMiB)<<20, uint64(memMiB)<<20
	n, err := parseInts(vw)
	if err != nil {
		errs = append(errs, fmt.Errorf("--vector-writers: %w", err))
	}
	cfg.VectorWriters = n
	errs = append(errs, cfg.Validate())
	if err := errors.Join(errs...); err != nil {
		return cfg, usagef("bench sim: %s", oneLine(err))
	}
	return cfg, nil
}

// benchSim runs `tallyd bench sim`.
func (c *cli) benchSim(ctx context.Context, args []string) error {
	cfg, err := parseSim(args, c.stdout)
	if err != nil {
		return err
	}
	if cfg.Print != "" {
		b, err := os.ReadFile(cfg.Print)
		if err != nil {
			return fmt.Errorf("bench sim: %w", err)
		}
		var res simResult
		if err := json.Unmarshal(b, &res); err != nil {
			return fmt.Errorf("bench sim: %s: %w", cfg.Print, err)
		}
		return printSim(c.stdout, res)
	}
	progress := c.stdout
	if cfg.JSON {
		progress = c.stderr
	}
	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			return fmt.Errorf("bench sim: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("bench sim: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	res, err := runSim(ctx, cfg, progress)
	if err != nil {
		return err
	}
	if cfg.JSON {
		return writeJSON(c.stdout, res)
	}
	return printSim(c.stdout, res)
}

// simRegion names region i (from 0).
func simRegion(i int) string { return fmt.Sprintf("r%02d", i+1) }

// simReplica names replica j (from 0) of region i.
func simReplica(i, j int) string { return simRegion(i) + "-" + strconv.Itoa(j+1) }

// simNode is one replica of the simulation.
type simNode struct {
	id, region string
	store      *storage.Store
	replica    *region.Replica
	rep        *replication.Replicator
}

// close stops the replica's replication and closes it and its store.
func (n *simNode) close() error {
	if n.rep != nil {
		n.rep.Close()
	}
	var errs []error
	if n.replica != nil {
		errs = append(errs, n.replica.Close())
	}
	if n.store != nil {
		errs = append(errs, n.store.Close())
	}
	return errors.Join(errs...)
}

// simDeployment is every replica of the simulation on one MemNetwork.
type simDeployment struct {
	cfg   simConfig
	dir   string
	net   *replication.MemNetwork
	wire  *wireCounter
	maps  shard.Maps
	view  *simView
	nodes []*simNode
	// holders[r][s] are the indices in nodes of region r's holders of
	// shard s.
	holders [][][]int
	at      map[string]int // index in nodes by replica id
	cancel  context.CancelFunc
}

// startSim opens every store and replica, starts their replicators and
// waits until each has recovered (synced from all its peers).
func startSim(ctx context.Context, cfg simConfig) (_ *simDeployment, err error) {
	dir, err := os.MkdirTemp(cfg.Dir, "tally-sim-")
	if err != nil {
		return nil, fmt.Errorf("bench sim: %w", err)
	}
	d := &simDeployment{cfg: cfg, dir: dir, net: replication.NewMemNetwork(replication.MemConfig{Seed: cfg.Seed}), wire: &wireCounter{}}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.Close())
		}
	}()
	var ids []string
	for i := range cfg.Regions {
		var members []string
		for j := range cfg.Replicas {
			members = append(members, simReplica(i, j))
		}
		m, err := shard.Assign(simRegion(i), members, cfg.Copies)
		if err != nil {
			return d, fmt.Errorf("bench sim: shard map of %s: %w", simRegion(i), err)
		}
		d.maps = append(d.maps, m)
		ids = append(ids, members...)
	}
	d.view = newSimView(d.maps)
	view := d.view
	// Each store's record filter is sized for the records it will hold.
	held := int64(cfg.Likes) * int64(cfg.Copies) / int64(cfg.Replicas)
	filter := max(held*2, 64<<10)
	var rctx context.Context
	rctx, d.cancel = context.WithCancel(context.WithoutCancel(ctx))
	for k, id := range ids {
		ri := k / cfg.Replicas
		n := &simNode{id: id, region: simRegion(ri)}
		d.nodes = append(d.nodes, n)
		n.store, err = storage.Open(storage.Config{
			Dir: filepath.Join(dir, id), Durability: storage.DurabilityNone,
			CacheBytes: cfg.CacheBytes, MemTableBytes: cfg.MemTableBytes, RecordFilterBytes: filter,
		})
		if err != nil {
			return d, fmt.Errorf("bench sim: store of %s: %w", id, err)
		}
		own := d.maps[ri].Held(id)
		ob := replication.NewOutbox()
		n.replica, err = region.New(region.Config{
			Region: n.region, Replica: id, Store: n.store, Holds: own.Has, HoldWrites: true, OnCommit: ob.Add,
			// As tallyd's defaults, but with no time windows: their slots
			// depend on when the run happens to write.
			LikeLists: true, EventLog: true, IdempotencyTTL: 24 * time.Hour,
			Windows:    &region.WindowConfig{Uniques: []region.WindowLevel{}},
			CacheItems: 10_000,
		})
		if err != nil {
			return d, fmt.Errorf("bench sim: replica %s: %w", id, err)
		}
		peers := make([]string, 0, len(ids)-1)
		for _, p := range ids {
			if p != id {
				peers = append(peers, p)
			}
		}
		n.rep, err = replication.New(replication.Config{
			Replica: n.replica, Store: n.store, Outbox: ob, Peers: peers, Shards: view, AntiEntropyInterval: cfg.AEInterval,
			Transport: &countingTransport{inner: d.net.Join(id), own: replication.DeltaSubject(n.region, id), c: d.wire},
		})
		if err != nil {
			return d, fmt.Errorf("bench sim: replicator of %s: %w", id, err)
		}
		if err := n.rep.Start(rctx); err != nil {
			return d, fmt.Errorf("bench sim: replicator of %s: %w", id, err)
		}
	}
	d.at = make(map[string]int, len(ids))
	for k, id := range ids {
		d.at[id] = k
	}
	d.holders = make([][][]int, cfg.Regions)
	for ri, m := range d.maps {
		d.holders[ri] = make([][]int, shard.Count)
		for s := range shard.Count {
			for _, id := range m.Holders(s) {
				d.holders[ri][s] = append(d.holders[ri][s], d.at[id])
			}
		}
	}
	wctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	err = poll.Until(wctx, 50*time.Millisecond, func() error {
		for _, n := range d.nodes {
			if !n.rep.Recovered() {
				return fmt.Errorf("%s has not recovered", n.id)
			}
		}
		return nil
	})
	if err != nil {
		return d, fmt.Errorf("bench sim: recovery: %w", err)
	}
	return d, nil
}

// simView is shard.Maps as a replicator's ShardView, each replica's set
// of kept shards (shard.Map.Keeps) looked up once: the same answers,
// without the search of every map that Maps.Holds makes for each shard
// compared (which took a sixth of the simulation's CPU). The move phase
// swaps in the maps of a move.
type simView struct {
	p       atomic.Pointer[map[string]*shard.Set]
	joining atomic.Pointer[map[string]*shard.Set]
	region  atomic.Pointer[map[string]string]
}

func newSimView(maps shard.Maps) *simView {
	v := &simView{}
	v.set(maps)
	return v
}

// set makes maps the view, at once for every replicator.
func (v *simView) set(maps shard.Maps) {
	kept, joining, region := map[string]*shard.Set{}, map[string]*shard.Set{}, map[string]string{}
	for _, m := range maps {
		for _, id := range m.Replicas() {
			k, j := m.Keeps(id), m.Joining(id)
			kept[id], joining[id], region[id] = &k, &j, m.Region
		}
	}
	v.region.Store(&region)
	v.joining.Store(&joining)
	v.p.Store(&kept)
}

// Holds implements replication.ShardView as shard.Maps does: a replica in
// no map holds every shard.
func (v *simView) Holds(replica string, s int) bool {
	set, ok := (*v.p.Load())[replica]
	return !ok || set.Has(s)
}

// RegionOf implements replication.RegionView as shard.Maps does.
func (v *simView) RegionOf(replica string) (string, bool) {
	rg, ok := (*v.region.Load())[replica]
	return rg, ok
}

// Joins implements replication.ShardView as shard.Maps does: a replica
// in no map joins nothing.
func (v *simView) Joins(replica string, s int) bool {
	set, ok := (*v.joining.Load())[replica]
	return ok && set.Has(s)
}

// Close stops every replica and removes the stores.
func (d *simDeployment) Close() error {
	if d.cancel != nil {
		d.cancel()
	}
	var errs []error
	for _, n := range d.nodes {
		errs = append(errs, n.close())
	}
	errs = append(errs, os.RemoveAll(d.dir))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bench sim: close: %w", err)
	}
	return nil
}
