package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/internal/base/poll"
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
// computes it, at the first move. The move runs in the background,
// after the moves before it (one at a time), for up to moveWait from
// when it begins: the episode lasts Dur, and the next episodes (a kill
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
	steps := &moveSteps{at: map[string]chan struct{}{}, killed: map[string]chan struct{}{},
		revision: map[string]uint64{}, when: map[string]time.Time{}}
	for _, k := range x.plan {
		if k.Index <= e.Index || k.Region != e.Region {
			continue
		}
		if k.Kind == KindMove {
			break // the kills after it strike that move
		}
		if (k.Kind == KindKill || k.Kind == KindWipe) && k.Step != "" {
			steps.killed[k.Step] = make(chan struct{})
		}
	}
	x.mu.Lock()
	if x.steps == nil {
		x.steps = map[string]*moveSteps{}
	}
	x.steps[e.Region] = steps
	x.mu.Unlock()
	x.moves.Go(func() {
		x.moveMu.Lock() // one move at a time: a region's map moves once at a time
		defer x.moveMu.Unlock()
		// moveWait from when this move begins: a move queued behind
		// another once spent its time waiting, and timed out seconds
		// after its join map.
		mctx, cancel := context.WithTimeout(ctx, moveWait)
		defer cancel()
		t0 := time.Now()
		res, err := node.MoveShards(mctx, node.MoveConfig{KV: x.kv, Target: target, Status: x.regionShards(e.Region),
			Progress: func(format string, args ...any) { x.logf("move #%d: "+format, append([]any{e.Index}, args...)...) },
			Stepped:  steps.reach})
		if err != nil {
			x.mu.Lock()
			rec.Note = err.Error()
			x.mu.Unlock()
			x.logf("move #%d: %v", e.Index, err)
			return
		}
		x.logf("move #%d done in %.1fs: %d shard copies moved, synced in %.1fs, released in %.1fs", e.Index,
			time.Since(t0).Seconds(), res.Moved, res.Synced.Seconds(), res.Released.Seconds())
		if x.cfg.Bug == BugAssignOverwrites {
			if err := x.overwriteMap(mctx, e.Region); err != nil {
				x.mu.Lock()
				rec.Note = err.Error()
				x.mu.Unlock()
				x.logf("move #%d: %v", e.Index, err)
			}
		}
	})
	poll.Sleep(ctx, e.Dur)
	return nil
}

// moveSteps are the steps a move took, for the kills aimed at them. A
// step with a kill planned holds the move until the kill has struck
// (killWait at most), so that it lands within the step however slowly
// the episodes before it ran: the mover is an operator's tool, which may
// pause anywhere.
type moveSteps struct {
	mu       sync.Mutex
	at       map[string]chan struct{} // closed once the move took the step
	killed   map[string]chan struct{} // a planned kill's: closed once it struck
	revision map[string]uint64        // the step's map's revision
	when     map[string]time.Time
}

// killWait bounds how long a move waits at a step for its planned kill.
const killWait = time.Minute

// ch is the channel closed when the move takes step.
func (s *moveSteps) ch(step string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.at[step]
	if !ok {
		c = make(chan struct{})
		s.at[step] = c
	}
	return c
}

// reach is the move's node.MoveConfig.Stepped: the first time it takes
// step (a move of several steps settles each), it tells the kill aimed
// there and waits until it struck.
func (s *moveSteps) reach(step string, m shard.Map) {
	c := s.ch(step)
	s.mu.Lock()
	if _, done := s.when[step]; done {
		s.mu.Unlock()
		return
	}
	s.revision[step], s.when[step] = m.Revision, time.Now()
	killed := s.killed[step]
	close(c)
	s.mu.Unlock()
	if killed != nil {
		t := time.NewTimer(killWait)
		defer t.Stop()
		select {
		case <-killed:
		case <-t.C:
		}
	}
}

// awaitStep waits until the latest move of e.Region takes e.Step (at
// most moveWait), for a kill (or wipe) aimed at it; the kill calls killed once it
// struck, which lets the move go on.
func (x *executor) awaitStep(ctx context.Context, e Episode) (killed func(), err error) {
	x.mu.Lock()
	steps := x.steps[e.Region]
	x.mu.Unlock()
	if steps == nil {
		return nil, fmt.Errorf("kill at the %s step: no move of %s runs", e.Step, e.Region)
	}
	t := time.NewTimer(moveWait)
	defer t.Stop()
	select {
	case <-steps.ch(e.Step):
	case <-t.C:
		return nil, fmt.Errorf("kill at the %s step: the move of %s did not take it within %s", e.Step, e.Region, moveWait)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	steps.mu.Lock()
	rev, when, c := steps.revision[e.Step], steps.when[e.Step], steps.killed[e.Step]
	steps.mu.Unlock()
	x.logf("the move of %s took its %s step (map revision %d) %.0f ms ago: kill now", e.Region, e.Step, rev, float64(time.Since(when).Microseconds())/1000)
	var once sync.Once
	return func() {
		if c != nil {
			once.Do(func() { close(c) })
		}
	}, nil
}

// overwriteMap plays the bug BugAssignOverwrites once region's move has
// settled: it writes the map the replicas' config computes (shard.Assign
// with Config.Copies) over the stored one in one compare-and-swap, as the
// old assign did, with no join, switch or settle. A stored map equal to
// the config's leaves nothing to overwrite: an error, since the control
// would then test nothing.
func (x *executor) overwriteMap(ctx context.Context, region string) error {
	m, err := shard.Assign(region, x.replicaIDs(region), x.cfg.Copies)
	if err != nil {
		return fmt.Errorf("bug %s: %w", BugAssignOverwrites, err)
	}
	e, err := x.kv.Get(ctx, node.ShardMapKey(region))
	if err != nil {
		return fmt.Errorf("bug %s: read the map of %s: %w", BugAssignOverwrites, region, err)
	}
	cur, err := shard.Decode(e.Value())
	if err != nil {
		return fmt.Errorf("bug %s: the map of %s: %w", BugAssignOverwrites, region, err)
	}
	if cur.Equal(m) {
		return fmt.Errorf("bug %s: the settled map of %s is the config's: nothing to overwrite", BugAssignOverwrites, region)
	}
	stored, err := node.PutShardMap(ctx, x.kv, m, e.Revision())
	if err != nil {
		return fmt.Errorf("bug %s: %w", BugAssignOverwrites, err)
	}
	x.logf("bug %s: the map of %s overwritten with the config's in one step, revision %d to %d", BugAssignOverwrites, region, e.Revision(), stored.Revision)
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
