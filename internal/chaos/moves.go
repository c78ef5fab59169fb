package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/internal/poll"
	"github.com/tally-dev/tally/node"
	"github.com/tally-dev/tally/shard"
)

// moveWait bounds a move episode's move, which runs on behind the
// episodes after it: they hit it while it syncs and switches.
const moveWait = 2 * time.Minute

// move begins a move of the episode's region's shards, as an operator's
// `tallyd admin shards move|drain` would (node.MoveShards through the
// shard map bucket, the region's replicas reporting its progress): to
// Copies holders each, or with Drain serving no keyed shard. The bucket
// is made, and every region's map stored as the replicas' config
// computes it, at the first move. The move runs in the background for
// up to moveWait: the episode lasts Dur, and the next episodes (a kill
// of a joining or leaving replica, a cut) strike while it runs. The
// executor waits for it before the final heal; a move that did not
// finish is the episode's note.
func (x *executor) move(ctx context.Context, rec *EpisodeRecord) error {
	e := rec.Episode
	if x.kv == nil {
		nc, err := nats.Connect(x.d.net.ClientURL(x.cfg.Regions[0]), nats.Name("chaos: shard moves"))
		if err != nil {
			return fmt.Errorf("move: %w", err)
		}
		x.nc = nc
		js, err := jetstream.New(nc)
		if err != nil {
			return fmt.Errorf("move: %w", err)
		}
		kv, err := node.OpenShardMaps(ctx, js, x.cfg.Regions[0], 1)
		if err != nil {
			return fmt.Errorf("move: %w", err)
		}
		for _, r := range x.cfg.Regions {
			m, err := shard.Assign(r, x.replicaIDs(r), x.cfg.Copies)
			if err != nil {
				return err
			}
			if _, _, err := node.SeedShardMap(ctx, kv, m); err != nil && !errors.Is(err, node.ErrShardMapDiffers) {
				return fmt.Errorf("move: store the map of %s: %w", r, err)
			}
		}
		x.kv = kv
	}
	target, err := shard.Assign(e.Region, x.replicaIDs(e.Region), max(e.Copies, x.cfg.Copies))
	if e.Drain != "" && err == nil {
		target, err = shard.Drained(e.Region, x.replicaIDs(e.Region), x.cfg.Copies, e.Drain)
	}
	if err != nil {
		return fmt.Errorf("move: %w", err)
	}
	mctx, cancel := context.WithTimeout(ctx, moveWait)
	x.moves.Go(func() {
		defer cancel()
		x.moveMu.Lock() // one move at a time: a region's map moves once at a time
		defer x.moveMu.Unlock()
		t0 := time.Now()
		res, err := node.MoveShards(mctx, node.MoveConfig{KV: x.kv, Target: target, Status: x.regionShards(e.Region),
			Progress: func(format string, args ...any) { x.logf("move #%d: "+format, append([]any{e.Index}, args...)...) }})
		if err != nil {
			x.mu.Lock()
			rec.Note = err.Error()
			x.mu.Unlock()
			x.logf("move #%d: %v", e.Index, err)
			return
		}
		x.logf("move #%d done in %.1fs: %d shard copies moved, synced in %.1fs, released in %.1fs", e.Index,
			time.Since(t0).Seconds(), res.Moved, res.Synced.Seconds(), res.Released.Seconds())
	})
	poll.Sleep(ctx, e.Dur)
	return nil
}

// replicaIDs are region's replicas.
func (x *executor) replicaIDs(region string) []string { return replicaNames(region, x.cfg.Replicas) }

// regionShards reads GET /v1/shards at the first of region's replicas
// that answers (one may be down: a kill during the move).
func (x *executor) regionShards(region string) func(context.Context) (api.ShardMap, error) {
	return func(ctx context.Context) (api.ShardMap, error) {
		var errs []error
		for _, p := range x.d.procs {
			if p.region != region {
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			m, err := p.client.api.Shards(rctx)
			cancel()
			if err == nil {
				return m, nil
			}
			errs = append(errs, fmt.Errorf("%s: %w", p.replica, err))
		}
		return api.ShardMap{}, errors.Join(errs...)
	}
}

// waitMoves waits for the moves still running, and closes the bucket's
// connection.
func (x *executor) waitMoves() {
	x.moves.Wait()
	if x.nc != nil {
		x.nc.Close()
	}
}
