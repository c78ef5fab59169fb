package localnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"

	"github.com/nats-io/nats-server/v2/server"
)

// StopServer shuts down the nats-server of a region, as a crash or a
// restart of that region's NATS would: its clients and gateway connections
// drop, and the ingress refuses gateway connections into the region (the
// dial of the real gateway port fails) until StartServer. Link states are
// kept. JetStream data stays on disk.
//
// StopServer and StartServer replace the region's server: they must not
// run concurrently with each other or with Server, ClientURL,
// WaitConnected, WaitJetStream or Close. (SetLink, SetDrop, SetLatency and
// Links are safe at any time.)
func (c *Cluster) StopServer(name string) error {
	r := c.byName[name]
	if r == nil {
		return fmt.Errorf("stop server: unknown region %q", name)
	}
	if !r.srv.Running() {
		return fmt.Errorf("stop server %s: not running", name)
	}
	r.srv.Shutdown()
	r.srv.WaitForShutdown()
	c.log.Info("server stopped", "region", name)
	return nil
}

// StartServer starts again the server of a region stopped by StopServer,
// on the same client, cluster and gateway ports, so clients reconnect to
// the URL they had and the ingress forwards to the same gateway port. It
// waits until the server accepts clients and then, as WaitConnected does,
// until its gateways to the regions whose links are up are connected both
// ways. See StopServer for what must not run concurrently.
func (c *Cluster) StartServer(ctx context.Context, name string) error {
	r := c.byName[name]
	if r == nil {
		return fmt.Errorf("start server: unknown region %q", name)
	}
	old := r.srv
	if old.Running() {
		return fmt.Errorf("start server %s: already running", name)
	}
	o, err := c.optionsAt(r, old)
	if err != nil {
		return fmt.Errorf("start server %s: %w", name, err)
	}
	s, err := server.NewServer(o)
	if err != nil {
		return fmt.Errorf("start server %s: %w", name, err)
	}
	nlog := &natsLogger{log: c.cfg.Logger.Named(r.name)}
	s.SetLogger(nlog, c.cfg.Debug, c.cfg.Trace)
	r.srv, r.nlog = s, nlog
	s.Start()
	for !s.ReadyForConnections(pollInterval) {
		if f := nlog.firstFatal(); f != "" {
			return fmt.Errorf("start server %s: %s", name, f)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("start server %s: not ready for connections: %w", name, err)
		}
	}
	if f := nlog.firstFatal(); f != "" {
		return fmt.Errorf("start server %s: %s", name, f)
	}
	if c.multi() {
		// The ingress and the route proxy dial the addresses recorded at
		// the first start; the new server must listen there.
		if got := s.GatewayAddr().String(); got != r.gwAddr {
			return fmt.Errorf("start server %s: gateway listens on %s, not %s", name, got, r.gwAddr)
		}
		if got := s.ClusterAddr().String(); got != r.clusterAddr {
			return fmt.Errorf("start server %s: cluster listens on %s, not %s", name, got, r.clusterAddr)
		}
	}
	c.log.Info("server started again", "region", name)
	return c.WaitConnected(ctx)
}

// optionsAt are region r's options on the ports its server old listens
// (or listened) on.
func (c *Cluster) optionsAt(r *region, old *server.Server) (*server.Options, error) {
	o := c.options(r)
	var errs []error
	var err error
	if o.Port, err = clientPort(old); err != nil {
		errs = append(errs, fmt.Errorf("client port: %w", err))
	}
	if c.multi() {
		if o.Cluster.Port, err = listenPort(r.clusterAddr); err != nil {
			errs = append(errs, fmt.Errorf("cluster port: %w", err))
		}
		if o.Gateway.Port, err = listenPort(r.gwAddr); err != nil {
			errs = append(errs, fmt.Errorf("gateway port: %w", err))
		}
	}
	return o, errors.Join(errs...)
}

// ReloadUsers gives region's running server the users Config.Users
// returns now (a replica added to the region: its own user), as a
// nats-server configuration reload does: connected clients stay. See
// StopServer for what must not run concurrently.
func (c *Cluster) ReloadUsers(name string) error {
	r := c.byName[name]
	if r == nil {
		return fmt.Errorf("reload users: unknown region %q", name)
	}
	o, err := c.optionsAt(r, r.srv)
	if err != nil {
		return fmt.Errorf("reload users of %s: %w", name, err)
	}
	if err := r.srv.ReloadOptions(o); err != nil {
		return fmt.Errorf("reload users of %s: %w", name, err)
	}
	c.log.Info("users reloaded", "region", name, "users", len(o.Users))
	return nil
}

// clientPort is the client port a (possibly stopped) server listened on:
// its options hold the real port once the listener was opened.
func clientPort(s *server.Server) (int, error) {
	u, err := url.Parse(s.ClientURL())
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(u.Port())
}

// listenPort is the port of a host:port address.
func listenPort(addr string) (int, error) {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(p)
}
