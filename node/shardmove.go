package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/shard"
)

// MoveConfig configures MoveShards.
type MoveConfig struct {
	// KV is the shard map bucket (OpenShardMaps), or another store of
	// the maps (tests: one in memory). Required.
	KV ShardMapStore
	// Target is the region's map to move to: the stored map's replicas,
	// and any joining the region (shard.PlanMove), other holders.
	// Required.
	Target shard.Map
	// MaxMove bounds how many shard copies one step syncs at once
	// (shard.Step): a larger move runs as several, one after another.
	// 0: no bound.
	MaxMove int
	// Joined, if set, hears each join map once it is stored, before the
	// move waits for the joining replicas: where a replica that joins the
	// region is started (it finds itself listed).
	Joined func(ctx context.Context, join shard.Map) error
	// Status reads GET /v1/shards at a replica of the region, which
	// gathers every replica's own word on the move. Required.
	Status func(ctx context.Context) (api.ShardMap, error)
	// Poll is how often Status is read. Default 500ms.
	Poll time.Duration
	// Progress, if set, hears each step.
	Progress func(format string, args ...any)
	// Stepped, if set, hears each step of the move as it is taken, with
	// the map stored for it: MoveJoin, MoveSwitch and MoveSettle right
	// after that map is written (before the move waits on the replicas),
	// and MoveDrop once every replica took the settled map, the replicas
	// that left shards having dropped them. A move with no replica
	// leaving shards has no settle and no drop. The chaos suite kills
	// replicas there.
	Stepped func(step string, m shard.Map)
	// Now and Wait are the move's clock: Now times the sync and release
	// (MoveResult), and Wait(ctx, d) returns after d, or ctx's error once
	// it ends. Default: the wall clock and a timer. Tests own both.
	Now  func() time.Time
	Wait func(ctx context.Context, d time.Duration) error
}

// The steps of a move, as MoveConfig.Stepped names them.
const (
	MoveJoin   = "join"
	MoveSwitch = "switch"
	MoveSettle = "settle"
	MoveDrop   = "drop"
)

// stepped tells cfg.Stepped, if set, that the move took step with m.
func (cfg MoveConfig) stepped(step string, m shard.Map) {
	if cfg.Stepped != nil {
		cfg.Stepped(step, m)
	}
}

// wait is the default MoveConfig.Wait: a timer.
func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// MoveResult is what a move did.
type MoveResult struct {
	// Moved counts the shard copies that gained a holder (0: the stored
	// map was the target already, nothing written).
	Moved int
	// Join and Switch are the maps written, at their revisions: Switch
	// the last, which is the settled map (shard.Settled) when replicas
	// left shards.
	Join, Switch shard.Map
	// Synced and Released are how long the joining replicas took to sync
	// and the leaving ones to compare equal with every holder.
	Synced, Released time.Duration
}

// MoveShards moves a region's shards to cfg.Target while the region
// serves, in steps of at most cfg.MaxMove shard copies (moveStep each).
// The result sums the steps' moves and times; Join and Switch are the
// last step's maps.
func MoveShards(ctx context.Context, cfg MoveConfig) (MoveResult, error) {
	if cfg.KV == nil || cfg.Status == nil {
		return MoveResult{}, errors.New("move shards: a bucket and a status reader are required")
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 500 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Wait == nil {
		cfg.Wait = wait
	}
	var total MoveResult
	for step := 1; ; step++ {
		e, err := cfg.KV.Get(ctx, ShardMapKey(cfg.Target.Region))
		if err != nil {
			return total, fmt.Errorf("move shards of %s: read the stored map (assign one first: tallyd admin shards assign): %w", cfg.Target.Region, err)
		}
		cur, err := decodeShardMap(e)
		if err != nil {
			return total, fmt.Errorf("move shards of %s: %w", cfg.Target.Region, err)
		}
		// A stored join map is a step begun and cut short: the same
		// step, from the map it moved from, resumes it.
		next, err := shard.Step(shard.Unmoved(cur), cfg.Target, cfg.MaxMove)
		if err != nil {
			return total, fmt.Errorf("move shards of %s: %w", cfg.Target.Region, err)
		}
		scfg := cfg
		scfg.Target = next
		res, err := moveStep(ctx, scfg)
		total.Moved += res.Moved
		total.Synced += res.Synced
		total.Released += res.Released
		total.Join, total.Switch = res.Join, res.Switch
		if err != nil || next.Equal(cfg.Target) {
			return total, err
		}
		if cfg.Progress != nil {
			cfg.Progress("region %s: step %d done (%d shard copies moved so far)", cfg.Target.Region, step, total.Moved)
		}
	}
}

// moveStep moves a region's shards to cfg.Target while the region
// serves (shard/move.go): it writes the join map by compare-and-swap on
// the stored revision, waits until every joining replica says it synced
// under that map, writes the switch map, and waits until every replica
// keeping shards it left says they compare equal with every holder, after
// which those replicas' entries are at the holders (a replica that left
// shards may then be retired). ctx bounds the whole move; a move cut short
// leaves the map in the join or switch phase, which is safe to serve by,
// and is finished by running it again (a stored join map is resumed).
func moveStep(ctx context.Context, cfg MoveConfig) (MoveResult, error) {
	say := func(format string, args ...any) {
		if cfg.Progress != nil {
			cfg.Progress(format, args...)
		}
	}
	region := cfg.Target.Region
	e, err := cfg.KV.Get(ctx, ShardMapKey(region))
	if err != nil {
		return MoveResult{}, fmt.Errorf("move shards of %s: read the stored map (assign one first: tallyd admin shards assign): %w", region, err)
	}
	cur, err := decodeShardMap(e)
	if err != nil {
		return MoveResult{}, fmt.Errorf("move shards of %s: %w", region, err)
	}
	var res MoveResult
	var mv shard.Move
	join := cur
	if !cur.Moving() {
		mv, err = shard.PlanMove(cur, cfg.Target)
		if err != nil {
			return MoveResult{}, err
		}
		if mv.Moved == 0 && mv.Switch.Equal(cur) {
			if !hasLeaving(cur) {
				say("region %s: the stored map (revision %d) is the target already", region, cur.Revision)
				return MoveResult{Join: cur, Switch: cur}, nil
			}
			// A switch map whose move was cut short before it settled:
			// its replicas still keep the shards they left.
			say("region %s: resuming the move of the stored switch map (revision %d)", region, cur.Revision)
			res := MoveResult{Join: cur, Switch: cur}
			err := settle(ctx, cfg, &res)
			return res, err
		}
		res.Moved = mv.Moved
		if join, err = PutShardMap(ctx, cfg.KV, mv.Join, cur.Revision); err != nil {
			return MoveResult{}, fmt.Errorf("move shards of %s: write the join map: %w", region, err)
		}
		say("region %s: join map written (revision %d): %d shard copies to sync", region, join.Revision, mv.Moved)
		cfg.stepped(MoveJoin, join)
	} else {
		say("region %s: resuming the move of the stored join map (revision %d)", region, cur.Revision)
	}
	res.Join = join
	mv, err = shard.PlanMove(shard.Unmoved(join), cfg.Target)
	if err != nil {
		return res, err
	}
	if !mv.Join.Equal(join) {
		return res, fmt.Errorf("move shards of %s: the stored map (revision %d) is another move's join map: finish that move (run it with its target) first", region, join.Revision)
	}
	if cfg.Joined != nil {
		if err := cfg.Joined(ctx, join); err != nil {
			return res, fmt.Errorf("move shards of %s: %w", region, err)
		}
	}
	t0 := cfg.Now()
	if err := waitMove(ctx, cfg, join.Revision, func(h api.ShardHolding) bool { return len(h.Joining) == 0 || h.Synced != nil && *h.Synced }); err != nil {
		return res, fmt.Errorf("move shards of %s: waiting for the joining replicas to sync: %w", region, err)
	}
	res.Synced = cfg.Now().Sub(t0)
	say("region %s: every joining replica synced in %s", region, res.Synced.Round(time.Millisecond))
	if res.Switch, err = PutShardMap(ctx, cfg.KV, mv.Switch, join.Revision); err != nil {
		return res, fmt.Errorf("move shards of %s: write the switch map: %w", region, err)
	}
	say("region %s: switch map written (revision %d): the new holders serve", region, res.Switch.Revision)
	cfg.stepped(MoveSwitch, res.Switch)
	err = settle(ctx, cfg, &res)
	return res, err
}

// settle waits until every replica keeping shards it left in the switch
// map res.Switch says they compare equal with every holder, then writes
// the settled map (res.Switch then) and waits until every replica takes
// it.
func settle(ctx context.Context, cfg MoveConfig, res *MoveResult) error {
	say := func(format string, args ...any) {
		if cfg.Progress != nil {
			cfg.Progress(format, args...)
		}
	}
	region := res.Switch.Region
	t0 := cfg.Now()
	if err := waitMove(ctx, cfg, res.Switch.Revision, func(h api.ShardHolding) bool { return len(h.Leaving) == 0 || h.Released != nil && *h.Released }); err != nil {
		return fmt.Errorf("move shards of %s: waiting for the replicas that left shards to compare equal with the holders: %w", region, err)
	}
	res.Released = cfg.Now().Sub(t0)
	say("region %s: every replica that left shards compares equal with their holders, after %s", region, res.Released.Round(time.Millisecond))
	if !hasLeaving(res.Switch) {
		return nil
	}
	settled, err := shard.Settled(res.Switch)
	if err != nil {
		return err
	}
	if res.Switch, err = PutShardMap(ctx, cfg.KV, settled, res.Switch.Revision); err != nil {
		return fmt.Errorf("move shards of %s: write the settled map: %w", region, err)
	}
	cfg.stepped(MoveSettle, res.Switch)
	if err := waitMove(ctx, cfg, res.Switch.Revision, func(api.ShardHolding) bool { return true }); err != nil {
		return fmt.Errorf("move shards of %s: waiting for the replicas to take the settled map: %w", region, err)
	}
	say("region %s: settled map written (revision %d): the replicas that left shards dropped their data", region, res.Switch.Revision)
	cfg.stepped(MoveDrop, res.Switch)
	return nil
}

// hasLeaving reports whether some replica of m keeps shards it left.
func hasLeaving(m shard.Map) bool {
	for _, r := range m.Replicas() {
		if l := m.Leaving(r); l.Len() > 0 {
			return true
		}
	}
	return false
}

// waitMove polls the region's status until every replica serves by the
// map at revision and done holds for each.
func waitMove(ctx context.Context, cfg MoveConfig, revision uint64, done func(api.ShardHolding) bool) error {
	last := "no answer yet"
	for {
		st, err := cfg.Status(ctx)
		switch {
		case err != nil:
			last = err.Error()
		default:
			waiting := ""
			for _, h := range st.Replicas {
				if h.MapRevision != revision {
					waiting = fmt.Sprintf("%s serves by map revision %d, want %d", h.Replica, h.MapRevision, revision)
					break
				}
				if !done(h) {
					waiting = h.Replica + " is not done"
					break
				}
			}
			if waiting == "" && len(st.Replicas) > 0 {
				return nil
			}
			last = waiting
		}
		if err := cfg.Wait(ctx, cfg.Poll); err != nil {
			return fmt.Errorf("%w (last: %s)", err, last)
		}
	}
}
