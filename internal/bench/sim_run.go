package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/replication"
	"github.com/tally-dev/tally/shard"
	"github.com/tally-dev/tally/storage"
)

// simResult is what bench sim measured.
type simResult struct {
	Regions      int           `json:"regions"`
	AEInterval   float64       `json:"ae_interval_seconds"`
	Replicas     int           `json:"replicas_per_region"`
	Copies       int           `json:"copies"`
	Items        int           `json:"items"`
	Likes        int           `json:"likes"`
	ReadySeconds float64       `json:"ready_seconds"`
	Load         simLoad       `json:"load"`
	Stored       simStored     `json:"stored"`
	Idle         simIdle       `json:"idle"`
	Cut          simCut        `json:"cut"`
	Move         *simMove      `json:"move,omitempty"`
	Vectors      []simVector   `json:"vectors"`
	Projection   simProjection `json:"projection"`
}

// simLoad is the load of the run's likes and the wait for every copy.
type simLoad struct {
	Seconds     float64 `json:"seconds"`
	LikesPerSec float64 `json:"likes_per_second"`
	// ConvergedSeconds is from the last like acknowledged to every
	// replicator converged (from comparisons after it) and the checked
	// items exact at every holder.
	ConvergedSeconds float64 `json:"converged_seconds"`
	Checked          int     `json:"items_checked"`
	// Wire is what the transports carried while the likes were written;
	// Tail from then until converged.
	Wire wireBytes `json:"wire"`
	Tail wireBytes `json:"wire_until_converged"`
}

// simStored is the replicas' sstable bytes after the load, each store
// compacted.
type simStored struct {
	PerReplica []simReplicaBytes `json:"per_replica"`
	// Empty is a store's bytes before the load (the median).
	Empty            int64   `json:"empty_bytes"`
	Min              int64   `json:"min_bytes"`
	Median           int64   `json:"median_bytes"`
	Max              int64   `json:"max_bytes"`
	Total            int64   `json:"total_bytes"`
	CompactSeconds   float64 `json:"compact_seconds"`
	PerLike          float64 `json:"bytes_per_like"`      // Total / Likes: every copy in every region
	PerLikeCopy      float64 `json:"bytes_per_like_copy"` // Total / (Likes × Regions × Copies)
	PerLikeAtReplica float64 `json:"bytes_per_like_per_replica"`
}

type simReplicaBytes struct {
	Replica string `json:"replica"`
	Shards  int    `json:"shards"`
	Likes   int64  `json:"likes_held"`
	Bytes   int64  `json:"bytes"`
}

// simIdle is the background traffic of the loaded, converged deployment.
type simIdle struct {
	Seconds float64   `json:"seconds"`
	Wire    wireBytes `json:"wire"`
	// DigestBytesPerReplica is the digest exchanges' bytes per replica
	// per anti-entropy interval, measured.
	DigestBytesPerReplica float64 `json:"ae_digest_bytes_per_replica_interval"`
	// Model is the same computed from the encoders over the run's maps.
	Model simDigestModel `json:"model"`
	// Beats is the fast path's idle bytes per replica, computed from the
	// encoders over the run's maps.
	Beats simBeatModel `json:"heartbeat_model"`
}

// simCut is the cut of the first region from the others and its heal.
type simCut struct {
	Region    string  `json:"region"`
	Seconds   float64 `json:"seconds"`
	Rate      int     `json:"likes_per_second_a_side"`
	CutLikes  int     `json:"likes_cut_side"`
	RestLikes int     `json:"likes_other_side"`
	Touched   int     `json:"items_touched"`
	// After the heal: every replicator converged from comparisons after
	// it, then the checked touched items exact at every holder (the
	// second includes the time the check takes).
	ConvergedSeconds float64   `json:"converged_seconds"`
	ExactSeconds     float64   `json:"exact_seconds"`
	Checked          int       `json:"items_checked"`
	Wire             wireBytes `json:"wire_until_converged"`
	// The entries the heal had to bring: summed over every replica,
	// those it held once converged and not when the heal began, and
	// their stored bytes (key and value).
	DifferingEntries int64 `json:"differing_entries"`
	DifferingBytes   int64 `json:"differing_entry_bytes"`
}

// simVector is one item's vector written by Writers replicas.
type simVector struct {
	Writers int `json:"writers"`
	// StoredBytes is one item's sstable bytes (the mean over
	// simVectorItems items, compacted, less the empty store).
	StoredBytes float64 `json:"stored_bytes"`
	// PageBytes is what the vector adds to an anti-entropy page.
	PageBytes int `json:"ae_page_bytes"`
}

// simProjection scales the measured figures to more replicas per region.
type simProjection struct {
	Replicas          int     `json:"replicas_per_region"`
	BytesPerReplica   float64 `json:"bytes_per_replica"`
	FastBytesPerLike  float64 `json:"fast_path_bytes_per_like"`
	DigestBytesPerSec float64 `json:"idle_ae_digest_bytes_per_second"`
	// Model is one replica's digest exchanges an interval at that size
	// (shard.Assign's maps of every region).
	Model simDigestModel `json:"digest_model"`
	// Beats is one replica's idle fast path at that size.
	Beats                simBeatModel `json:"heartbeat_model"`
	HeartbeatBytesPerSec float64      `json:"idle_fast_path_bytes_per_second"`
}

// simVectorItems is how many items each vector size is measured over.
const simVectorItems = 1000

// simProjectTo is the replicas per region the projection is for.
const simProjectTo = 100

// runSim runs the whole simulation, writing progress to out.
func runSim(ctx context.Context, cfg simConfig, out io.Writer) (res simResult, err error) {
	res = simResult{AEInterval: cfg.AEInterval.Seconds(), Regions: cfg.Regions, Replicas: cfg.Replicas, Copies: cfg.Copies, Items: cfg.Items, Likes: cfg.Likes}
	fmt.Fprintf(out, "bench sim: %d regions × %d replicas, copies %d, %d likes over %d items, one process, in-memory transport,\n",
		cfg.Regions, cfg.Replicas, cfg.Copies, cfg.Likes, cfg.Items)
	fmt.Fprintf(out, "  Pebble stores (durability none, cache %d MiB, memtable %d MiB), like lists and event log on, no time windows\n",
		cfg.CacheBytes>>20, cfg.MemTableBytes>>20)
	t0 := time.Now()
	d, err := startSim(ctx, cfg)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, d.Close()) }()
	res.ReadySeconds = time.Since(t0).Seconds()
	fmt.Fprintf(out, "%d replicas recovered in %s (data %s)\n", len(d.nodes), time.Since(t0).Round(time.Millisecond), d.dir)

	if res.Stored.Empty, err = d.medianEmpty(ctx); err != nil {
		return res, err
	}
	if err := d.runLoad(ctx, &res.Load, out); err != nil {
		return res, err
	}
	if err := d.measureStored(ctx, &res.Stored, out); err != nil {
		return res, err
	}
	w0 := d.wire.snapshot()
	if err := sleepCtx(ctx, cfg.Idle); err != nil {
		return res, err
	}
	res.Idle = simIdle{Seconds: cfg.Idle.Seconds(), Wire: d.wire.snapshot().since(w0)}
	if intervals := cfg.Idle.Seconds() / cfg.AEInterval.Seconds(); intervals > 0 {
		res.Idle.DigestBytesPerReplica = float64(res.Idle.Wire.Digests) / float64(len(d.nodes)) / intervals
	}
	res.Idle.Model = digestModel(d.maps, d.maps[0].Replicas()[0])
	res.Idle.Beats = beatModel(d.maps, d.maps[0].Replicas()[0])
	if err := d.runCut(ctx, &res.Cut, out); err != nil {
		return res, err
	}
	if res.Move, err = d.runMove(ctx, out); err != nil {
		return res, err
	}
	if res.Vectors, err = d.measureVectors(ctx, out); err != nil {
		return res, err
	}
	res.Projection = project(res, simProjectTo)
	return res, nil
}

// simItem names item k.
func simItem(k int) string { return "item-" + strconv.Itoa(k) }

// mix64 is a finalizer (splitmix64's) for drawing from seeds.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// want is item k's count after the load: like n is of item n mod Items.
func (c simConfig) want(k int) int64 {
	n := c.Likes / c.Items
	if k < c.Likes%c.Items {
		n++
	}
	return int64(n)
}

// checkItems are the items whose counts are checked: Check of them
// spread evenly, or all.
func (c simConfig) checkItems() []int {
	n := c.Items
	if c.Check > 0 && c.Check < n {
		n = c.Check
	}
	out := make([]int, n)
	for i := range out {
		out[i] = int(int64(i) * int64(c.Items) / int64(n))
	}
	return out
}

// medianEmpty compacts every store before the load and returns the
// median of their sstable bytes.
func (d *simDeployment) medianEmpty(ctx context.Context) (int64, error) {
	var all []int64
	for _, n := range d.nodes {
		if err := n.store.Compact(ctx); err != nil {
			return 0, fmt.Errorf("bench sim: %s: %w", n.id, err)
		}
		b, err := n.store.TableBytes()
		if err != nil {
			return 0, fmt.Errorf("bench sim: %s: %w", n.id, err)
		}
		all = append(all, b)
	}
	slices.Sort(all)
	return all[len(all)/2], nil
}

// runLoad likes cfg.Likes pairs: like n is of item n mod Items by user
// u<n>, at a holder of the item's shard in a region drawn from the seed,
// through Likes.Like, Writers at a time. Then it waits for every copy.
func (d *simDeployment) runLoad(ctx context.Context, res *simLoad, out io.Writer) error {
	cfg := d.cfg
	w0 := d.wire.snapshot()
	t0 := time.Now()
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range cfg.Writers {
		wg.Go(func() {
			for lctx.Err() == nil {
				n := int(next.Add(1) - 1)
				if n >= cfg.Likes {
					return
				}
				item := simItem(n % cfg.Items)
				h := mix64(cfg.Seed ^ uint64(n)*0x9e3779b97f4a7c15)
				hs := d.holders[h%uint64(cfg.Regions)][shard.Of(item)]
				node := d.nodes[hs[(h>>32)%uint64(len(hs))]]
				r, err := node.replica.Likes().Like(lctx, item, "u"+strconv.Itoa(n))
				switch {
				case err != nil:
					cancel(fmt.Errorf("bench sim: like %s at %s: %w", item, node.id, err))
				case !r.Changed:
					cancel(fmt.Errorf("bench sim: like %s by u%d at %s changed nothing", item, n, node.id))
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(lctx); err != nil {
		return err
	}
	loaded := time.Now()
	w1 := d.wire.snapshot()
	res.Wire = w1.since(w0)
	res.Seconds = loaded.Sub(t0).Seconds()
	res.LikesPerSec = float64(cfg.Likes) / res.Seconds
	fmt.Fprintf(out, "loaded %d likes in %s (%.0f/s)", cfg.Likes, loaded.Sub(t0).Round(time.Millisecond), res.LikesPerSec)
	items := cfg.checkItems()
	res.Checked = len(items)
	if err := d.waitExact(ctx, loaded, items, cfg.want); err != nil {
		return fmt.Errorf("bench sim: after the load: %w", err)
	}
	res.ConvergedSeconds = time.Since(loaded).Seconds()
	res.Tail = d.wire.snapshot().since(w1)
	fmt.Fprintf(out, "; converged and %d items exact at every holder %s later\n", len(items), time.Since(loaded).Round(time.Millisecond))
	return nil
}

// waitExact waits until every replicator has converged from comparisons
// made after since, and then items read want at every holder in every
// region.
func (d *simDeployment) waitExact(ctx context.Context, since time.Time, items []int, want func(int) int64) error {
	wctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	return pollEvery(wctx, 100*time.Millisecond, func() error {
		if err := d.converged(since); err != nil {
			return err
		}
		return d.exact(items, want)
	})
}

// converged fails unless every replicator's last digest comparison with
// each peer (Replicator.Convergence's peers) was made after since and
// found no segment of the shards they share differing, without error.
// That is Convergence's converged without its freshness window (a
// comparison within two anti-entropy intervals and a request timeout of
// now): sixty replicas starved of CPU in one process take longer than
// that over a round of their fifty-nine peers, though nothing differs.
func (d *simDeployment) converged(since time.Time) error {
	for _, n := range d.nodes {
		c := n.rep.Convergence()
		if !c.Recovered {
			return fmt.Errorf("%s has not recovered", n.id)
		}
		for _, p := range c.Peers {
			switch {
			case p.ComparedAt == nil || p.ComparedAt.Before(since):
				return fmt.Errorf("%s has not compared with %s since %s", n.id, p.Replica, since.Format(time.TimeOnly))
			case p.DifferingSegments != 0 || p.Error != "":
				return fmt.Errorf("%s differs from %s in %d segments (error %q)", n.id, p.Replica, p.DifferingSegments, p.Error)
			}
		}
	}
	return nil
}

// exact fails unless every holder of each item's shard, in every region,
// reads want(item) from its own store.
func (d *simDeployment) exact(items []int, want func(int) int64) error {
	var bad int
	var first error
	for _, k := range items {
		item := simItem(k)
		s := shard.Of(item)
		for ri := range d.cfg.Regions {
			for _, h := range d.holders[ri][s] {
				got, err := d.nodes[h].replica.Likes().Count(item)
				if err == nil && got.Value != want(k) {
					err = fmt.Errorf("%s reads %s = %d, want %d", d.nodes[h].id, item, got.Value, want(k))
				}
				if err != nil {
					bad++
					if first == nil {
						first = err
					}
				}
			}
		}
	}
	if first != nil {
		return fmt.Errorf("%d reads wrong, the first: %w", bad, first)
	}
	return nil
}

// pollEvery calls check every interval (less the time it took) until it
// returns nil or ctx ends.
func pollEvery(ctx context.Context, every time.Duration, check func() error) error {
	for {
		t := time.Now()
		err := check()
		if err == nil {
			return nil
		}
		if err := sleepCtx(ctx, every-time.Since(t)); err != nil {
			return fmt.Errorf("%w (last: %v)", err, check())
		}
	}
}

// measureStored compacts every store and reads its sstable bytes.
func (d *simDeployment) measureStored(ctx context.Context, res *simStored, out io.Writer) error {
	cfg := d.cfg
	perShard := make([]int64, shard.Count)
	for k := range cfg.Items {
		perShard[shard.Of(simItem(k))] += cfg.want(k)
	}
	t0 := time.Now()
	var all []int64
	for _, m := range d.maps {
		for _, id := range m.Replicas() {
			n := d.nodes[d.at[id]]
			if err := n.store.Compact(ctx); err != nil {
				return fmt.Errorf("bench sim: %s: %w", n.id, err)
			}
			b, err := n.store.TableBytes()
			if err != nil {
				return fmt.Errorf("bench sim: %s: %w", n.id, err)
			}
			rb := simReplicaBytes{Replica: id, Bytes: b}
			held := m.Held(id)
			for s := range shard.Count {
				if held.Has(s) {
					rb.Shards++
					rb.Likes += perShard[s]
				}
			}
			res.PerReplica = append(res.PerReplica, rb)
			res.Total += b
			all = append(all, b)
		}
	}
	res.CompactSeconds = time.Since(t0).Seconds()
	slices.Sort(all)
	res.Min, res.Median, res.Max = all[0], all[len(all)/2], all[len(all)-1]
	res.PerLike = float64(res.Total) / float64(cfg.Likes)
	res.PerLikeCopy = res.PerLike / float64(cfg.Regions*cfg.Copies)
	res.PerLikeAtReplica = float64(res.Median) / float64(cfg.Likes)
	fmt.Fprintf(out, "compacted %d stores in %s: %d bytes in all, median %d a replica\n", len(all), time.Since(t0).Round(time.Millisecond), res.Total, res.Median)
	return nil
}

// simLike is one like written during the cut.
type simLike struct {
	k    int
	user string
}

// runCut cuts the first region from every other for CutFor while each
// side takes CutRate likes a second, heals, and times the way back to
// converged and exact. Every fourth like of a side is by a user who likes
// the same item on the other side: it must count once.
func (d *simDeployment) runCut(ctx context.Context, res *simCut, out io.Writer) error {
	cfg := d.cfg
	res.Region, res.Seconds, res.Rate = simRegion(0), cfg.CutFor.Seconds(), cfg.CutRate
	var sides [2][]int // regions
	sides[0] = []int{0}
	for ri := 1; ri < cfg.Regions; ri++ {
		sides[1] = append(sides[1], ri)
	}
	for _, a := range d.nodes[:cfg.Replicas] {
		for _, b := range d.nodes[cfg.Replicas:] {
			d.net.Cut(a.id, b.id)
		}
	}
	fmt.Fprintf(out, "cut %s from the other regions for %s, %d likes/s a side\n", res.Region, cfg.CutFor, cfg.CutRate)
	var liked [2][]simLike
	var errs [2]error
	var wg sync.WaitGroup
	start := time.Now()
	for side := range sides {
		wg.Go(func() { liked[side], errs[side] = d.writeSide(ctx, side, sides[side], start) })
	}
	wg.Wait()
	if err := errors.Join(errs[0], errs[1]); err != nil {
		d.net.HealAll()
		return fmt.Errorf("bench sim: during the cut: %w", err)
	}
	res.CutLikes, res.RestLikes = len(liked[0]), len(liked[1])
	extra := map[int]map[string]bool{}
	for _, side := range liked {
		for _, l := range side {
			if extra[l.k] == nil {
				extra[l.k] = map[string]bool{}
			}
			extra[l.k][l.user] = true
		}
	}
	touched := make([]int, 0, len(extra))
	for k := range extra {
		touched = append(touched, k)
	}
	slices.Sort(touched)
	res.Touched = len(touched)
	if cfg.Check > 0 && len(touched) > cfg.Check {
		sample := make([]int, cfg.Check)
		for i := range sample {
			sample[i] = touched[i*len(touched)/cfg.Check]
		}
		touched = sample
	}
	res.Checked = len(touched)
	want := func(k int) int64 { return cfg.want(k) + int64(len(extra[k])) }

	held, err := d.entryHashes()
	if err != nil {
		return fmt.Errorf("bench sim: before the heal: %w", err)
	}
	w0 := d.wire.snapshot()
	healed := time.Now()
	d.net.HealAll()
	wctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if err := pollEvery(wctx, 50*time.Millisecond, func() error { return d.converged(healed) }); err != nil {
		return fmt.Errorf("bench sim: after the heal: %w", err)
	}
	res.ConvergedSeconds = time.Since(healed).Seconds()
	res.Wire = d.wire.snapshot().since(w0)
	if res.DifferingEntries, res.DifferingBytes, err = d.newEntries(held); err != nil {
		return fmt.Errorf("bench sim: after the heal: %w", err)
	}
	if err := d.waitExact(ctx, healed, touched, want); err != nil {
		return fmt.Errorf("bench sim: after the heal: %w", err)
	}
	res.ExactSeconds = time.Since(healed).Seconds()
	fmt.Fprintf(out, "  %d likes on the cut side, %d on the other, %d items touched; healed: converged in %s, %d items exact at every holder in %s\n",
		res.CutLikes, res.RestLikes, res.Touched, secs(res.ConvergedSeconds), res.Checked, secs(res.ExactSeconds))
	return nil
}

// entryHashes is, for each replica, the entry hashes of its store,
// sorted.
func (d *simDeployment) entryHashes() ([][]uint64, error) {
	out := make([][]uint64, len(d.nodes))
	for i, n := range d.nodes {
		for seg := range storage.Segments {
			if err := n.store.SegmentHashes(seg, func(_ []byte, _ int, h uint64) { out[i] = append(out[i], h) }); err != nil {
				return nil, fmt.Errorf("%s: %w", n.id, err)
			}
		}
		slices.Sort(out[i])
	}
	return out, nil
}

// newEntries counts, over every replica, the entries of its store whose
// hash is not in held (entryHashes, taken earlier), and their stored
// bytes: what came since (an entry that changed counts as new).
func (d *simDeployment) newEntries(held [][]uint64) (entries, size int64, err error) {
	for i, n := range d.nodes {
		for seg := range storage.Segments {
			if err := n.store.SegmentEntries(seg, func(key, val []byte, _ int, h uint64) {
				if _, ok := slices.BinarySearch(held[i], h); !ok {
					entries++
					size += int64(len(key) + len(val))
				}
			}); err != nil {
				return 0, 0, fmt.Errorf("%s: %w", n.id, err)
			}
		}
	}
	return entries, size, nil
}

// simCutWriters are the concurrent writers of each side of the cut.
const simCutWriters = 16

// writeSide likes at CutRate a second on one side until CutFor has passed
// since start, at holders in the side's regions.
func (d *simDeployment) writeSide(ctx context.Context, side int, regions []int, start time.Time) ([]simLike, error) {
	cfg := d.cfg
	end := start.Add(cfg.CutFor)
	var next atomic.Int64
	var mu sync.Mutex
	var liked []simLike
	var errs []error
	var wg sync.WaitGroup
	for range simCutWriters {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				due := start.Add(time.Duration(i) * time.Second / time.Duration(cfg.CutRate))
				if !due.Before(end) {
					return
				}
				if err := sleepCtx(ctx, time.Until(due)); err != nil {
					return
				}
				h := mix64(cfg.Seed ^ uint64(side+1)<<56 ^ uint64(i))
				k, user := int(h%uint64(cfg.Items)), "cut"+strconv.Itoa(side)+"-"+strconv.FormatInt(i, 10)
				if i%4 == 0 {
					k, user = int(mix64(uint64(i/4)+cfg.Seed)%uint64(cfg.Items)), "both-"+strconv.FormatInt(i/4, 10)
				}
				item := simItem(k)
				hs := d.holders[regions[(h>>20)%uint64(len(regions))]][shard.Of(item)]
				node := d.nodes[hs[(h>>40)%uint64(len(hs))]]
				_, err := node.replica.Likes().Like(ctx, item, user)
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("like %s by %s at %s: %w", item, user, node.id, err))
				} else {
					liked = append(liked, simLike{k, user})
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return liked, errors.Join(append(errs, ctx.Err())...)
}

// measureVectors measures, for each number of writers, one item's vector
// with that many entries: its bytes in a store (simVectorItems such items
// merged into a fresh store, compacted) and on an anti-entropy page.
// Writers are the simulation's replicas, then made-up ones past them.
func (d *simDeployment) measureVectors(ctx context.Context, out io.Writer) ([]simVector, error) {
	var res []simVector
	empty := len(replication.AppendPage(nil, &replication.Page{}))
	for _, k := range d.cfg.VectorWriters {
		v, err := d.measureVector(ctx, k)
		if err != nil {
			return res, err
		}
		var one replication.Page
		for j := range k {
			one.Entries = append(one.Entries, replication.Entry{Kind: storage.Likes, Item: simItem(0), Replica: d.writer(j), PN: crdt.PN{P: 1}})
		}
		v.PageBytes = len(replication.AppendPage(nil, &one)) - empty
		res = append(res, v)
		fmt.Fprintf(out, "vector of %d writers: %.0f bytes stored, %d on a page\n", k, v.StoredBytes, v.PageBytes)
	}
	return res, nil
}

// writer is the id of vector writer j.
func (d *simDeployment) writer(j int) string {
	if j < len(d.nodes) {
		return d.nodes[j].id
	}
	return "w" + strconv.Itoa(j)
}

func (d *simDeployment) measureVector(ctx context.Context, writers int) (_ simVector, err error) {
	dir := filepath.Join(d.dir, "vectors-"+strconv.Itoa(writers))
	st, err := storage.Open(storage.Config{Dir: dir, Durability: storage.DurabilityNone, CacheBytes: d.cfg.CacheBytes, MemTableBytes: d.cfg.MemTableBytes})
	if err != nil {
		return simVector{}, fmt.Errorf("bench sim: vector store: %w", err)
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	rep, err := region.New(region.Config{Region: "v", Replica: "v-0", Store: st, LikeLists: true,
		Windows: &region.WindowConfig{Uniques: []region.WindowLevel{}}})
	if err != nil {
		return simVector{}, fmt.Errorf("bench sim: vector replica: %w", err)
	}
	defer func() { err = errors.Join(err, rep.Close()) }()
	if err := st.Compact(ctx); err != nil {
		return simVector{}, fmt.Errorf("bench sim: vector store: %w", err)
	}
	before, err := st.TableBytes()
	if err != nil {
		return simVector{}, fmt.Errorf("bench sim: vector store: %w", err)
	}
	var batch []region.VectorMerge
	flush := func() error {
		err := rep.Merge(ctx, batch, nil)
		batch = batch[:0]
		return err
	}
	for i := range simVectorItems {
		vec := make(crdt.Vector, writers)
		for j := range vec {
			vec[j] = crdt.Entry{Replica: d.writer(j), PN: crdt.PN{P: uint64(1 + (i+j)%5)}}
		}
		batch = append(batch, region.VectorMerge{Kind: storage.Likes, Item: "vec-" + strconv.Itoa(i), Vec: vec})
		if len(batch) >= 64 {
			if err := flush(); err != nil {
				return simVector{}, fmt.Errorf("bench sim: merge vectors: %w", err)
			}
		}
	}
	if err := flush(); err != nil {
		return simVector{}, fmt.Errorf("bench sim: merge vectors: %w", err)
	}
	// Every merged entry is read back.
	for _, i := range []int{0, simVectorItems - 1} {
		var want int64
		for j := range writers {
			want += int64(1 + (i+j)%5)
		}
		got, err := rep.Likes().Count("vec-" + strconv.Itoa(i))
		if err != nil || got.Value != want || len(got.Vector) != writers {
			return simVector{}, fmt.Errorf("bench sim: vec-%d of %d writers reads %d over %d entries (%v), want %d", i, writers, got.Value, len(got.Vector), err, want)
		}
	}
	if err := st.Compact(ctx); err != nil {
		return simVector{}, fmt.Errorf("bench sim: vector store: %w", err)
	}
	after, err := st.TableBytes()
	if err != nil {
		return simVector{}, fmt.Errorf("bench sim: vector store: %w", err)
	}
	return simVector{Writers: writers, StoredBytes: float64(after-before) / simVectorItems}, nil
}

func secs(s float64) string { return strconv.FormatFloat(s, 'f', 2, 64) + "s" }
