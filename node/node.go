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
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/httpapi"
	"github.com/tally-dev/tally/internal/base/authguard"
	"github.com/tally-dev/tally/internal/base/failpoint"
	"github.com/tally-dev/tally/internal/base/version"
	"github.com/tally-dev/tally/purchase"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/replication"
	"github.com/tally-dev/tally/resp"
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
	// fp is the chaos build's armed failpoints (Options.Getenv); nil, and
	// never on, in any other build.
	fp *failpoint.Set

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
	// Getenv is where a chaos build reads its message faults
	// (replication.NetFaultsFromEnv) and its armed failpoints
	// (failpoint.FromEnv: TALLY_CHAOS_BUG and the crash points).
	// tallyd serve passes os.Getenv; nil reads nothing. Outside a chaos
	// build it is never called.
	Getenv func(string) string
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
		s = s || n.fp.On(failpoint.DropUnsynced) // never outside a chaos build
		synced = &s
	}
	if leaving := m.Leaving(n.cfg.Replica); leaving.Len() > 0 {
		// A write it accepted just before the switch commits within the
		// request timeout: compare only after that.
		_, e := n.rep.ShardSync(leaving, since.Add(duration(n.cfg.RequestTimeout)))
		e = e || n.fp.On(failpoint.DropUnsynced) // never outside a chaos build
		released = &e
	}
	return synced, released
}

// released reports whether this replica's entries of shards are at every
// other replica keeping them: every segment compared equal with each of
// them after since (when it took the map that had it leave them) and a
// request timeout, by which any write it accepted before has committed.
func (n *Node) released(shards shard.Set, since time.Time) bool {
	if n.fp.On(failpoint.DropUnsynced) { // never outside a chaos build
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
	moved, err := n.replica.Budgets().HandOffShards(ctx, shards.List(), to)
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
	entries, err := n.replica.Admin().DropShards(ctx, shards.List())
	if err != nil {
		n.log.Error("dropping the data of shards this replica keeps no longer", "shards", shards.Ranges(), "error", err)
		return
	}
	n.log.Info("dropped the data of shards this replica keeps no longer", "shards", shards.Len(), "entries", entries)
}
