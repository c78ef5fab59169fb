// Start and its steps: open the store, connect to NATS, start the replica,
// replication and numbering, and open the front doors (HTTP, RESP).

package node

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/httpapi"
	"github.com/tally-dev/tally/internal/base/authguard"
	"github.com/tally-dev/tally/internal/base/buildtags"
	"github.com/tally-dev/tally/internal/base/failpoint"
	"github.com/tally-dev/tally/internal/base/version"
	"github.com/tally-dev/tally/purchase"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/replication"
	"github.com/tally-dev/tally/resp"
	"github.com/tally-dev/tally/shard"
	"github.com/tally-dev/tally/storage"
)

// Start opens the store, starts the replica (and, with NATS, replication
// and numbering) and serves its HTTP API on cfg.Listen. An invalid cfg is
// refused with every problem (Config.Validate); ctx bounds the start only.
// On error nothing is left running. The caller owns the Node and must
// Close it.
func Start(ctx context.Context, cfg Config, opts Options) (_ *Node, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("node config: %w", err)
	}
	opts = opts.withDefaults()
	// n is deliberately not the named result: "return nil, err" would clear
	// it before the undo steps below run.
	n := newNode(cfg, opts)
	var undo undoStack
	defer func() {
		if err != nil {
			undo.run()
		}
	}()

	// The order below (store, NATS, numbering, replica, replication, HTTP)
	// is what each part needs of the earlier ones; numbering.go details
	// the numbering's share of it.
	if n.fp, err = failpoint.FromEnv(opts.Getenv); err != nil { // nil outside a chaos build
		return nil, fmt.Errorf("chaos build: %w", err)
	}
	if n.fp.Any() {
		n.log.Warn("chaos build: deliberate faults armed", "failpoints", n.fp.String())
	}
	if err := n.openStore(cfg, &undo); err != nil {
		return nil, err
	}
	rcfg, chaosClock, err := n.replicaConfig(cfg, opts)
	if err != nil {
		return nil, err
	}
	var outbox *replication.Outbox // nil when standalone
	if cfg.NATS != "" || len(opts.NATSOptions) > 0 {
		if outbox, err = n.startNATSLinks(cfg, opts, &rcfg, &undo); err != nil {
			return nil, err
		}
	}
	if err := n.startReplica(cfg, rcfg, &undo); err != nil {
		return nil, err
	}
	n.startNumbering(&undo)
	if err := n.startSync(cfg, outbox, opts.Getenv, &undo); err != nil {
		return nil, err
	}
	if err := n.buildAPI(cfg, opts, chaosClock, &undo); err != nil {
		return nil, err
	}
	if err := n.listenHTTP(ctx, cfg, &undo); err != nil {
		return nil, err
	}
	if err := n.openFrontDoors(ctx, cfg, opts); err != nil {
		return nil, err
	}
	go n.serve()
	n.log.Info("serving HTTP", "addr", n.ln.Addr().String(), "tls", n.certs != nil, "client_certs", cfg.TLSClientCA != "")
	return n, nil
}

// undoStack is what Start has started so far, undone in reverse order
// when a later step fails.
type undoStack []func()

// push adds the undoing of a step that succeeded.
func (u *undoStack) push(f func()) { *u = append(*u, f) }

// run undoes every step, the last one first.
func (u undoStack) run() {
	for i := len(u) - 1; i >= 0; i-- {
		u[i]()
	}
}

// withDefaults fills the options left zero: no chaos environment, a null
// logger, this build's version.
func (opts Options) withDefaults() Options {
	if opts.Getenv == nil {
		opts.Getenv = func(string) string { return "" }
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Version == "" {
		opts.Version = version.Version()
	}
	return opts
}

// newNode is a Node with nothing started yet: its logger, its own metrics
// registry (with the Go, process and build collectors) and the token
// guessing guard.
func newNode(cfg Config, opts Options) *Node {
	n := &Node{cfg: cfg, log: opts.Logger.Named(cfg.Replica), done: make(chan struct{}), registry: prometheus.NewRegistry(),
		authGuard: authguard.New(authguard.Config{})}
	n.registry.MustRegister( // a fresh registry: cannot collide
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo(opts.Version),
	)
	return n
}

// openStore opens the Pebble store in cfg.DataDir.
func (n *Node) openStore(cfg Config, undo *undoStack) error {
	n.log.Info("opening store", "dir", cfg.DataDir, "durability", cfg.Durability)
	store, err := storage.Open(storage.Config{
		Dir:        cfg.DataDir,
		Durability: cfg.durability(),
		Logger:     n.log.Named("pebble"),
		Registerer: n.registry,
		// Validated: "" or a duration from 0 to 100ms.
		WALMinSyncInterval: duration(cfg.WALMinSyncInterval),
	})
	if err != nil {
		return err
	}
	n.store = store
	undo.push(func() { _ = n.store.Close() })
	return nil
}

// replicaConfig is the replica's config as far as the store and cfg give
// it; with NATS, startNATSLinks adds the rest. In a chaos build it also
// returns the setter of the replica's stepped wall clock (nil otherwise).
func (n *Node) replicaConfig(cfg Config, opts Options) (region.Config, func(time.Duration), error) {
	rcfg := region.Config{
		Region:     cfg.Region,
		Replica:    cfg.Replica,
		Store:      n.store,
		Logger:     n.log,
		HoldWrites: opts.HoldWrites,
		// A handoff recorded before a restart goes on only to a replica
		// that is still a peer: rights handed to one nobody runs any more
		// would be out of reach (the PUT that started it checked too).
		KeepHandoff: func(to string) bool { return slices.Contains(cfg.Peers, to) },
		Failpoints:  n.fp, // never on outside a chaos build
		Registerer:  n.registry,

		IdempotencyTTL: duration(cfg.IdempotencyTTL),
		LikeLists:      cfg.LikeLists,
		EventLog:       cfg.EventLog,
		Approx:         cfg.ApproxRules(),
	}
	var err error
	if rcfg.Windows, err = cfg.WindowConfig(); err != nil {
		return region.Config{}, nil, err
	}
	var chaosClock func(time.Duration)
	if buildtags.Chaos {
		// The chaos suite steps this replica's wall clock (PUT
		// /v1/admin/chaos/clock); the monotonic clock stays true.
		var offset atomic.Int64
		start := time.Now()
		rcfg.Now = func() time.Time { return time.Now().Round(0).Add(time.Duration(offset.Load())) }
		rcfg.Monotonic = func() time.Duration { return time.Since(start) }
		chaosClock = func(d time.Duration) { offset.Store(int64(d)) }
	}
	return rcfg, chaosClock, nil
}

// startNATSLinks connects to NATS and sets up, before the replica, what
// lives on it: the shard maps and forwarding (if sharded), the event
// publisher (with the event log) and the numbering (with numbered
// sequences). It completes rcfg to match: writes held until recovery,
// the commit hook, the shards held, the sequences. It returns the outbox
// the replica's commits go to.
func (n *Node) startNATSLinks(cfg Config, opts Options, rcfg *region.Config, undo *undoStack) (*replication.Outbox, error) {
	// Nothing is acknowledged before recovery from peers (see package
	// replication): the replicator releases the hold.
	outbox := replication.NewOutbox()
	rcfg.HoldWrites = true
	if err := n.dial(cfg, opts); err != nil {
		return nil, err
	}
	undo.push(func() { n.nc.Close() })
	n.registry.MustRegister(natsCollector{n.nc}) // a fresh registry: cannot collide
	if cfg.Shards != nil {
		if err := n.startSharding(cfg, rcfg, undo); err != nil {
			return nil, err
		}
	}
	if cfg.EventLog {
		var err error
		if n.pub, err = n.newPublisher(cfg); err != nil {
			return nil, err
		}
	}
	rcfg.OnCommit = onCommit(outbox, n.pub)
	if len(cfg.numbered()) > 0 {
		// Steps 2-4 of numbering.go's order: before the replica.
		var err error
		if n.num, err = newNumbering(cfg, n.nc, n.store, n.log, n.registry, n.fp); err != nil {
			return nil, fmt.Errorf("set up numbering: %w", err)
		}
		rcfg.Sequences = n.num.regionNumbering()
	}
	return outbox, nil
}

// onCommit is the replica's commit hook: every commit goes to the outbox
// for replication and, with the event log, wakes the publisher.
func onCommit(outbox *replication.Outbox, pub *replication.Publisher) func(region.Changes) {
	if pub == nil {
		return outbox.Add
	}
	return func(c region.Changes) {
		outbox.Add(c)
		pub.Kick()
	}
}

// startSharding follows the shard maps (the shard map bucket's where it
// has them, the config's otherwise; shardmaps.go) and builds the router
// that forwards requests for shards this replica does not hold.
func (n *Node) startSharding(cfg Config, rcfg *region.Config, undo *undoStack) error {
	var err error
	if n.shardMaps, err = startShardWatch(cfg, n.nc, n.log); err != nil {
		return err
	}
	undo.push(n.shardMaps.close)
	own := n.shardMaps.own
	n.shards = newShardRouter(cfg.Region, cfg.Replica, own, n.nc, natsTransport{nc: n.nc, region: cfg.Region}, nil,
		duration(cfg.RequestTimeout), n.log)
	n.shardMaps.serveBy(n.shards.update)
	n.shards.moveState = n.moveState
	rcfg.Holds = n.shards.Holds
	n.shards.chaosAckUnapplied = n.fp.On(failpoint.ForwardAckUnapplied)
	held := own.Held(cfg.Replica)
	n.log.Info("sharded", "holds", held.Len(), "of", shard.Count, "copies", own.Copies, "map_revision", own.Revision)
	return nil
}

// startReplica starts the replica's state machine on the store and hands
// it to the shard router, if any.
func (n *Node) startReplica(cfg Config, rcfg region.Config, undo *undoStack) error {
	replica, err := region.New(rcfg)
	if err != nil {
		return fmt.Errorf("start replica %s: %w", cfg.Replica, err)
	}
	n.replica = replica
	undo.push(func() { _ = n.replica.Close() })
	if n.shards != nil {
		n.shards.accepted = n.replica.Accepted()
		n.shards.do = n.replica.Do
		n.shards.rep = n.replica
	}
	if n.replica.Fresh() {
		n.log.Info("new replica: the data directory held no state")
	}
	return nil
}

// startNumbering starts the numbering on the running replica, if there
// is one (numbering.go's last step).
func (n *Node) startNumbering(undo *undoStack) {
	if n.num == nil {
		return
	}
	n.num.start(n.replica)
	undo.push(func() {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		_ = n.num.close(ctx)
	})
}

// startSync starts, once the replica runs, what keeps the others in step
// with it: the replicator (with NATS, that is with an outbox) and the
// event publisher (with the event log).
func (n *Node) startSync(cfg Config, outbox *replication.Outbox, getenv func(string) string, undo *undoStack) error {
	if outbox != nil {
		if err := n.startReplication(cfg, outbox, getenv); err != nil {
			return err
		}
		undo.push(func() { n.rep.Close() })
	}
	if n.pub != nil {
		n.pub.Start()
		undo.push(n.pub.Close)
	}
	return nil
}

// buildAPI builds the HTTP API on the running parts, and with shards
// starts the cross-shard cashbacks it serves.
func (n *Node) buildAPI(cfg Config, opts Options, chaosClock func(time.Duration), undo *undoStack) error {
	proxies, _ := cfg.trustedProxies() // Validate checked them
	apiCfg := httpapi.Config{
		Replica:        n.replica,
		Logger:         n.log,
		Registry:       n.registry,
		MaxBodyBytes:   cfg.MaxBodyBytes,
		RequestTimeout: duration(cfg.RequestTimeout),
		WriteToken:     cfg.WriteToken,
		AdminToken:     cfg.AdminToken,
		ReadToken:      cfg.ReadToken,
		Limits:         cfg.apiLimits(),
		TrustedProxies: proxies,
		AuthGuard:      n.authGuard,
		Edge: httpapi.Edge{TLS: cfg.TLSCert != "", ClientCerts: cfg.TLSClientCA != "", InsecureListen: cfg.InsecureListen,
			Public: !loopback(cfg.Listen), OpenAdmin: cfg.InsecureOpenAdmin},
		Version:    opts.Version,
		Links:      opts.Links,
		Replicas:   opts.Replicas,
		ChaosClock: chaosClock, // nil outside a chaos build
		Failpoints: n.fp,       // never on outside a chaos build
		Hot:        cfg.HotItems(),
		DataDirs:   []string{cfg.DataDir},
	}
	if n.rep != nil { // a nil *Replicator in the interface would not be a nil Replication
		apiCfg.Replication = n.rep
	}
	if n.pub != nil {
		apiCfg.Events = func() *api.EventLog { return eventLogJSON(n.pub.Status()) }
	}
	if cfg.RESPListen != "" {
		apiCfg.RESP = n.respStatus
	}
	if n.num != nil {
		apiCfg.Milestones = n.num.feed
		apiCfg.Numbering = n.num.status
		apiCfg.Sequence = n.num.sequence
	}
	if opts.API != nil {
		opts.API(&apiCfg)
	}
	if n.shards != nil {
		apiCfg.Shards = n.shards
		n.shards.stale = n.rep // before it serves: the view reads it answers carry its staleness
		// Cross-shard cashbacks, and the recovery of those a crash left
		// unfinished in the journal.
		var err error
		if n.purchases, err = purchase.New(purchase.Config{Router: purchaseRouter{n.shards}, Journal: n.store, Map: n.shards.Map,
			Timeout: duration(cfg.RequestTimeout), Logger: n.log, Registerer: n.registry, AtStep: cashbackCrashes(n.fp)}); err != nil {
			return fmt.Errorf("start purchases: %w", err)
		}
		n.purchases.Start()
		undo.push(n.purchases.Close)
		if cfg.Shards.CrossShardCashbacks() {
			apiCfg.Purchases = n.purchases
		}
	}
	var err error
	if n.api, err = httpapi.New(apiCfg); err != nil {
		return fmt.Errorf("build HTTP API: %w", err)
	}
	return nil
}

// listenHTTP loads the TLS certificate (if any, watched for renewal),
// listens on cfg.Listen and builds the HTTP server; Start serves it last.
func (n *Node) listenHTTP(ctx context.Context, cfg Config, undo *undoStack) error {
	var err error
	if cfg.TLSCert != "" {
		if n.certs, err = newCerts(cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA, n.log.Named("tls")); err != nil {
			return err
		}
		n.certs.watch()
		undo.push(n.certs.close)
	}
	var lc net.ListenConfig
	if n.ln, err = lc.Listen(ctx, "tcp", cfg.Listen); err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	n.srv = &http.Server{
		Handler:           n.api,
		ReadHeaderTimeout: 10 * time.Second,
		// Bodies are small (MaxBodyBytes); a client that dribbles one is
		// cut off rather than holding a connection.
		ReadTimeout: httpReadTimeout,
		// A client that stops reading its answer is cut off too. The clock
		// runs from the end of the request headers through the handler, so
		// it covers reading the body, waiting for the durable commit
		// (RequestTimeout) and writing the answer.
		WriteTimeout:   writeTimeout(duration(cfg.RequestTimeout)),
		IdleTimeout:    idleTimeout,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       n.log.Named("http").StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug}),
	}
	if n.certs != nil {
		n.srv.TLSConfig = n.certs.config()
	}
	return nil
}

// openFrontDoors opens the front doors besides HTTP: RESP (with
// RESPListen) and, when sharded, the serving of requests other replicas
// forward. On failure it closes the HTTP listener and RESP itself.
func (n *Node) openFrontDoors(ctx context.Context, cfg Config, opts Options) error {
	if cfg.RESPListen != "" {
		if err := n.startRESP(ctx, cfg, opts); err != nil {
			_ = n.ln.Close()
			return err
		}
	}
	if n.shards != nil {
		if err := n.shards.serve(n.api); err != nil {
			_ = n.ln.Close()
			if n.resp != nil {
				_ = n.resp.Close(ctx)
			}
			return err
		}
	}
	if n.shards != nil {
		n.shards.url.Store(advertised(cfg, n.ln.Addr()))
	}
	return nil
}

// startRESP serves the Redis protocol front door on cfg.RESPListen, with
// the HTTP API's tokens and per-user write limit.
func (n *Node) startRESP(ctx context.Context, cfg Config, opts Options) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.RESPListen)
	if err != nil {
		return fmt.Errorf("listen on %s (resp_listen): %w", cfg.RESPListen, err)
	}
	rcfg := resp.Config{
		Replica:                  n.replica,
		Listener:                 ln,
		Logger:                   n.log,
		RequestTimeout:           duration(cfg.RequestTimeout),
		MaxRequestBytes:          int(cfg.MaxBodyBytes),
		IdleTimeout:              idleTimeout,
		ReadToken:                cfg.ReadToken,
		WriteToken:               cfg.WriteToken,
		AdminToken:               cfg.AdminToken,
		LimitUser:                n.api.LimitUser,
		LimitClient:              n.api.LimitClient,
		MaxConnections:           cfg.RESPMaxConnections,
		MaxConnectionsPerAddress: cfg.RESPMaxConnectionsPerAddress,
		AuthGuard:                n.authGuard,
		Registerer:               n.registry,
		Version:                  opts.Version,
		Shards:                   n.respShards(),
		Hot:                      cfg.HotItems(),
	}
	if n.rep != nil {
		rcfg.Convergence = n.rep.Convergence
	}
	if n.shards != nil {
		rcfg.Union = n.api.UniquesUnion
	}
	if n.certs != nil { // the HTTP listener's certificate, reloaded alike
		rcfg.TLS = n.certs.config()
	}
	n.resp, err = resp.New(rcfg)
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("start RESP: %w", err)
	}
	n.log.Info("serving RESP", "addr", n.resp.Addr().String(), "tls", rcfg.TLS != nil)
	return nil
}

// newPublisher builds the event publisher: the region's stream, placed in
// the cluster of the NATS server this replica is connected to.
func (n *Node) newPublisher(cfg Config) (*replication.Publisher, error) {
	js, err := jetstream.New(n.nc, jetstream.WithPublishAsyncMaxPending(2*replication.DefaultPublishBatch))
	if err != nil {
		return nil, fmt.Errorf("event publisher: %w", err)
	}
	return replication.NewPublisher(replication.PublisherConfig{
		JS: js, Store: n.store, Replica: cfg.Replica, Region: cfg.Region,
		MaxAge: duration(cfg.EventRetention), KeepLocal: duration(cfg.EventLogKeep),
		Cluster: n.nc.ConnectedClusterName(), Logger: n.log, Registerer: n.registry,
	})
}

// dial connects to NATS (in the background if it is not reachable yet).
func (n *Node) dial(cfg Config, opts Options) error {
	natsOpts := append([]nats.Option(nil), opts.NATSOptions...)
	natsOpts = append(natsOpts, nats.CustomInboxPrefix(replication.InboxPrefix(cfg.Replica)))
	if cfg.NATSCreds != "" {
		natsOpts = append(natsOpts, nats.UserCredentials(cfg.NATSCreds))
	}
	if cfg.NATSUser != "" {
		natsOpts = append(natsOpts, nats.UserInfo(cfg.NATSUser, cfg.NATSPassword))
	}
	if cfg.NATSCA != "" {
		natsOpts = append(natsOpts, nats.RootCAs(cfg.NATSCA))
	}
	if cfg.NATSCert != "" {
		natsOpts = append(natsOpts, nats.ClientCert(cfg.NATSCert, cfg.NATSKey))
	}
	nc, err := replication.Dial(replication.DialConfig{
		URL:     cfg.NATS,
		Name:    "tally " + cfg.Replica,
		Options: natsOpts,
		Logger:  n.log.Named("nats"),
	})
	if err != nil {
		return err
	}
	if !nc.IsConnected() {
		n.log.Warn("NATS not reachable yet; retrying in the background, writes held until peers are synced", "url", cfg.NATS)
	}
	n.nc = nc
	return nil
}

// startReplication starts the replicator, which recovers this replica's
// state from its peers and then releases writes.
func (n *Node) startReplication(cfg Config, outbox *replication.Outbox, getenv func(string) string) error {
	nc := n.nc
	if len(cfg.Peers) == 0 {
		n.log.Warn("no peers configured: this replica listens to no other replica; list every other replica in `peers`")
	}
	netFaults, err := replication.NetFaultsFromEnv(getenv) // none outside a chaos build
	if err != nil {
		return fmt.Errorf("start replication: %w", err)
	}
	rcfg := replication.Config{
		NetFaults:           netFaults,
		Failpoints:          n.fp, // never on outside a chaos build
		Replica:             n.replica,
		Store:               n.store,
		Outbox:              outbox,
		Transport:           replication.NewNATS(nc),
		Logger:              n.log,
		FlushInterval:       duration(cfg.FlushInterval),
		AntiEntropyInterval: duration(cfg.AntiEntropyInterval),
		PeerTimeout:         duration(cfg.PeerTimeout),
		RecoveryTimeout:     duration(cfg.RecoveryTimeout),
		HeartbeatInterval:   cfg.HeartbeatInterval,
		Peers:               cfg.Peers,
		Retired:             cfg.Retired,
		Registerer:          n.registry,
	}
	if n.shardMaps != nil {
		rcfg.Shards = n.shardMaps
	}
	rep, err := replication.New(rcfg)
	if err == nil {
		// The replicator's goroutines live until Close, not until the
		// start-up context ends.
		err = rep.Start(context.Background())
	}
	if err != nil {
		return fmt.Errorf("start replication: %w", err)
	}
	n.rep = rep
	if n.shardMaps != nil {
		n.shardMaps.peersBy(rep.AddPeers)
		n.shardMaps.dropBy(n.released, n.dropShards, n.handOffShards, n.fp.On(failpoint.DropUnsynced))
	}
	n.log.Info("replicating over NATS", "url", cfg.NATS, "peers", cfg.Peers, "fresh", n.replica.Fresh())
	return nil
}
