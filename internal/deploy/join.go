package deploy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/httpapi"
	"github.com/tally-dev/tally/internal/natsperm"
	"github.com/tally-dev/tally/node"
	"github.com/tally-dev/tally/shard"
)

// AddReplica adds a replica to a sharded region while the deployment
// serves, as an operator adding a machine would: its NATS user, its
// config (every other replica its peer), then a move of the region's
// shards to the map over one more replica (node.MoveShards, at most
// maxMove shard copies at a time; 0: no bound). The new replica starts
// once the move's first join map lists it; the others learn it as a peer
// from that map. It returns the new replica's id once the move is done.
func (d *Deployment) AddReplica(ctx context.Context, region string, maxMove int, progress func(string, ...any)) (string, node.MoveResult, error) {
	if err := d.markMoving(region); err != nil {
		return "", node.MoveResult{}, err
	}
	defer d.doneMoving(region)
	i, target, err := d.prepareReplica(region)
	if err != nil {
		return "", node.MoveResult{}, err
	}
	return d.joinReplica(ctx, i, target, maxMove, progress)
}

// markMoving marks region's shards as moving, or says they move already.
func (d *Deployment) markMoving(region string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errors.New("the deployment is closing")
	}
	if d.moving == nil {
		d.moving = map[string]bool{}
	}
	if d.moving[region] {
		return fmt.Errorf("%w: region %s", httpapi.ErrMoving, region)
	}
	d.moving[region] = true
	return nil
}

func (d *Deployment) doneMoving(region string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.moving, region)
}

// joinReplica moves region's shards to target, starting replica i (not
// running yet) once the first join map lists it.
func (d *Deployment) joinReplica(ctx context.Context, i int, target shard.Map, maxMove int, progress func(string, ...any)) (string, node.MoveResult, error) {
	d.mu.Lock()
	cfg := d.cfgs[i]
	d.mu.Unlock()
	started := false
	res, err := d.moveShards(ctx, target, maxMove, progress, func(ctx context.Context, _ shard.Map) error {
		if started {
			return nil
		}
		n, err := node.Start(ctx, cfg, d.opts)
		if err != nil {
			d.mu.Lock()
			d.states[i].State, d.states[i].Error = "down", err.Error()
			d.mu.Unlock()
			return fmt.Errorf("start the new replica %s: %w", cfg.Replica, err)
		}
		started = true
		d.started(i, n)
		return nil
	})
	return cfg.Replica, res, err
}

// prepareReplica makes the next replica of region: its NATS user (the
// region's server reloaded), its config, and every other replica's
// config listing it (for a restart). It returns its index among the
// deployment's replicas, not started yet, and the map to move to.
func (d *Deployment) prepareReplica(region string) (int, shard.Map, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, shard.Map{}, errors.New("the deployment is closing")
	}
	if d.cfgs[0].Shards == nil {
		return 0, shard.Map{}, errors.New("the deployment is not sharded (tallyd local --replicas 2 or more): a replica joins a sharded region")
	}
	var ids, all []string
	tmpl := -1
	for j, c := range d.cfgs {
		all = append(all, c.Replica)
		if c.Region == region {
			ids = append(ids, c.Replica)
			tmpl = j
		}
	}
	if tmpl < 0 {
		return 0, shard.Map{}, fmt.Errorf("%w: no region %q", httpapi.ErrUnknownReplicaAdmin, region)
	}
	var cur shard.Map
	for j, c := range d.cfgs {
		if n := d.nodes[j]; c.Region == region && n != nil {
			for _, m := range n.ShardMaps() {
				if m.Region == region {
					cur = m
				}
			}
		}
	}
	if cur.Region == "" {
		return 0, shard.Map{}, fmt.Errorf("%w: no running replica of region %q", httpapi.ErrUnknownReplicaAdmin, region)
	}
	if cur.Moving() {
		return 0, shard.Map{}, fmt.Errorf("%w: region %s (map revision %d)", httpapi.ErrMoving, region, cur.Revision)
	}
	id := ""
	for k := len(ids) + 1; id == "" || slices.Contains(all, id); k++ {
		id = region + "-" + strconv.Itoa(k)
	}
	target, err := shard.Assign(region, append(cur.Replicas(), id), cur.Copies)
	if err != nil {
		return 0, shard.Map{}, err
	}

	// Its ports: the next after the last replica's, as the deployment's
	// own follow --port and --resp-port (any free ones where those are 0).
	next := func(first int) (string, error) {
		if first == 0 {
			return net.JoinHostPort("127.0.0.1", "0"), nil
		}
		if p := first + len(all); p <= 65535 {
			return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
		}
		return "", fmt.Errorf("replica %s: no port left after %d (the deployment's start at %d)", id, first+len(all)-1, first)
	}
	listen, err := next(d.port)
	if err != nil {
		return 0, shard.Map{}, err
	}
	respListen := ""
	if d.cfgs[tmpl].RESPListen != "" {
		if respListen, err = next(d.respPort); err != nil {
			return 0, shard.Map{}, err
		}
	}

	// The replica's NATS user, on its region's server.
	pw, err := newPassword()
	if err != nil {
		return 0, shard.Map{}, err
	}
	user := natsperm.ReplicaUser(id)
	d.passwords[user] = pw
	d.users[region] = natsperm.Users(region, append(slices.Clone(ids), id), d.regions)
	if err := d.cluster.ReloadUsers(region); err != nil {
		delete(d.passwords, user)
		d.users[region] = natsperm.Users(region, ids, d.regions)
		return 0, shard.Map{}, err
	}

	// Its config, from one of the region's; every replica's shards block
	// and peers list it.
	cfg := d.cfgs[tmpl]
	cfg.Replica, cfg.NATSUser, cfg.NATSPassword = id, user, pw
	cfg.DataDir = filepath.Join(filepath.Dir(cfg.DataDir), id)
	cfg.Listen, cfg.RESPListen = listen, respListen
	cfg.Peers = slices.Clone(all)
	d.cfgs = append(d.cfgs, cfg)
	for j := range d.cfgs {
		sc := *d.cfgs[j].Shards
		sc.Regions = slices.Clone(sc.Regions)
		for k := range sc.Regions {
			if sc.Regions[k].Name == region {
				sc.Regions[k].Replicas = append(slices.Clone(sc.Regions[k].Replicas), id)
			}
		}
		d.cfgs[j].Shards = &sc
		if j < len(all) {
			d.cfgs[j].Peers = append(slices.Clone(d.cfgs[j].Peers), id)
		}
	}
	if err := d.cfgs[len(all)].Validate(); err != nil {
		return 0, shard.Map{}, fmt.Errorf("replica %s: %w", id, err)
	}
	d.nodes = append(d.nodes, nil)
	d.states = append(d.states, api.ReplicaState{Replica: id, Region: region, State: "starting"})
	d.log.Info("adding a replica", "replica", id, "region", region, "replicas", target.Replicas())
	return len(all), target, nil
}

// startAdd adds a replica to region in the background (AddReplica;
// Close cancels it) and answers the move begun.
func (d *Deployment) startAdd(region string, maxMove int) (api.ShardMove, error) {
	if err := d.markMoving(region); err != nil {
		return api.ShardMove{}, err
	}
	i, target, err := d.prepareReplica(region)
	if err != nil {
		d.doneMoving(region)
		return api.ShardMove{}, err
	}
	d.mu.Lock()
	id := d.cfgs[i].Replica
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	d.cancels = append(d.cancels, cancel)
	d.ops.Add(1)
	d.mu.Unlock()
	go func() {
		defer d.ops.Done()
		defer cancel()
		defer d.doneMoving(region)
		_, res, err := d.joinReplica(ctx, i, target, maxMove, func(format string, args ...any) { d.log.Info(fmt.Sprintf(format, args...)) })
		if err != nil {
			d.log.Error("adding a replica", "replica", id, "region", region, "error", err)
			return
		}
		d.log.Info("replica added: its shards moved to it", "replica", id, "region", region, "revision", res.Switch.Revision, "moved", res.Moved)
	}()
	return api.ShardMove{Region: region, State: "moving", Target: target.API(), Added: id}, nil
}
