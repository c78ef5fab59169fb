package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/internal/base/poll"
)

// shardHealResult is what bench shards --measure heal measured.
type shardHealResult struct {
	Replicas, Copies int
	Cut              string // the region cut from all the others
	CutLikes         int    // likes acknowledged on the cut region's side
	RestLikes        int    // likes acknowledged on the other side
	Expected         []int64
	// From the heal: every replica of every region answers GET
	// /v1/likes/{item} with the exact count and approx false (ReadsExact);
	// every holder of an item's shard has it exactly in its own store
	// (CopiesExact); every replica's /v1/convergence says converged from
	// comparisons after the heal (Converged).
	ReadsExact, CopiesExact, Converged time.Duration
}

// healPoll is how often the wait after the heal reads: each poll reads
// every item at every replica over HTTP, so it must not take much of the
// cores the repair runs on.
const healPoll = 50 * time.Millisecond

// runShardsHeal starts one deployment, cuts its first region from the
// others for cfg.CutFor while both sides take likes at random replicas,
// heals, and times the way back to exact counts everywhere.
func runShardsHeal(ctx context.Context, cfg shardsBenchConfig, env Env, log hclog.Logger, out io.Writer) (res shardHealResult, err error) {
	replicas := cfg.Replicas[0]
	fmt.Fprintf(out, "bench shards --measure heal: regions %s, %d replica(s) each, copies %d, durability %s, milestones off;\n",
		strings.Join(cfg.Regions, ","), replicas, cfg.Copies, cfg.Durability)
	fmt.Fprintf(out, "  %s is cut from every other region for %s while %d writers a side like %d items at random replicas of their side\n",
		cfg.Regions[0], cfg.CutFor, cfg.CutWriters, cfg.Items)
	fmt.Fprintln(out, "  (every fourth like's user likes the same item on both sides), then healed; times from the heal, polled every "+healPoll.String())
	t0 := time.Now()
	d, err := startSharded(ctx, cfg, replicas, env, log, nil)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, d.Close(ctx)) }()
	res = shardHealResult{Replicas: replicas, Copies: d.maps[cfg.Regions[0]].Copies, Cut: cfg.Regions[0]}
	items := newShardItems("heal-", cfg.Items)
	// Warm up: a like of the first item in each region, read exactly
	// everywhere, so the links carry interest before the cut.
	warm := make([]int64, len(items.names))
	for _, r := range cfg.Regions {
		at := d.of(r)[0]
		if _, err := d.clients[at].Like(ctx, items.names[0], "warm-"+r); err != nil {
			return res, fmt.Errorf("bench shards: warm-up like at %s: %w", d.id[at], err)
		}
	}
	warm[0] = int64(len(cfg.Regions))
	wctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if err := poll.Until(wctx, healPoll, func() error { return d.readsExact(wctx, items, warm) }); err != nil {
		return res, fmt.Errorf("bench shards: warm-up: %w", err)
	}
	fmt.Fprintf(out, "ready and warm in %s (data %s)\n", time.Since(t0).Round(time.Millisecond), d.dir)

	if err := d.setCut(ctx, cfg.Regions, false); err != nil {
		return res, err
	}
	sides := [2][]int{d.of(cfg.Regions[0]), nil}
	for _, r := range cfg.Regions[1:] {
		sides[1] = append(sides[1], d.of(r)...)
	}
	liked, perSide, err := d.writeSides(ctx, cfg, items, sides)
	res.CutLikes, res.RestLikes = perSide[0], perSide[1]
	if err != nil {
		return res, errors.Join(err, d.setCut(context.WithoutCancel(ctx), cfg.Regions, true))
	}
	res.Expected = make([]int64, len(items.names))
	for k := range res.Expected {
		res.Expected[k] = warm[k] + int64(len(liked[k]))
	}
	healed := time.Now()
	if err := d.setCut(ctx, cfg.Regions, true); err != nil {
		return res, err
	}
	hctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	for {
		if res.CopiesExact == 0 && d.copiesExact(items, res.Expected) == nil {
			res.CopiesExact = time.Since(healed)
		}
		if res.ReadsExact == 0 && d.readsExact(hctx, items, res.Expected) == nil {
			res.ReadsExact = time.Since(healed)
		}
		if res.Converged == 0 {
			if ok, _ := d.convergedSince(hctx, healed); ok {
				res.Converged = time.Since(healed)
			}
		}
		if res.CopiesExact > 0 && res.ReadsExact > 0 && res.Converged > 0 {
			break
		}
		if err := sleepCtx(hctx, healPoll); err != nil {
			return res, fmt.Errorf("bench shards: no agreement within %s of the heal (copies %s, reads %s, converged %s; 0 is not yet): %w; the counts: %v",
				cfg.Timeout, ms(res.CopiesExact), ms(res.ReadsExact), ms(res.Converged), err,
				errors.Join(d.copiesExact(items, res.Expected), d.readsExact(context.WithoutCancel(ctx), items, res.Expected)))
		}
	}
	var total int64
	for _, n := range res.Expected {
		total += n
	}
	fmt.Fprintf(out, "\ncut %s for %s: %d likes on its side, %d on the other, %d distinct (item, user) pairs in all\n",
		res.Cut, cfg.CutFor, res.CutLikes, res.RestLikes, total)
	fmt.Fprintf(out, "after the heal:\n")
	fmt.Fprintf(out, "  every holder's own store exact          %s\n", ms(res.CopiesExact))
	fmt.Fprintf(out, "  every replica reads exact, approx false %s\n", ms(res.ReadsExact))
	fmt.Fprintf(out, "  every /v1/convergence converged         %s\n", ms(res.Converged))
	return res, nil
}

// setCut cuts (up false) or heals every link between the first region
// and the others, through the admin route of the first replica.
func (d *shardedDeployment) setCut(ctx context.Context, regions []string, up bool) error {
	for _, other := range regions[1:] {
		if _, err := d.clients[0].SetLink(ctx, regions[0], other, up); err != nil {
			return fmt.Errorf("bench shards: link %s-%s up=%v: %w", regions[0], other, up, err)
		}
	}
	return nil
}

// writeSides likes items for cfg.CutFor from cfg.CutWriters writers on
// each side, each like at a random replica of its side. Every fourth like
// of writer w is by a user who likes the same item on the other side
// too. It returns the distinct users per item and the likes per side;
// any failed like fails the run (its effect on the count is unknown).
func (d *shardedDeployment) writeSides(ctx context.Context, cfg shardsBenchConfig, items shardItems, sides [2][]int) (liked []map[string]bool, perSide [2]int, err error) {
	stopAt := time.Now().Add(cfg.CutFor)
	type pair struct {
		k    int
		user string
	}
	type writer struct {
		side  int
		liked []pair
		err   error
	}
	var writers []*writer
	var wg sync.WaitGroup
	for side, at := range sides {
		for w := range cfg.CutWriters {
			wr := &writer{side: side}
			writers = append(writers, wr)
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(side), uint64(w)))
				for seq := 0; ctx.Err() == nil && time.Now().Before(stopAt); seq++ {
					k, user := rng.IntN(len(items.names)), fmt.Sprintf("s%d-w%d-%d", side, w, seq)
					if seq%4 == 0 {
						k, user = (seq/4+w)%len(items.names), fmt.Sprintf("both-w%d-%d", w, seq/4)
					}
					to := at[rng.IntN(len(at))]
					if _, wr.err = d.clients[to].Like(ctx, items.names[k], user); wr.err != nil {
						wr.err = fmt.Errorf("like %s/%s at %s: %w", items.names[k], user, d.id[to], wr.err)
						return
					}
					wr.liked = append(wr.liked, pair{k, user})
				}
			})
		}
	}
	wg.Wait()
	liked = make([]map[string]bool, len(items.names))
	for k := range liked {
		liked[k] = map[string]bool{}
	}
	var errs []error
	for _, wr := range writers {
		errs = append(errs, wr.err)
		perSide[wr.side] += len(wr.liked)
		for _, p := range wr.liked {
			liked[p.k][p.user] = true
		}
	}
	return liked, perSide, errors.Join(append(errs, ctx.Err())...)
}

// readsExact fails unless every replica answers every item's count
// exactly, with approx false.
func (d *shardedDeployment) readsExact(ctx context.Context, items shardItems, want []int64) error {
	for i, c := range d.clients {
		for k, item := range items.names {
			got, err := c.Likes(ctx, item)
			if err != nil {
				return fmt.Errorf("%s: %s: %w", d.id[i], item, err)
			}
			if got.Count != want[k] || got.Approx {
				return fmt.Errorf("%s: %s = %d (approx %v), want %d", d.id[i], item, got.Count, got.Approx, want[k])
			}
		}
	}
	return nil
}

// copiesExact fails unless every holder of every item's shard has the
// item's exact count in its own store.
func (d *shardedDeployment) copiesExact(items shardItems, want []int64) error {
	for i, n := range d.Nodes() {
		for k, s := range items.shards {
			if !d.holds(i, s) {
				continue
			}
			got, err := n.Replica().Likes().Count(items.names[k])
			if err != nil {
				return fmt.Errorf("%s: %s: %w", d.id[i], items.names[k], err)
			}
			if got.Value != want[k] {
				return fmt.Errorf("%s: %s = %d, want %d", d.id[i], items.names[k], got.Value, want[k])
			}
		}
	}
	return nil
}
