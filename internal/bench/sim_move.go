package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/tally-dev/tally/shard"
)

// simMove is a shard move in the loaded deployment: one region goes from
// its copies to one more, so every shard of it gains a holder, which
// pulls the shard from the shard's holders in every region by
// anti-entropy (shard/move.go's join; package replication's ShardSync
// says when it has).
type simMove struct {
	Region     string `json:"region"`
	CopiesFrom int    `json:"copies_from"`
	CopiesTo   int    `json:"copies_to"`
	// ShardCopies is how many shard copies gained a holder (shard.Move's
	// Moved).
	ShardCopies int `json:"shard_copies_moved"`
	// Seconds is from the join map in every replicator's view to every
	// joining replica synced.
	Seconds float64 `json:"seconds"`
	// StoredBytes is what the region's stores gained, each compacted
	// before and after: the bytes of shard data moved.
	StoredBytes int64 `json:"stored_bytes_moved"`
	// Wire is what the transports carried meanwhile, the whole
	// deployment's.
	Wire wireBytes `json:"wire"`
	// Checked items of moved shards read at their joining holder as at a
	// holder that had them.
	Checked int `json:"items_checked"`
	// Per gigabyte of shard data moved, at the measured rate.
	SecondsPerGB   float64 `json:"seconds_per_gb"`
	WireBytesPerGB float64 `json:"wire_bytes_per_gb"`
}

// simMoveRegion is the region whose shards the move phase spreads: the
// last, away from the cut.
func (c simConfig) simMoveRegion() int { return c.Regions - 1 }

// runMove moves the last region from Copies to Copies+1 copies of each
// shard (shard.Assign's map of those copies, through shard.PlanMove's
// join map) and times it until every joining replica is synced, counting
// the bytes moved and on the wire. Nothing is written meanwhile. It does
// nothing if the region's replicas already hold every shard.
func (d *simDeployment) runMove(ctx context.Context, out io.Writer) (*simMove, error) {
	cfg := d.cfg
	if cfg.Copies >= cfg.Replicas {
		fmt.Fprintf(out, "no shard move: copies %d = replicas %d, every replica holds every shard\n", cfg.Copies, cfg.Replicas)
		return nil, nil
	}
	ri := cfg.simMoveRegion()
	cur := d.maps[ri]
	members := cur.Replicas()
	target, err := shard.Assign(cur.Region, members, cfg.Copies+1)
	if err != nil {
		return nil, fmt.Errorf("bench sim: move: %w", err)
	}
	mv, err := shard.PlanMove(cur, target)
	if err != nil {
		return nil, fmt.Errorf("bench sim: move: %w", err)
	}
	res := &simMove{Region: cur.Region, CopiesFrom: cfg.Copies, CopiesTo: cfg.Copies + 1, ShardCopies: mv.Moved}
	before, err := d.regionBytes(ctx, members)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "move: %s from %d to %d copies, %d shard copies gain a holder\n", cur.Region, res.CopiesFrom, res.CopiesTo, mv.Moved)

	maps := append(shard.Maps(nil), d.maps...)
	maps[ri] = mv.Join
	w0 := d.wire.snapshot()
	since := time.Now()
	d.view.set(maps)
	wctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	err = pollEvery(wctx, 50*time.Millisecond, func() error {
		for _, id := range members {
			joining := mv.Join.Joining(id)
			if joining.Len() == 0 {
				continue
			}
			if synced, _ := d.nodes[d.at[id]].rep.ShardSync(joining, since); !synced {
				return fmt.Errorf("%s has not synced its %d joining shards", id, joining.Len())
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bench sim: move: %w", err)
	}
	res.Seconds = time.Since(since).Seconds()
	res.Wire = d.wire.snapshot().since(w0)
	after, err := d.regionBytes(ctx, members)
	if err != nil {
		return nil, err
	}
	res.StoredBytes = after - before
	// Every checked item of a moved shard reads at its new holder as at
	// one that held it before.
	for _, k := range cfg.checkItems() {
		item := simItem(k)
		s := shard.Of(item)
		for _, id := range members {
			if j := mv.Join.Joining(id); !j.Has(s) {
				continue
			}
			old := cur.Holders(s)[0]
			got, err := d.nodes[d.at[id]].replica.Likes().Count(item)
			if err != nil {
				return nil, fmt.Errorf("bench sim: move: %w", err)
			}
			want, err := d.nodes[d.at[old]].replica.Likes().Count(item)
			if err != nil {
				return nil, fmt.Errorf("bench sim: move: %w", err)
			}
			if got.Value != want.Value {
				return nil, fmt.Errorf("bench sim: move: %s reads %s = %d after syncing, %s %d", id, item, got.Value, old, want.Value)
			}
			res.Checked++
		}
	}
	if res.StoredBytes > 0 {
		res.SecondsPerGB = res.Seconds * 1e9 / float64(res.StoredBytes)
		res.WireBytesPerGB = float64(res.Wire.total()) * 1e9 / float64(res.StoredBytes)
	}
	fmt.Fprintf(out, "  every joining replica synced in %s: %d bytes of shard data moved, %d bytes on the wire (%d of segment pages); %d items checked at their new holders\n",
		secs(res.Seconds), res.StoredBytes, res.Wire.total(), res.Wire.Pages, res.Checked)
	return res, nil
}

// regionBytes compacts the stores of replicas ids and sums their sstable
// bytes.
func (d *simDeployment) regionBytes(ctx context.Context, ids []string) (int64, error) {
	var sum int64
	for _, id := range ids {
		n := d.nodes[d.at[id]]
		if err := n.store.Compact(ctx); err != nil {
			return 0, fmt.Errorf("bench sim: %s: %w", id, err)
		}
		b, err := n.store.TableBytes()
		if err != nil {
			return 0, fmt.Errorf("bench sim: %s: %w", id, err)
		}
		sum += b
	}
	return sum, nil
}
