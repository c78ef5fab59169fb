package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/internal/base/poll"
	"github.com/tally-dev/tally/node"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/shard"
)

// shardSpaceRow is one deployment's outcome of bench shards --measure
// space.
type shardSpaceRow struct {
	Replicas int // per region
	Copies   int // of each shard in a region, as the map says
	// PerReplica is every replica of every region, in the deployment's
	// order.
	PerReplica []replicaSpace
}

// replicaSpace is one replica's share and its size.
type replicaSpace struct {
	Replica    string
	Shards     int   // held, of shard.Count (the global shard included)
	Likes      int64 // of the loaded likes, those on its shards
	TableBytes int64 // live sstables after a full compaction
}

// Bytes are the smallest, mean and largest TableBytes of the replicas.
func (r shardSpaceRow) Bytes() (lo, mean, hi int64) {
	lo, hi = math.MaxInt64, 0
	var sum int64
	for _, p := range r.PerReplica {
		lo, hi, sum = min(lo, p.TableBytes), max(hi, p.TableBytes), sum+p.TableBytes
	}
	if len(r.PerReplica) == 0 {
		return 0, 0, 0
	}
	return lo, sum / int64(len(r.PerReplica)), hi
}

// MeanShards and MeanLikes are the replicas' mean share.
func (r shardSpaceRow) MeanShards() float64 {
	var n int
	for _, p := range r.PerReplica {
		n += p.Shards
	}
	return float64(n) / float64(max(len(r.PerReplica), 1))
}

func (r shardSpaceRow) MeanLikes() float64 {
	var n int64
	for _, p := range r.PerReplica {
		n += p.Likes
	}
	return float64(n) / float64(max(len(r.PerReplica), 1))
}

// shardItems are the items of a run and their shards.
type shardItems struct {
	names  []string
	shards []int
}

// newShardItems names n items prefix0, prefix1, ...
func newShardItems(prefix string, n int) shardItems {
	it := shardItems{names: make([]string, n), shards: make([]int, n)}
	for i := range n {
		it.names[i] = prefix + strconv.Itoa(i)
		it.shards[i] = shard.Of(it.names[i])
	}
	return it
}

// want is item i's exact count after likes: like n goes to item n mod
// items, each by its own user.
func (it shardItems) want(i, likes int) int64 {
	n := likes / len(it.names)
	if i < likes%len(it.names) {
		n++
	}
	return int64(n)
}

// runShardsSpace starts a deployment per cfg.Replicas value, loads the
// same cfg.Likes likes into each, and reports every replica's sstable
// bytes once every copy holds them.
func runShardsSpace(ctx context.Context, cfg shardsBenchConfig, env Env, log hclog.Logger, out io.Writer) ([]shardSpaceRow, error) {
	windows := "off"
	if cfg.Windows {
		windows = node.DefaultConfig().Windows
	}
	fmt.Fprintf(out, "bench shards --measure space: %d likes, user-0..user-%d round-robin over %d items post-0.., regions %s, copies %d,\n",
		cfg.Likes, cfg.Likes-1, cfg.Items, strings.Join(cfg.Regions, ","), cfg.Copies)
	fmt.Fprintf(out, "  durability %s, like lists on, event log %s, milestones off, windows %s\n", cfg.Durability, onOff(cfg.EventLog), windows)
	fmt.Fprintf(out, "  each like goes through Replica.Do at one holder of its item's shard in %s (an item's likes alternate over its holders);\n", cfg.Regions[0])
	fmt.Fprintln(out, "  once every replica of every region reads the exact count of every item on its shards and /v1/convergence")
	fmt.Fprintln(out, "  says converged everywhere, each store is compacted fully and its live sstable bytes read")
	items := newShardItems("post-", cfg.Items)
	var rows []shardSpaceRow
	for _, n := range cfg.Replicas {
		row, err := spaceDeployment(ctx, cfg, n, items, env, log, out)
		if err != nil {
			return rows, err
		}
		rows = append(rows, row)
	}
	fmt.Fprintln(out)
	return rows, printSpaceTable(out, cfg.Likes, rows)
}

// printSpaceTable prints a row per deployment.
func printSpaceTable(out io.Writer, likes int, rows []shardSpaceRow) error {
	var base int64 // the one-replica row's mean, if measured
	for _, r := range rows {
		if r.Replicas == 1 {
			_, base, _ = r.Bytes()
		}
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "replicas\tcopies\tshards held\tlikes held\tbytes per replica\tmin\tmax\tper like loaded\tper like held\tvs 1 replica\tcopies/replicas\t")
	for _, r := range rows {
		lo, mean, hi := r.Bytes()
		vs := "-"
		if base > 0 {
			vs = strconv.FormatFloat(float64(mean)/float64(base), 'f', 3, 64)
		}
		fmt.Fprintf(tw, "%d\t%d\t%.0f\t%.0f\t%d\t%d\t%d\t%.1f\t%.1f\t%s\t%.3f\t\n",
			r.Replicas, r.Copies, r.MeanShards(), r.MeanLikes(), mean, lo, hi,
			float64(mean)/float64(likes), float64(mean)/max(r.MeanLikes(), 1), vs, float64(r.Copies)/float64(r.Replicas))
	}
	return tw.Flush()
}

// spaceDeployment runs one deployment of replicas per region.
func spaceDeployment(ctx context.Context, cfg shardsBenchConfig, replicas int, items shardItems, env Env, log hclog.Logger, out io.Writer) (row shardSpaceRow, err error) {
	t0 := time.Now()
	d, err := startSharded(ctx, cfg, replicas, env, log, func(c *node.Config) {
		if !cfg.Windows {
			c.Windows = ""
		}
		c.EventLog = cfg.EventLog
	})
	if err != nil {
		return row, err
	}
	defer func() { err = errors.Join(err, d.Close(ctx)) }()
	row = shardSpaceRow{Replicas: replicas, Copies: d.maps[cfg.Regions[0]].Copies}
	fmt.Fprintf(out, "\n%d replica(s) per region: ready in %s (data %s)\n", replicas, time.Since(t0).Round(time.Millisecond), d.dir)

	t1 := time.Now()
	if err := d.loadLikes(ctx, cfg, items); err != nil {
		return row, err
	}
	loaded := time.Now()
	fmt.Fprintf(out, "  loaded in %s", loaded.Sub(t1).Round(time.Millisecond))
	wctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if err := poll.Until(wctx, 100*time.Millisecond, func() error { return d.holdExact(cfg.Likes, items) }); err != nil {
		return row, fmt.Errorf("bench shards: the likes did not reach every copy within %s: %w", cfg.Timeout, err)
	}
	exact := time.Now()
	if err := poll.Until(wctx, 100*time.Millisecond, func() error {
		ok, err := d.convergedSince(wctx, exact)
		if err == nil && !ok {
			err = errors.New("not converged everywhere")
		}
		return err
	}); err != nil {
		return row, fmt.Errorf("bench shards: not converged within %s of loading: %w", cfg.Timeout, err)
	}
	fmt.Fprintf(out, ", every copy exact %s later, converged %s later", exact.Sub(loaded).Round(time.Millisecond), time.Since(exact).Round(time.Millisecond))

	t2 := time.Now()
	for i, n := range d.Nodes() {
		st := n.Store()
		if err := st.Compact(ctx); err != nil {
			return row, fmt.Errorf("bench shards: %s: %w", d.id[i], err)
		}
		tb, err := st.TableBytes()
		if err != nil {
			return row, fmt.Errorf("bench shards: %s: %w", d.id[i], err)
		}
		rs := replicaSpace{Replica: d.id[i], TableBytes: tb}
		for s := range shard.Count {
			if d.holds(i, s) {
				rs.Shards++
			}
		}
		for k, s := range items.shards {
			if d.holds(i, s) {
				rs.Likes += items.want(k, cfg.Likes)
			}
		}
		row.PerReplica = append(row.PerReplica, rs)
	}
	fmt.Fprintf(out, ", compacted in %s\n", time.Since(t2).Round(time.Millisecond))
	for _, p := range row.PerReplica {
		fmt.Fprintf(out, "  %s: %d shards, %d likes, %d sstable bytes\n", p.Replica, p.Shards, p.Likes, p.TableBytes)
	}
	return row, nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// spaceBatch is how many likes one Replica.Do call carries.
const spaceBatch = 4096

// loadLikes likes cfg.Likes pairs through Replica.Do at holders in the
// first region: like n is item n mod items by user-n, at the item's
// holders in turn. Every like must change its item's count.
func (d *shardedDeployment) loadLikes(ctx context.Context, cfg shardsBenchConfig, items shardItems) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	nodes := d.Nodes()
	holders := d.holders[cfg.Regions[0]]
	queues := map[int]chan []region.Op{}
	var wg sync.WaitGroup
	for _, i := range d.of(cfg.Regions[0]) {
		q := make(chan []region.Op, 4)
		queues[i] = q
		rep := nodes[i].Replica()
		for range 2 { // two batches in flight a replica, for group commits
			wg.Go(func() {
				for ops := range q {
					if err := doLikes(ctx, rep, ops); err != nil {
						cancel(fmt.Errorf("bench shards: %s: %w", d.id[i], err))
					}
				}
			})
		}
	}
	pending := map[int][]region.Op{}
	send := func(i int) {
		select {
		case queues[i] <- pending[i]:
		case <-ctx.Done():
		}
		pending[i] = make([]region.Op, 0, spaceBatch)
	}
	for n := 0; n < cfg.Likes && ctx.Err() == nil; n++ {
		k := n % len(items.names)
		hs := holders[items.shards[k]]
		h := hs[(n/len(items.names))%len(hs)]
		pending[h] = append(pending[h], region.Op{Kind: region.OpLike, Item: items.names[k], User: "user-" + strconv.Itoa(n)})
		if len(pending[h]) == spaceBatch {
			send(h)
		}
	}
	for i, ops := range pending {
		if len(ops) > 0 {
			send(i)
		}
	}
	for _, q := range queues {
		close(q)
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

// doLikes applies one batch of likes; each must change its item's count.
func doLikes(ctx context.Context, rep *region.Replica, ops []region.Op) error {
	if ctx.Err() != nil {
		return nil // another batch failed; the load stops
	}
	rs, err := rep.Do(ctx, ops)
	if err != nil {
		return err
	}
	for i, r := range rs {
		if r.Err != nil {
			return fmt.Errorf("like %s/%s: %w", ops[i].Item, ops[i].User, r.Err)
		}
		if !r.Changed {
			return fmt.Errorf("like %s/%s changed nothing", ops[i].Item, ops[i].User)
		}
	}
	return nil
}

// holdExact fails unless every replica reads, from its own store, the
// exact count of every item on the shards it holds.
func (d *shardedDeployment) holdExact(likes int, items shardItems) error {
	for i, n := range d.Nodes() {
		rep := n.Replica()
		for k, s := range items.shards {
			if !d.holds(i, s) {
				continue
			}
			got, err := rep.Likes().Count(items.names[k])
			if err != nil {
				return fmt.Errorf("%s: %s: %w", d.id[i], items.names[k], err)
			}
			if want := items.want(k, likes); got.Value != want {
				return fmt.Errorf("%s: %s = %d, want %d", d.id[i], items.names[k], got.Value, want)
			}
		}
	}
	return nil
}
