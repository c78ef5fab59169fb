package localnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/tally-dev/tally/internal/base/poll"
)

// DefaultStartTimeout bounds Start when its context has no deadline.
const DefaultStartTimeout = 30 * time.Second

// pollInterval is how often readiness is polled.
const pollInterval = 20 * time.Millisecond

// Cluster is a running local super-cluster: one embedded nats-server per
// region, with JetStream, joined by gateways that pass through one
// fault-injecting link per pair of regions.
type Cluster struct {
	cfg     Config
	log     hclog.Logger
	regions []*region // in Config order
	byName  map[string]*region
	links   map[linkKey]*faults

	// linkMu guards linkUp, closed (and replaced) whenever a link comes
	// up, so that gateway connections held while their links were cut
	// look again (holdWhileCut).
	linkMu sync.Mutex
	linkUp chan struct{}
	// held counts the gateway connections held now (Held).
	held atomic.Int64

	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// region is one region's server and the listeners localnet owns for it.
type region struct {
	name string
	srv  *server.Server
	nlog *natsLogger

	// ingress is the region's advertised gateway address: the only one
	// the other regions ever learn, so every gateway connection into the
	// region passes through it.
	ingress net.Listener
	// routeLn is the target of the region's single configured route, which
	// leads back to the region's own cluster port (see doc.go).
	routeLn    net.Listener
	routeFault *faults

	// ready is closed once gwAddr and clusterAddr, the real listen
	// addresses of the started server, are known.
	ready       chan struct{}
	gwAddr      string
	clusterAddr string
}

// Start starts a server per region and the links between them, and waits
// until every server has an outbound and an inbound gateway connection to
// every other region and JetStream has a meta leader that knows every
// region. If ctx has no deadline, DefaultStartTimeout applies. On error
// everything started is stopped.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultStartTimeout)
		defer cancel()
	}
	runCtx, cancel := context.WithCancel(context.Background())
	c := &Cluster{
		cfg:    cfg,
		log:    cfg.Logger.Named("localnet"),
		byName: make(map[string]*region, len(cfg.Regions)),
		links:  make(map[linkKey]*faults),
		linkUp: make(chan struct{}),
		ctx:    runCtx,
		cancel: cancel,
	}
	if err := c.start(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("start localnet: %w", err), c.Close())
	}
	return c, nil
}

func (c *Cluster) multi() bool { return len(c.cfg.Regions) > 1 }

func (c *Cluster) start(ctx context.Context) error {
	for _, name := range c.cfg.Regions {
		r := &region{name: name, ready: make(chan struct{}), routeFault: newFaults()}
		c.regions = append(c.regions, r)
		c.byName[name] = r
	}
	for i, a := range c.cfg.Regions {
		for _, b := range c.cfg.Regions[i+1:] {
			k, _ := keyOf(a, b)
			c.links[k] = newFaults()
		}
	}
	if c.multi() {
		if err := c.listen(); err != nil {
			return err
		}
	}
	for _, r := range c.regions {
		if err := c.startServer(r); err != nil {
			return err
		}
	}
	for _, r := range c.regions {
		if err := c.awaitServer(ctx, r); err != nil {
			return err
		}
	}
	if err := c.WaitConnected(ctx); err != nil {
		return err
	}
	return c.WaitJetStream(ctx)
}

// listen opens the ingress and route listeners of every region and starts
// serving them; connections wait for the region's server to be known.
func (c *Cluster) listen() error {
	host := c.cfg.Host
	for _, r := range c.regions {
		var err error
		addr := net.JoinHostPort(host, "0")
		if r.ingress, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("listen gateway ingress of %s on %s: %w", r.name, addr, err)
		}
		if r.routeLn, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("listen route of %s on %s: %w", r.name, addr, err)
		}
	}
	for _, r := range c.regions {
		log := c.log.With("region", r.name)
		c.wg.Add(2)
		go func() {
			defer c.wg.Done()
			acceptLoop(c.ctx, r.ingress, log, &c.wg, func(conn net.Conn) { c.handleIngress(r, conn) })
		}()
		go func() {
			defer c.wg.Done()
			acceptLoop(c.ctx, r.routeLn, log, &c.wg, func(conn net.Conn) { c.handleRoute(r, conn) })
		}()
	}
	return nil
}

// options builds the nats-server options of region r.
func (c *Cluster) options(r *region) *server.Options {
	port := c.cfg.ClientPorts[r.name]
	if port == 0 {
		port = server.RANDOM_PORT
	}
	o := &server.Options{
		ServerName:             r.name,
		Host:                   c.cfg.Host,
		Port:                   port,
		NoLog:                  true,
		NoSigs:                 true,
		JetStream:              true,
		StoreDir:               filepath.Join(c.cfg.Dir, r.name),
		JetStreamMaxMemory:     c.cfg.JetStreamMaxMemory,
		JetStreamMaxStore:      c.cfg.JetStreamMaxStore,
		DisableJetStreamBanner: true,
		// Fsync every JetStream write: the lease allocator's KV must not
		// forget a lease it granted (the default syncs every 2 minutes).
		SyncAlways:   true,
		PingInterval: c.cfg.PingInterval,
	}
	if c.cfg.Users != nil {
		for _, u := range c.cfg.Users(r.name) {
			cp := *u // each server its own: a server fills in a user's account
			o.Users = append(o.Users, &cp)
		}
		o.NoAuthUser = c.cfg.NoAuthUser
	}
	if !c.multi() {
		// No gateway and no cluster: a standalone JetStream server.
		return o
	}
	// A single-node NATS cluster named after the region. Clustered
	// JetStream requires a configured route; the only one leads back to
	// this server, which detects the route to itself and drops it. It
	// also makes the JetStream meta group expect 1 (route) + one peer per
	// remote gateway.
	o.Cluster = server.ClusterOpts{Name: r.name, Host: c.cfg.Host, Port: server.RANDOM_PORT}
	o.Routes = []*url.URL{{Scheme: "nats-route", Host: r.routeLn.Addr().String()}}
	o.Gateway = server.GatewayOpts{
		Name: r.name,
		Host: c.cfg.Host,
		Port: server.RANDOM_PORT,
		// Advertise the ingress instead of the real listener: INFO and
		// gossip then only ever carry ingress addresses.
		Advertise:     r.ingress.Addr().String(),
		RejectUnknown: true,
	}
	for _, other := range c.regions {
		if other == r {
			continue
		}
		o.Gateway.Gateways = append(o.Gateway.Gateways, &server.RemoteGatewayOpts{
			Name: other.name,
			URLs: []*url.URL{{Scheme: "nats", Host: other.ingress.Addr().String()}},
		})
	}
	return o
}

func (c *Cluster) startServer(r *region) error {
	s, err := server.NewServer(c.options(r))
	if err != nil {
		return fmt.Errorf("create server %s: %w", r.name, err)
	}
	r.nlog = &natsLogger{log: c.cfg.Logger.Named(r.name)}
	s.SetLogger(r.nlog, c.cfg.Debug, c.cfg.Trace)
	r.srv = s
	s.Start()
	return nil
}

// awaitServer waits until r's listeners are up, checks that JetStream
// started and publishes the real addresses to the link handlers.
func (c *Cluster) awaitServer(ctx context.Context, r *region) error {
	for !r.srv.ReadyForConnections(pollInterval) {
		if f := r.nlog.firstFatal(); f != "" {
			return fmt.Errorf("server %s: %s", r.name, f)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("server %s: not ready for connections: %w", r.name, err)
		}
	}
	if f := r.nlog.firstFatal(); f != "" {
		return fmt.Errorf("server %s: %s", r.name, f)
	}
	if !r.srv.JetStreamEnabled() {
		return fmt.Errorf("server %s: jetstream not enabled", r.name)
	}
	if c.multi() {
		r.gwAddr = r.srv.GatewayAddr().String()
		r.clusterAddr = r.srv.ClusterAddr().String()
	}
	close(r.ready)
	return nil
}

// handleRoute forwards the region's route connection to its own cluster
// port, without faults.
func (c *Cluster) handleRoute(r *region, client net.Conn) {
	select {
	case <-r.ready:
	case <-c.ctx.Done():
		_ = client.Close()
		return
	}
	d := net.Dialer{Timeout: dialTimeout}
	srv, err := d.DialContext(c.ctx, "tcp", r.clusterAddr)
	if err != nil {
		c.log.Debug("route: dial cluster port failed", "region", r.name, "error", err)
		_ = client.Close()
		return
	}
	r.routeFault.serve(&c.wg, newPair(client, srv), client, srv, Forward)
}

// Regions returns the region names in Config order.
func (c *Cluster) Regions() []string {
	out := make([]string, len(c.regions))
	for i, r := range c.regions {
		out[i] = r.name
	}
	return out
}

// ClientURL is the nats:// URL for the clients of a region, "" for an
// unknown region.
func (c *Cluster) ClientURL(region string) string {
	r := c.byName[region]
	if r == nil || r.srv == nil {
		return ""
	}
	return r.srv.ClientURL()
}

// WaitConnected waits until, for every link that is up, both servers have
// an outbound and an inbound gateway connection to each other (after a
// heal, say). Links that are cut are not waited for.
func (c *Cluster) WaitConnected(ctx context.Context) error {
	return waitFor(ctx, "gateways connected", c.connected)
}

// connected reports the first missing gateway connection of an up link.
func (c *Cluster) connected() error {
	if !c.multi() {
		return nil
	}
	for _, r := range c.regions {
		gz, err := r.srv.Gatewayz(nil)
		if err != nil {
			return fmt.Errorf("gatewayz of %s: %w", r.name, err)
		}
		for _, o := range c.regions {
			if o == r {
				continue
			}
			if f, _, _ := c.link(r.name, o.name); !f.isUp() {
				continue
			}
			if out := gz.OutboundGateways[o.name]; out == nil || out.Connection == nil {
				return fmt.Errorf("%s has no outbound gateway to %s", r.name, o.name)
			}
			if len(gz.InboundGateways[o.name]) == 0 {
				return fmt.Errorf("%s has no inbound gateway from %s", r.name, o.name)
			}
		}
	}
	return nil
}

// WaitJetStream waits until JetStream can serve API requests: with several
// regions, until a meta leader exists that sees every region's server and
// every server is current with it (so while a region is cut off from all
// the others it cannot succeed; call it after a heal). With one region
// JetStream is standalone and ready once the server is.
func (c *Cluster) WaitJetStream(ctx context.Context) error {
	return waitFor(ctx, "jetstream ready", c.jetStreamReady)
}

func (c *Cluster) jetStreamReady() error {
	if !c.multi() {
		return nil
	}
	leader := ""
	for _, r := range c.regions {
		if !r.srv.JetStreamIsCurrent() {
			return fmt.Errorf("jetstream meta group not current on %s", r.name)
		}
		if r.srv.JetStreamIsLeader() {
			leader = r.name
			if peers := r.srv.JetStreamClusterPeers(); len(peers) != len(c.regions) {
				return fmt.Errorf("jetstream meta leader %s sees %d of %d servers", r.name, len(peers), len(c.regions))
			}
		}
	}
	if leader == "" {
		return errors.New("no jetstream meta leader")
	}
	return nil
}

// waitFor calls check until it succeeds or ctx ends.
func waitFor(ctx context.Context, what string, check func() error) error {
	if err := poll.Until(ctx, pollInterval, check); err != nil {
		return fmt.Errorf("wait for %s: %w", what, err)
	}
	return nil
}

// Close stops the links and the servers and waits for every goroutine. It
// is idempotent.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		c.cancel()
		var errs []error
		for _, r := range c.regions {
			for _, ln := range []net.Listener{r.ingress, r.routeLn} {
				if ln == nil {
					continue
				}
				if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
					errs = append(errs, fmt.Errorf("close listener of %s: %w", r.name, err))
				}
			}
		}
		var servers sync.WaitGroup
		for _, r := range c.regions {
			if r.srv == nil {
				continue
			}
			servers.Go(func() {
				r.srv.Shutdown()
				r.srv.WaitForShutdown()
			})
		}
		servers.Wait()
		for _, f := range c.links {
			f.shutdown()
		}
		for _, r := range c.regions {
			r.routeFault.shutdown()
		}
		c.wg.Wait()
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}
