// Package node is one replica at work: it opens the store, starts the
// replica's state machine (region), connects to NATS and runs replication
// and, with milestones, the like numbering (alloc, milestone), and serves
// the HTTP API (httpapi) on a listener and, if configured, the Redis
// protocol (resp) on another. `tallyd serve` runs one Node; a
// local deployment (internal/deploy) runs one per region in one process,
// which is why each Node has its own metrics registry and logger.
package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/httpapi"
	"github.com/tally-dev/tally/internal/authguard"
	"github.com/tally-dev/tally/internal/buildtags"
	"github.com/tally-dev/tally/internal/version"
	"github.com/tally-dev/tally/purchase"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/replication"
	"github.com/tally-dev/tally/resp"
	"github.com/tally-dev/tally/route"
	"github.com/tally-dev/tally/shard"
	"github.com/tally-dev/tally/storage"
)

// Node is one running replica: its store, the replica, replication, and
// its HTTP API on a listener.
type Node struct {
	cfg      Config
	log      hclog.Logger
	store    *storage.Store
	replica  *region.Replica
	nc       *nats.Conn              // nil when standalone
	rep      *replication.Replicator // nil when standalone
	num      *numbering              // nil without numbered sequences
	pub      *replication.Publisher  // nil without NATS or the event log
	api      *httpapi.Server
	registry *prometheus.Registry
	srv      *http.Server
	ln       net.Listener
	resp     *resp.Server // nil without RESPListen
	shards   *shardRouter // nil unless sharded (Config.Shards)
	// purchases runs cashbacks across shards; nil unless sharded.
	purchases *purchase.Coordinator
	certs     *certs // nil without TLS
	reload    reloadState

	// authGuard slows token guessing per address, shared by the HTTP
	// API's bearer tokens and RESP's AUTH.
	authGuard *authguard.Guard
	// shardMaps is every region's shard map, followed in the shard map
	// bucket; nil unless sharded.
	shardMaps *shardWatch
	// chaosDropUnsynced: the chaos build's bug delete-before-sync
	// (region.Chaos.DropUnsynced); false in any other build.
	chaosDropUnsynced bool

	done     chan struct{} // closed when the HTTP serve loop returns
	serveErr error         // why it returned; read after done is closed

	closeOnce sync.Once
	closeErr  error
}

// Options are the wiring a Node's caller adds to its Config. The zero
// value runs the Config as it stands.
type Options struct {
	// Logger is the parent logger; the node logs under its replica id.
	// Default: a null logger.
	Logger hclog.Logger
	// HoldWrites starts a standalone replica refusing writes until
	// Replica().AcceptWrites. (With NATS, writes are always held until
	// recovery.)
	HoldWrites bool
	// NATSOptions are extra connection options (e.g. an in-process
	// connection); replication runs if cfg.NATS is set or these are given.
	// Peers and milestones still need cfg.NATS (Config.Validate).
	NATSOptions []nats.Option
	// Links, in a local deployment, serves /v1/admin/links.
	Links httpapi.LinkAdmin
	// Replicas, in a local deployment, serves /v1/admin/replicas.
	Replicas httpapi.ReplicaAdmin
	// API adjusts the HTTP API config before the server is built.
	API func(*httpapi.Config)
	// Version is what /v1/status and tally_build_info report as the
	// release. Default version.Version().
	Version string
	// Getenv is where a chaos build reads its faults and deliberate bugs
	// (TALLY_CHAOS_*; see region.Chaos, replication.Chaos, milestone.Chaos).
	// tallyd serve passes os.Getenv; nil reads nothing. Outside a chaos
	// build it is never called.
	Getenv func(string) string
}

// Start opens the store, starts the replica (and, with NATS, replication
// and numbering) and serves its HTTP API on cfg.Listen. An invalid cfg is
// refused with every problem (Config.Validate); ctx bounds the start only.
// On error nothing is left running. The caller owns the Node and must
// Close it.
func Start(ctx context.Context, cfg Config, opts Options) (_ *Node, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("node config: %w", err)
	}
	if opts.Getenv == nil {
		opts.Getenv = func(string) string { return "" }
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Version == "" {
		opts.Version = version.Version()
	}
	log := opts.Logger.Named(cfg.Replica)
	// n is deliberately not the named result: "return nil, err" would clear
	// it before the undo closures below run.
	n := &Node{cfg: cfg, log: log, done: make(chan struct{}), registry: prometheus.NewRegistry(),
		authGuard: authguard.New(authguard.Config{})}
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()

	n.registry.MustRegister( // a fresh registry: cannot collide
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo(opts.Version),
	)

	// The order below (store, NATS, numbering, replica, replication, HTTP)
	// is what each part needs of the earlier ones; numbering.go details
	// the numbering's share of it.
	log.Info("opening store", "dir", cfg.DataDir, "durability", cfg.Durability)
	n.store, err = storage.Open(storage.Config{
		Dir:        cfg.DataDir,
		Durability: cfg.durability(),
		Logger:     log.Named("pebble"),
		Registerer: n.registry,
	})
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() { _ = n.store.Close() })

	replicate := cfg.NATS != "" || len(opts.NATSOptions) > 0
	var outbox *replication.Outbox
	rcfg := region.Config{
		Region:     cfg.Region,
		Replica:    cfg.Replica,
		Store:      n.store,
		Logger:     log,
		HoldWrites: opts.HoldWrites,
		// A handoff recorded before a restart goes on only to a replica
		// that is still a peer: rights handed to one nobody runs any more
		// would be out of reach (the PUT that started it checked too).
		KeepHandoff: func(to string) bool { return slices.Contains(cfg.Peers, to) },
		Chaos:       region.ChaosFromEnv(opts.Getenv), // zero outside a chaos build
		Registerer:  n.registry,

		IdempotencyTTL: duration(cfg.IdempotencyTTL),
		LikeLists:      cfg.LikeLists,
		EventLog:       cfg.EventLog,
		Approx:         cfg.ApproxRules(),
	}
	if rcfg.Windows, err = cfg.WindowConfig(); err != nil {
		return nil, err
	}
	n.chaosDropUnsynced = rcfg.Chaos.ChaosDropUnsynced()
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
	if replicate {
		// Nothing is acknowledged before recovery from peers (see package
		// replication): the replicator releases the hold.
		outbox = replication.NewOutbox()
		rcfg.HoldWrites, rcfg.OnCommit = true, outbox.Add
		if err := n.dial(cfg, opts); err != nil {
			return nil, err
		}
		undo = append(undo, func() { n.nc.Close() })
		n.registry.MustRegister(natsCollector{n.nc}) // a fresh registry: cannot collide
		if cfg.Shards != nil {
			// The shard map bucket's maps where it has them, the config's
			// otherwise (shardmaps.go).
			if n.shardMaps, err = startShardWatch(cfg, n.nc, log); err != nil {
				return nil, err
			}
			undo = append(undo, n.shardMaps.close)
			own := n.shardMaps.own
			n.shards = newShardRouter(cfg.Region, cfg.Replica, own, n.nc, natsTransport{nc: n.nc, region: cfg.Region}, nil,
				duration(cfg.RequestTimeout), log)
			n.shardMaps.serveBy(n.shards.update)
			n.shards.moveState = n.moveState
			rcfg.Holds = n.shards.Holds
			n.shards.chaosAckUnapplied = buildtags.Chaos && rcfg.Chaos.ForwardAckUnapplied
			held := own.Held(cfg.Replica)
			log.Info("sharded", "holds", held.Len(), "of", shard.Count, "copies", own.Copies, "map_revision", own.Revision)
		}
		if cfg.EventLog {
			if n.pub, err = n.newPublisher(cfg); err != nil {
				return nil, err
			}
			rcfg.OnCommit = func(c region.Changes) {
				outbox.Add(c)
				n.pub.Kick()
			}
		}
		if len(cfg.numbered()) > 0 {
			// Steps 2-4 of numbering.go's order: before the replica.
			if n.num, err = newNumbering(cfg, n.nc, n.store, log, n.registry, opts.Getenv); err != nil {
				return nil, fmt.Errorf("set up numbering: %w", err)
			}
			rcfg.Sequences = n.num.regionNumbering()
		}
	}
	n.replica, err = region.New(rcfg)
	if err != nil {
		return nil, fmt.Errorf("start replica %s: %w", cfg.Replica, err)
	}
	undo = append(undo, func() { _ = n.replica.Close() })
	if n.shards != nil {
		n.shards.accepted = n.replica.Accepted()
		n.shards.do = n.replica.Do
	}
	if n.replica.Fresh() {
		log.Info("new replica: the data directory held no state")
	}

	if n.num != nil {
		n.num.start(n.replica)
		undo = append(undo, func() {
			ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			defer cancel()
			_ = n.num.close(ctx)
		})
	}

	if replicate {
		if err := n.startReplication(cfg, outbox, opts.Getenv); err != nil {
			return nil, err
		}
		undo = append(undo, func() { n.rep.Close() })
	}
	if n.pub != nil {
		n.pub.Start()
		undo = append(undo, n.pub.Close)
	}

	proxies, _ := cfg.trustedProxies() // Validate checked them
	apiCfg := httpapi.Config{
		Replica:        n.replica,
		Logger:         log,
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
		Version:     opts.Version,
		Replication: n.rep,
		Links:       opts.Links,
		Replicas:    opts.Replicas,
		ChaosClock:  chaosClock, // nil outside a chaos build
		// false outside a chaos build
		ChaosAckUnheld:     rcfg.Chaos.AckUnheld,
		ChaosSplitTwoParts: rcfg.Chaos.SplitTwoParts,
		Hot:                cfg.HotItems(),
		DataDirs:           []string{cfg.DataDir},
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
		// Cross-shard cashbacks, and the recovery of those a crash left
		// unfinished in the journal.
		if n.purchases, err = purchase.New(purchase.Config{Router: purchaseRouter{n.shards}, Journal: n.store, Map: n.shards.Map,
			Timeout: duration(cfg.RequestTimeout), Logger: log, Registerer: n.registry, AtStep: failpoints(opts.Getenv)}); err != nil {
			return nil, fmt.Errorf("start purchases: %w", err)
		}
		n.purchases.Start()
		undo = append(undo, n.purchases.Close)
		if cfg.Shards.CrossShardCashback {
			apiCfg.Purchases = n.purchases
		}
	}
	if n.api, err = httpapi.New(apiCfg); err != nil {
		return nil, fmt.Errorf("build HTTP API: %w", err)
	}

	if cfg.TLSCert != "" {
		if n.certs, err = newCerts(cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA, log.Named("tls")); err != nil {
			return nil, err
		}
		n.certs.watch()
		undo = append(undo, n.certs.close)
	}
	var lc net.ListenConfig
	if n.ln, err = lc.Listen(ctx, "tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Listen, err)
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
		ErrorLog:       log.Named("http").StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug}),
	}
	if n.certs != nil {
		n.srv.TLSConfig = n.certs.config()
	}
	if cfg.RESPListen != "" {
		if err := n.startRESP(ctx, cfg, opts); err != nil {
			_ = n.ln.Close()
			return nil, err
		}
	}
	if n.shards != nil {
		// After RESP: a holder runs forwarded commands of both front doors.
		var exec func([][]byte, route.Role, int) []byte
		if n.resp != nil {
			exec = n.resp.Exec
		}
		if err := n.shards.serve(n.api, exec); err != nil {
			_ = n.ln.Close()
			if n.resp != nil {
				_ = n.resp.Close(ctx)
			}
			return nil, err
		}
	}
	if n.shards != nil {
		n.shards.url.Store(advertised(cfg, n.ln.Addr()))
	}
	go n.serve()
	log.Info("serving HTTP", "addr", n.ln.Addr().String(), "tls", n.certs != nil, "client_certs", cfg.TLSClientCA != "")
	return n, nil
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

// respStatus is the RESP listener's state for /v1/status; nil until it
// serves (the HTTP listener starts after it).
func (n *Node) respStatus() *api.RESPStatus {
	if n.resp == nil {
		return nil
	}
	st := n.resp.Status()
	return &st
}

// respShards is the RESP front door's routing; nil unless sharded.
func (n *Node) respShards() resp.Shards {
	if n.shards == nil {
		return nil
	}
	return respShards{n.shards}
}

// RESPAddr is the bound RESP address, nil without RESPListen.
func (n *Node) RESPAddr() net.Addr {
	if n.resp == nil {
		return nil
	}
	return n.resp.Addr()
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

// httpReadTimeout bounds reading a request, body included.
const httpReadTimeout = 30 * time.Second

// idleTimeout closes a client connection, HTTP or RESP, that sent nothing
// for that long.
const idleTimeout = 2 * time.Minute

// writeTimeout is the HTTP server's WriteTimeout for a request timeout:
// room to read the body, wait for the commit and write the answer.
func writeTimeout(request time.Duration) time.Duration {
	return httpReadTimeout + request + 10*time.Second
}

// serve runs the HTTP server until Shutdown or a listener failure.
func (n *Node) serve() {
	defer close(n.done)
	var err error
	if n.certs != nil {
		err = n.srv.ServeTLS(n.ln, "", "") // the certificate comes from TLSConfig
	} else {
		err = n.srv.Serve(n.ln)
	}
	if !errors.Is(err, http.ErrServerClosed) {
		n.serveErr = fmt.Errorf("serve HTTP on %s: %w", n.ln.Addr(), err)
	}
}

// Addr is the bound HTTP address (the real port when Listen asked for 0).
func (n *Node) Addr() net.Addr { return n.ln.Addr() }

// Replica is the running replica, for in-process callers (tests, benches)
// that act on it without HTTP.
func (n *Node) Replica() *region.Replica { return n.replica }

// ShardMaps are every region's shard maps as this replica's replication
// follows them (the shard map bucket's, else the config's); nil unless
// the region is sharded.
func (n *Node) ShardMaps() shard.Maps {
	if n.shardMaps == nil {
		return nil
	}
	return n.shardMaps.maps()
}

// Store is the replica's store, for in-process callers that inspect it
// (e.g. compare digests).
func (n *Node) Store() *storage.Store { return n.store }

// MemoryUse is the store's memory use (caches, memtables), for benches.
func (n *Node) MemoryUse() (storage.MemoryUse, error) { return n.store.MemoryUse() }

// Done is closed if the HTTP server stops on its own; Err then says why.
func (n *Node) Done() <-chan struct{} { return n.done }

// Err is the HTTP server's failure, valid once Done is closed.
func (n *Node) Err() error { return n.serveErr }

// Close stops the node in order: stop accepting HTTP and drain in-flight
// requests (until ctx ends, then cut them off), close the replica (its
// writer finishes the batch in hand), close the store. Each step runs even
// if an earlier one failed. Close is idempotent.
func (n *Node) Close(ctx context.Context) error {
	n.closeOnce.Do(func() {
		var errs []error
		n.log.Info("stopping HTTP server")
		if err := n.srv.Shutdown(ctx); err != nil {
			n.log.Warn("in-flight requests did not finish; closing their connections", "error", err)
			if err := n.srv.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close HTTP server: %w", err))
			}
		}
		<-n.done
		if n.serveErr != nil {
			errs = append(errs, n.serveErr)
		}
		if n.purchases != nil {
			n.purchases.Close()
		}
		if n.shards != nil {
			n.log.Info("stopping forwarded requests")
			n.shards.close()
		}
		if n.shardMaps != nil {
			n.shardMaps.close()
		}
		if n.resp != nil {
			n.log.Info("stopping RESP server")
			if err := n.resp.Close(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		if n.certs != nil {
			n.certs.close()
		}
		if n.rep != nil {
			n.log.Info("stopping replication")
			n.rep.Close()
		}
		n.log.Info("closing replica")
		if err := n.replica.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close replica: %w", err))
		}
		if n.pub != nil {
			n.pub.Close() // what it did not publish, the next start does
		}
		if n.num != nil {
			n.log.Info("giving back leases")
			if err := n.num.close(ctx); err != nil {
				n.log.Warn("leases not given back; the next start does it", "error", err)
			}
		}
		if n.nc != nil {
			n.nc.Close()
		}
		n.log.Info("closing store")
		if err := n.store.Close(); err != nil {
			errs = append(errs, err)
		}
		n.closeErr = errors.Join(errs...)
		if n.closeErr == nil {
			n.log.Info("stopped")
		}
	})
	return n.closeErr
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
	chaos, err := replication.ChaosFromEnv(getenv) // zero outside a chaos build
	if err != nil {
		return fmt.Errorf("start replication: %w", err)
	}
	rcfg := replication.Config{
		Chaos:               chaos,
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
		n.shardMaps.dropBy(n.released, n.dropShards, n.handOffShards, n.chaosDropUnsynced)
	}
	n.log.Info("replicating over NATS", "url", cfg.NATS, "peers", cfg.Peers, "fresh", n.replica.Fresh())
	return nil
}

// buildInfo is tally_build_info: 1, with the release, the Go release and
// the commit of this build as labels, so a dashboard can tell which
// replicas run which build during a rolling upgrade.
func buildInfo(release string) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "tally_build_info",
		Help:        "Always 1; the labels say which build this replica runs.",
		ConstLabels: prometheus.Labels{"version": release, "go_version": version.GoVersion(), "revision": version.Revision()},
	})
	g.Set(1)
	return g
}

// moveState says how far this replica is along a shard move of its
// region (shard/move.go): synced, if it is joining shards, and released,
// if it keeps shards it left; nil when it does neither, or before
// replication runs.
func (n *Node) moveState() (synced, released *bool) {
	if n.rep == nil || n.shardMaps == nil {
		return nil, nil
	}
	m, since := n.shardMaps.ownSince()
	if joining := m.Joining(n.cfg.Replica); joining.Len() > 0 {
		s, _ := n.rep.ShardSync(joining, since)
		s = s || n.chaosDropUnsynced // never outside a chaos build
		synced = &s
	}
	if leaving := m.Leaving(n.cfg.Replica); leaving.Len() > 0 {
		// A write it accepted just before the switch commits within the
		// request timeout: compare only after that.
		_, e := n.rep.ShardSync(leaving, since.Add(duration(n.cfg.RequestTimeout)))
		e = e || n.chaosDropUnsynced // never outside a chaos build
		released = &e
	}
	return synced, released
}

// released reports whether this replica's entries of shards are at every
// other replica keeping them: every segment compared equal with each of
// them after since (when it took the map that had it leave them) and a
// request timeout, by which any write it accepted before has committed.
func (n *Node) released(shards shard.Set, since time.Time) bool {
	if n.chaosDropUnsynced { // never outside a chaos build
		return true
	}
	_, equal := n.rep.ShardSync(shards, since.Add(duration(n.cfg.RequestTimeout)))
	return equal
}

// handOffShards gives this replica's rights to the budgets of shards it
// stopped serving to a holder of each in m, the map it took.
func (n *Node) handOffShards(ctx context.Context, shards shard.Set, m shard.Map) {
	to := func(s int) string {
		for _, h := range m.Holders(s) {
			if h != n.cfg.Replica {
				return h
			}
		}
		return ""
	}
	moved, err := n.replica.HandOffShards(ctx, shards.List(), to)
	if err != nil {
		n.log.Warn("handing the budget rights of shards this replica left to their holders", "shards", shards.Len(), "error", err)
		return
	}
	if moved > 0 {
		n.log.Info("handed the budget rights of shards this replica left to their holders", "shards", shards.Len(), "rights", moved)
	}
}

// dropShards drops this replica's data of shards it keeps no longer.
func (n *Node) dropShards(ctx context.Context, shards shard.Set) {
	entries, err := n.replica.DropShards(ctx, shards.List())
	if err != nil {
		n.log.Error("dropping the data of shards this replica keeps no longer", "shards", shards.Ranges(), "error", err)
		return
	}
	n.log.Info("dropped the data of shards this replica keeps no longer", "shards", shards.Len(), "entries", entries)
}
