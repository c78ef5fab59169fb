// Package deploy starts a whole local tally deployment in one process: a
// localnet NATS super-cluster (one server per region, joined by cuttable
// links) and then one node.Node per region, each replicating over its
// region's server. `tallyd local`, the replication bench and integration
// tests start a deployment this one way.
package deploy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/httpapi"
	"github.com/tally-dev/tally/internal/base/poll"
	"github.com/tally-dev/tally/internal/localnet"
	"github.com/tally-dev/tally/internal/natsperm"
	"github.com/tally-dev/tally/node"
	"github.com/tally-dev/tally/shard"
)

// Config describes a deployment: the regions and what every region's
// replica shares.
type Config struct {
	// Regions are the region names. Default us, eu, ap.
	Regions []string
	// Replicas is how many replicas each region runs, "<region>-1" up to
	// "<region>-<Replicas>". Default 1. With more than one, the regions
	// are sharded (node.Config Shards): each shard is held by Copies of a
	// region's replicas.
	Replicas int
	// Copies is how many replicas of a region hold each shard, with
	// Replicas > 1. Default 2.
	Copies int
	// DataDir is the root data directory: <DataDir>/<replica> per replica,
	// <DataDir>/nats for JetStream. Required.
	DataDir string
	// Port is the first region's HTTP port; the others follow
	// consecutively: every region's first replica, then every region's
	// second, and so on. 0 picks free ports.
	Port int
	// NATSPort is the first region's NATS client port, the others
	// following, so tools such as 'tallyd events tail' find them. 0 picks
	// free ports.
	NATSPort int
	// RESP serves each replica's Redis protocol front door (node.Config
	// RESPListen) on loopback: from RESPPort for the first region, the
	// others following, or on free ports when RESPPort is 0.
	RESP     bool
	RESPPort int
	// Durability, LogLevel, WriteToken and AdminToken are every replica's
	// (see node.Config). Defaults as node.DefaultConfig.
	Durability, LogLevel, WriteToken, AdminToken string
	// WALMinSyncInterval is every replica's (node.Config); "" is 0.
	WALMinSyncInterval string
	// Milestones is every replica's milestone rule (node.Config), the
	// allocator living in the first region; "" numbers nothing.
	Milestones string
	// Sequences are every replica's further numbered sequences
	// (node.Config).
	Sequences []node.SequenceConfig
	// Approx are every replica's approximate-counter rules (node.Config).
	Approx []node.ApproxConfig
	// Hot are every replica's split items (node.Config), the same
	// everywhere as they must be.
	Hot []node.HotConfig
	// Limits are every replica's rate limits (node.Config); each replica
	// keeps its own token buckets.
	Limits []node.LimitConfig
	// Node, if set, adjusts each replica's config after the fields above
	// are applied (e.g. shorter intervals in tests).
	Node func(*node.Config)
	// Logger is the parent of the NATS and replica logs. Default: none.
	Logger hclog.Logger
	// Version is what the replicas report as their build (node.Options).
	Version string
	// StartTimeout bounds starting NATS. Default 60s.
	StartTimeout time.Duration
	// MovePoll is how often a shard move (MoveShards, or one the admin
	// routes start) reads the region's progress (node.MoveConfig Poll).
	// Default 0: the move's own default, 500ms. Tests that move shards
	// set it shorter, so a step's end is seen soon after it comes.
	MovePoll time.Duration
}

// DefaultConfig is `tallyd local`'s deployment; DataDir must still be set.
func DefaultConfig() Config {
	d := node.DefaultConfig()
	return Config{
		Regions:      []string{"us", "eu", "ap"},
		Durability:   d.Durability,
		LogLevel:     d.LogLevel,
		Milestones:   "10^k",
		StartTimeout: 60 * time.Second,
	}
}

func (c Config) replicas() int { return max(c.Replicas, 1) }

// ReplicaIDs are a region's replicas.
func (c Config) ReplicaIDs(region string) []string {
	var out []string
	for j := range c.replicas() {
		out = append(out, region+"-"+strconv.Itoa(j+1))
	}
	return out
}

// ports is how many consecutive ports from Port (or RESPPort) the
// replicas take.
func (c Config) ports() int { return len(c.Regions) * c.replicas() }

// NodeConfigs derives every replica's config: each region's replicas in
// turn, in Regions order. clientURL gives a region's NATS URL. Each config
// is validated; the error names the replica and lists every problem.
func (c Config) NodeConfigs(clientURL func(region string) string) ([]node.Config, error) {
	var ids []string
	var shards *node.ShardsConfig
	if c.replicas() > 1 {
		shards = &node.ShardsConfig{Copies: c.Copies}
	}
	for _, r := range c.Regions {
		ids = append(ids, c.ReplicaIDs(r)...)
		if shards != nil {
			shards.Regions = append(shards.Regions, node.ShardRegion{Name: r, Replicas: c.ReplicaIDs(r)})
		}
	}
	var out []node.Config
	for i, id := range ids {
		r, j := c.Regions[i/c.replicas()], i%c.replicas()
		// The first replicas of the regions take the first ports, as
		// they do with one replica each.
		pi := j*len(c.Regions) + i/c.replicas()
		cfg := node.DefaultConfig()
		cfg.Region, cfg.Replica = r, id
		cfg.DataDir = filepath.Join(c.DataDir, id)
		port := 0 // any free port
		if c.Port > 0 {
			port = c.Port + pi
		}
		cfg.Listen = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if c.RESP {
			port := 0
			if c.RESPPort > 0 {
				port = c.RESPPort + pi
			}
			cfg.RESPListen = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		}
		cfg.Shards = shards
		if c.Durability != "" {
			cfg.Durability = c.Durability
		}
		cfg.WALMinSyncInterval = c.WALMinSyncInterval
		if c.LogLevel != "" {
			cfg.LogLevel = c.LogLevel
		}
		cfg.WriteToken, cfg.AdminToken = c.WriteToken, c.AdminToken
		cfg.NATS = clientURL(r)
		cfg.Peers = slices.DeleteFunc(slices.Clone(ids), func(p string) bool { return p == id })
		// The allocator's KV and the milestone stream live in the first
		// region, as a production deployment would pin them to one.
		cfg.Milestones, cfg.AllocCluster = c.Milestones, c.Regions[0]
		// Its own NATS user (Start sets it) writes the bucket only through
		// the lease authority, as the shipped configs have it.
		cfg.NATSUser, cfg.AllocAuthority = natsperm.ReplicaUser(id), true
		cfg.Sequences = slices.Clone(c.Sequences)
		cfg.Approx = slices.Clone(c.Approx)
		cfg.Hot = slices.Clone(c.Hot)
		cfg.Limits = slices.Clone(c.Limits)
		if c.Node != nil {
			c.Node(&cfg)
		}
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("replica %s: %w", id, err)
		}
		out = append(out, cfg)
	}
	return out, nil
}

// Validate reports every problem with c at once: the regions (as NATS
// needs them) and each replica's config, before anything starts.
func (c Config) Validate() error {
	var errs []error
	if len(c.Regions) == 0 {
		errs = append(errs, errors.New("deploy: at least one region"))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("deploy: data dir is empty"))
	}
	if c.Replicas < 0 || c.Copies < 0 {
		errs = append(errs, fmt.Errorf("deploy: %d replicas per region, %d copies: want 1 or more (0: the default)", c.Replicas, c.Copies))
	}
	if c.Port < 0 || c.Port+c.ports()-1 > 65535 {
		errs = append(errs, fmt.Errorf("deploy: port %d: want 1..65535 for every replica (0: any free ports)", c.Port))
	}
	if c.RESPPort < 0 || c.RESPPort+c.ports()-1 > 65535 {
		errs = append(errs, fmt.Errorf("deploy: RESP port %d: want 1..65535 for every replica (0: any free ports)", c.RESPPort))
	}
	if err := (localnet.Config{Regions: c.Regions, Dir: "-"}).Validate(); err != nil && len(c.Regions) > 0 {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		if _, err := c.NodeConfigs(func(string) string { return "nats://127.0.0.1:4222" }); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Deployment is a running deployment: NATS, then its replicas.
type Deployment struct {
	cluster   *localnet.Cluster
	authority *node.Authority
	passwords map[string]string // NATS user -> password
	// users are each region's NATS users (localnet's Users reads them; a
	// replica added to a region adds its own: join.go).
	users map[string][]natsperm.User
	// regions are the deployment's regions, in order.
	regions []string
	// port and respPort are Config.Port and RESPPort: the replicas take
	// the ports from them on, one each, and a replica added later the
	// next one after the last (join.go). 0: any free port.
	port, respPort int
	movePoll       time.Duration // Config.MovePoll
	opts           node.Options
	log            hclog.Logger

	// mu guards the replicas: an admin stops and starts them
	// (/v1/admin/replicas) while others read them.
	mu     sync.Mutex
	cfgs   []node.Config // after the first start, Listen and RESPListen are the bound addresses
	nodes  []*node.Node  // nil while a replica is down
	states []api.ReplicaState
	ops    sync.WaitGroup // stops and starts under way
	failed chan string    // a replica whose HTTP server stopped on its own
	closed bool
	// moving are the regions whose shards move (startMove); cancels stop
	// the moves at Close.
	moving  map[string]bool
	cancels []context.CancelFunc
}

// Start starts NATS for every region, waits for it, stores the regions'
// shard maps when sharded (assignShards), then starts each region's
// replicas on its region's server, in Regions order. On error
// nothing is left running. The caller owns the Deployment and must Close
// it.
func Start(ctx context.Context, cfg Config) (_ *Deployment, err error) {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := &Deployment{log: cfg.Logger, failed: make(chan string, 1), port: cfg.Port, respPort: cfg.RESPPort, movePoll: cfg.MovePoll}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.Close(ctx))
		}
	}()
	ncfg := localnet.DefaultConfig()
	ncfg.Regions, ncfg.Dir, ncfg.Logger = cfg.Regions, filepath.Join(cfg.DataDir, "nats"), cfg.Logger.Named("nats")
	if cfg.NATSPort > 0 {
		ncfg.ClientPorts = map[string]int{}
		for i, r := range cfg.Regions {
			ncfg.ClientPorts[r] = cfg.NATSPort + i
		}
	}
	// NATS users as the shipped configs/nats/*.conf have them (one source,
	// internal/natsperm), with fresh passwords: each replica its own, the
	// lease authority, the operator; a client without credentials is an
	// application (tally-apps), which may follow streams but write nothing.
	users := map[string][]natsperm.User{}
	d.users, d.regions = users, slices.Clone(cfg.Regions)
	d.passwords = map[string]string{}
	for _, r := range cfg.Regions {
		users[r] = natsperm.Users(r, cfg.ReplicaIDs(r), cfg.Regions)
		for _, u := range users[r] {
			if d.passwords[u.Name] == "" {
				if d.passwords[u.Name], err = newPassword(); err != nil {
					return nil, err
				}
			}
		}
	}
	ncfg.Users = func(r string) []*server.User { return natsperm.ServerUsers(d.users[r], d.passwords) }
	ncfg.NoAuthUser = natsperm.AppsUser
	startCtx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	d.cluster, err = localnet.Start(startCtx, ncfg)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("start local NATS: %w", err)
	}
	if d.cfgs, err = cfg.NodeConfigs(d.cluster.ClientURL); err != nil {
		return nil, err
	}
	for i := range d.cfgs {
		d.cfgs[i].NATSPassword = d.passwords[d.cfgs[i].NATSUser]
	}
	// The lease authority, beside the allocator's bucket in the first
	// region.
	d.authority, err = node.StartAuthority(node.AuthorityConfig{
		NATS: d.cluster.ClientURL(cfg.Regions[0]), NATSUser: natsperm.AuthorityUser, NATSPassword: d.passwords[natsperm.AuthorityUser],
		AllocBucket: d.cfgs[0].AllocBucket, AllocCluster: d.cfgs[0].AllocCluster, AllocReplicas: d.cfgs[0].AllocReplicas,
		Logger: cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	if d.cfgs[0].Shards != nil {
		startCtx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
		err = d.assignShards(startCtx)
		cancel()
		if err != nil {
			return nil, err
		}
	}
	d.opts = node.Options{Logger: cfg.Logger, Links: Links{Cluster: d.cluster}, Replicas: replicaAdmin{d}, Version: cfg.Version,
		// The root holds every replica's data directory and NATS's: a
		// backup into any of them is refused.
		API: func(c *httpapi.Config) { c.DataDirs = append(c.DataDirs, cfg.DataDir) }}
	d.nodes = make([]*node.Node, len(d.cfgs))
	for i, nc := range d.cfgs {
		d.states = append(d.states, api.ReplicaState{Replica: nc.Replica, Region: nc.Region, State: "starting"})
		n, err := node.Start(ctx, nc, d.opts)
		if err != nil {
			return nil, fmt.Errorf("replica %s: %w", nc.Replica, err)
		}
		d.started(i, n)
	}
	return d, nil
}

// assignShards stores every region's shard map in the shard map bucket
// before any replica starts, as the operator (`tallyd admin shards
// assign`) would, so the replicas start from the stored maps. The admin
// user writes: the replicas' users may only read the bucket. A map the
// bucket already holds (a deployment started again on its data) is kept
// at its revision.
func (d *Deployment) assignShards(ctx context.Context) error {
	first := d.cfgs[0]
	nc, err := nats.Connect(d.cluster.ClientURL(first.Region), nats.Name("tallyd local: shard maps"),
		nats.UserInfo(natsperm.AdminUser, d.passwords[natsperm.AdminUser]))
	if err != nil {
		return fmt.Errorf("assign shard maps: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("assign shard maps: %w", err)
	}
	var kv jetstream.KeyValue
	// JetStream is up (localnet waited), but placing a new stream can
	// still fail while its cluster's peers are being learnt: try again.
	err = poll.Until(ctx, 250*time.Millisecond, func() error {
		kv, err = node.OpenShardMaps(ctx, js, first.AllocCluster, first.AllocReplicas)
		return err
	})
	if err != nil {
		return fmt.Errorf("assign shard maps: %w", err)
	}
	for _, r := range first.Shards.Regions {
		m, err := first.Shards.Map(r.Name)
		if err != nil {
			return fmt.Errorf("assign shard maps: %w", err)
		}
		var stored shard.Map
		var wrote bool
		err = poll.Until(ctx, 250*time.Millisecond, func() error {
			stored, wrote, err = node.SeedShardMap(ctx, kv, m)
			if errors.Is(err, node.ErrShardMapDiffers) {
				return nil // a restart after a move: the stored map stands
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("assign shard maps: %w", err)
		}
		if !wrote && !stored.Equal(m) {
			d.log.Info("shard map: the stored one stands (the config's seeds only an empty bucket; moves change it)",
				"region", r.Name, "revision", stored.Revision)
			continue
		}
		d.log.Info("shard map", "region", r.Name, "revision", stored.Revision, "written", wrote)
	}
	return nil
}

// MoveShards moves region's shards to target while the deployment
// serves (node.MoveShards), as `tallyd admin shards move` does: through
// the admin user's shard map bucket, reading the move's progress from
// the region's first replica.
func (d *Deployment) MoveShards(ctx context.Context, target shard.Map, progress func(string, ...any)) (node.MoveResult, error) {
	return d.moveShards(ctx, target, 0, progress, nil)
}

// moveShards is MoveShards in steps of at most maxMove shard copies,
// joined hearing each join map (node.MoveConfig).
func (d *Deployment) moveShards(ctx context.Context, target shard.Map, maxMove int, progress func(string, ...any), joined func(context.Context, shard.Map) error) (node.MoveResult, error) {
	d.mu.Lock()
	first := d.cfgs[0]
	pw := d.passwords[natsperm.AdminUser]
	var at string // the region's first replica reports the move
	for _, c := range d.cfgs {
		if c.Region == target.Region {
			at = "http://" + c.Listen
			break
		}
	}
	d.mu.Unlock()
	nc, err := nats.Connect(d.cluster.ClientURL(first.Region), nats.Name("tallyd local: shard move"),
		nats.UserInfo(natsperm.AdminUser, pw))
	if err != nil {
		return node.MoveResult{}, fmt.Errorf("move shards: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return node.MoveResult{}, fmt.Errorf("move shards: %w", err)
	}
	kv, err := node.OpenShardMaps(ctx, js, first.AllocCluster, first.AllocReplicas)
	if err != nil {
		return node.MoveResult{}, fmt.Errorf("move shards: %w", err)
	}
	c, err := client.New(client.Config{BaseURL: at, Token: first.AdminToken})
	if err != nil {
		return node.MoveResult{}, fmt.Errorf("move shards: %w", err)
	}
	return node.MoveShards(ctx, node.MoveConfig{KV: kv, Target: target, Status: c.Shards, Poll: d.movePoll, Progress: progress, MaxMove: maxMove, Joined: joined})
}

// started records replica i's node as up, keeps its addresses for a
// restart, and watches it for a failure of its own.
func (d *Deployment) started(i int, n *node.Node) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed { // a start the admin asked for, finished after Close began
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_ = n.Close(ctx)
		return
	}
	d.nodes[i] = n
	d.cfgs[i].Listen = n.Addr().String()
	if a := n.RESPAddr(); a != nil {
		d.cfgs[i].RESPListen = a.String()
	}
	d.states[i].State, d.states[i].URL, d.states[i].Error = "up", "http://"+n.Addr().String(), ""
	d.ops.Add(1)
	go func() {
		defer d.ops.Done()
		<-n.Done()
		if n.Err() != nil { // not a Close
			select {
			case d.failed <- fmt.Sprintf("replica %s: %v", d.cfgs[i].Replica, n.Err()):
			default:
			}
		}
	}()
}

// NATSPassword is the password of a NATS user of the deployment
// (natsperm.AdminUser, natsperm.AppsUser, a replica's user), made fresh
// when it started.
func (d *Deployment) NATSPassword(user string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.passwords[user]
}

// newPassword is a fresh random NATS password.
func newPassword() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("deploy: NATS password: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// Nodes are the replicas: each region's in turn, in Regions order; nil
// for a replica an admin stopped.
func (d *Deployment) Nodes() []*node.Node {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.nodes)
}

// Configs are the replicas' configs, in Nodes order.
func (d *Deployment) Configs() []node.Config {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.cfgs)
}

// URLs are the replicas' HTTP base URLs ("http://host:port"), in Nodes
// order. A stopped replica keeps its URL: it starts again there.
func (d *Deployment) URLs() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, c := range d.cfgs {
		out = append(out, "http://"+c.Listen)
	}
	return out
}

// RESPAddrs are the replicas' RESP addresses ("host:port"), in Nodes
// order; nil without RESP.
func (d *Deployment) RESPAddrs() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, c := range d.cfgs {
		if c.RESPListen != "" {
			out = append(out, c.RESPListen)
		}
	}
	return out
}

// Wait blocks until ctx ends (nil) or a replica's HTTP server stops on its
// own (its error, naming the replica). A replica an admin stops is not a
// failure.
func (d *Deployment) Wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case msg := <-d.failed:
		return errors.New(msg)
	}
}

// SetReplicaUp stops (up false) or starts again (up true) a replica, in
// the background: a replica may be asked to stop itself, and its own
// request must finish first. It answers the state it left the replica in.
func (d *Deployment) SetReplicaUp(id string, up bool) (api.ReplicaState, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	i := slices.IndexFunc(d.cfgs, func(c node.Config) bool { return c.Replica == id })
	if i < 0 {
		return api.ReplicaState{}, fmt.Errorf("%w: %q", httpapi.ErrUnknownReplicaAdmin, id)
	}
	st := &d.states[i]
	switch {
	case d.closed, up && st.State != "down", !up && st.State != "up":
		return *st, nil // already there or on its way
	case up:
		st.State = "starting"
		cfg := d.cfgs[i]
		d.ops.Add(1)
		go func() {
			defer d.ops.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			n, err := node.Start(ctx, cfg, d.opts)
			if err != nil {
				d.log.Error("starting a replica again", "replica", id, "error", err)
				d.mu.Lock()
				d.states[i].State, d.states[i].Error = "down", err.Error()
				d.mu.Unlock()
				return
			}
			d.started(i, n)
		}()
	default:
		st.State = "stopping"
		n := d.nodes[i]
		d.ops.Add(1)
		go func() {
			defer d.ops.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			if err := n.Close(ctx); err != nil {
				d.log.Warn("stopping a replica", "replica", id, "error", err)
			}
			d.mu.Lock()
			d.nodes[i], d.states[i].State = nil, "down"
			d.mu.Unlock()
		}()
	}
	return *st, nil
}

// ReplicaStates lists every replica and its state.
func (d *Deployment) ReplicaStates() []api.ReplicaState {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.states)
}

// replicaAdmin serves /v1/admin/replicas from the deployment.
type replicaAdmin struct{ d *Deployment }

func (a replicaAdmin) SetReplicaUp(id string, up bool) (api.ReplicaState, error) {
	return a.d.SetReplicaUp(id, up)
}
func (a replicaAdmin) ReplicaStates() []api.ReplicaState { return a.d.ReplicaStates() }
func (a replicaAdmin) MoveShards(region string, copies int, drain []string, maxMove int) (api.ShardMove, error) {
	return a.d.startMove(region, copies, drain, maxMove)
}
func (a replicaAdmin) AddReplica(region string, maxMove int) (api.ShardMove, error) {
	return a.d.startAdd(region, maxMove)
}

// startMove begins moving region's shards in the background (MoveShards;
// Close cancels it): to copies holders each (0: the current map's), the
// drain replicas serving only Global.
func (d *Deployment) startMove(region string, copies int, drain []string, maxMove int) (api.ShardMove, error) {
	first := d.cfgs[0]
	if first.Shards == nil {
		return api.ShardMove{}, errors.New("the deployment is not sharded (tallyd local --replicas 2 or more)")
	}
	var cur shard.Map
	for i, c := range d.cfgs {
		if c.Region == region {
			d.mu.Lock()
			n := d.nodes[i]
			d.mu.Unlock()
			if n != nil {
				for _, m := range n.ShardMaps() {
					if m.Region == region {
						cur = m
					}
				}
			}
		}
	}
	if cur.Region == "" {
		return api.ShardMove{}, fmt.Errorf("%w: no running replica of region %q", httpapi.ErrUnknownReplicaAdmin, region)
	}
	if copies == 0 {
		copies = cur.Copies
	}
	target, err := shard.Assign(region, cur.Replicas(), copies)
	if len(drain) > 0 && err == nil {
		target, err = shard.Drained(region, cur.Replicas(), copies, drain...)
	}
	if err != nil {
		return api.ShardMove{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return api.ShardMove{}, errors.New("the deployment is closing")
	}
	if d.moving == nil {
		d.moving = map[string]bool{}
	}
	if d.moving[region] {
		return api.ShardMove{}, fmt.Errorf("%w: region %s", httpapi.ErrMoving, region)
	}
	d.moving[region] = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	d.cancels = append(d.cancels, cancel)
	d.ops.Add(1)
	go func() {
		defer d.ops.Done()
		defer cancel()
		res, err := d.moveShards(ctx, target, maxMove, func(format string, args ...any) { d.log.Info(fmt.Sprintf(format, args...)) }, nil)
		if err != nil {
			d.log.Error("shard move", "region", region, "error", err)
		} else {
			d.log.Info("shard move done", "region", region, "revision", res.Switch.Revision, "moved", res.Moved)
		}
		d.mu.Lock()
		delete(d.moving, region)
		d.mu.Unlock()
	}()
	return api.ShardMove{Region: region, State: "moving", Target: target.API()}, nil
}

// Close stops the replicas in reverse start order (each drains its HTTP
// requests until ctx ends, then cuts them off), then NATS. Every step runs
// even if an earlier one failed. Close is for one caller, once.
func (d *Deployment) Close(ctx context.Context) error {
	d.mu.Lock()
	d.closed = true // no more stops, starts or moves
	for _, cancel := range d.cancels {
		cancel()
	}
	d.mu.Unlock()
	var errs []error
	for i := len(d.nodes) - 1; i >= 0; i-- {
		d.mu.Lock()
		n := d.nodes[i]
		d.mu.Unlock()
		if n == nil {
			continue
		}
		if err := n.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close replica %s: %w", d.cfgs[i].Replica, err))
		}
	}
	d.ops.Wait() // the stops and starts under way, and the watchers
	d.nodes = nil
	if d.authority != nil { // after the replicas: they give back their leases through it
		d.authority.Close()
		d.authority = nil
	}
	if d.cluster != nil {
		if err := d.cluster.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close NATS: %w", err))
		}
		d.cluster = nil
	}
	return errors.Join(errs...)
}

// Links adapts the cluster's links to the HTTP admin routes
// (/v1/admin/links).
type Links struct{ Cluster *localnet.Cluster }

// SetLink cuts (up false) or heals the link between regions a and b.
func (l Links) SetLink(a, b string, up bool) error {
	regions := l.Cluster.Regions()
	if a == b || !slices.Contains(regions, a) || !slices.Contains(regions, b) {
		return fmt.Errorf("%w %s-%s: regions are %s", httpapi.ErrUnknownLink, a, b, strings.Join(regions, ", "))
	}
	return l.Cluster.SetLink(a, b, up)
}

// Links lists every link with its state and traffic.
func (l Links) Links() []httpapi.Link {
	var out []httpapi.Link
	for _, s := range l.Cluster.Links() {
		out = append(out, httpapi.Link{A: s.A, B: s.B, Up: s.Up, BytesAB: s.BytesAB, BytesBA: s.BytesBA})
	}
	return out
}
