// Package resp serves the Redis protocol (RESP) front door of one replica:
// Redis commands mapped onto the replica's likes, counters and unique
// counts, with the HTTP API's validation, error codes, rate limits and
// durability (a write is answered after its commit is durable).
//
// The RESP parsing is github.com/tidwall/redcon's, patched in
// third_party/redcon so that no header can make it spin or panic
// (PATCHES.md there). This package maps commands (commands.go;
// conncmds.go, datacmds.go, sets.go), commits pipelined writes together
// (pipeline.go), writes the RESP3 frames redcon lacks (reply.go), and owns
// the listener's goroutines: Close stops accepting, closes every
// connection and waits for their handlers.
package resp

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/redcon"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/internal/base/authguard"
	"github.com/tally-dev/tally/internal/base/version"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/shard"
)

// Defaults for Config fields left zero: the HTTP API's, so both front
// doors of a replica bound a request alike.
const (
	DefaultMaxRequestBytes = frontdoor.DefaultMaxBodyBytes
	DefaultRequestTimeout  = frontdoor.DefaultRequestTimeout
	DefaultIdleTimeout     = 2 * time.Minute
	DefaultMaxConnections  = 10000 // Redis's maxclients
	// DefaultMaxConnectionsPerAddress keeps one client address from
	// taking every connection: past it, that address is refused while
	// others are still served.
	DefaultMaxConnectionsPerAddress = 256
)

// Config configures a Server.
type Config struct {
	// Replica answers every command. Required.
	Replica *region.Replica
	// Listener is where the Server accepts connections; it owns it from
	// New on and closes it on Close. Required.
	Listener net.Listener
	// Logger for connection and internal errors. Default: a null logger.
	Logger hclog.Logger
	// RequestTimeout bounds how long a write waits for its durable
	// commit. Default 10s.
	RequestTimeout time.Duration
	// MaxRequestBytes bounds one command as sent (a pipeline may hold
	// many): a longer one is answered with an error and the connection
	// closed, since the stream cannot be read past it. Default 1 MiB.
	MaxRequestBytes int
	// ReadToken, WriteToken and AdminToken are the tokens of each role as
	// the HTTP API takes them (several separated by spaces). A connection
	// sends one with AUTH; until then, writes are refused (NOAUTH) if
	// write tokens are set and reads if read tokens are set. SetTokens
	// replaces them.
	ReadToken, WriteToken, AdminToken string
	// LimitUser, if set, takes one write of a user from the per-user write
	// limit before a like or unlike (the HTTP API's, so both front doors
	// share it); its error is answered as the HTTP API would.
	LimitUser func(user string) error
	// LimitClient, if set, takes each command of class write, read or
	// scan from the client's token bucket of that class (the HTTP API's
	// per-client limit, so both front doors share it): the client is the
	// token the connection sent with AUTH, else its address. Its error is
	// answered as the HTTP API would.
	LimitClient func(class, token, addr string) error
	// MaxConnections bounds the connections open at once: the next one
	// is answered with an error and closed. Default
	// DefaultMaxConnections.
	MaxConnections int
	// MaxConnectionsPerAddress bounds the connections open at once from
	// one client address (IP, any port), so one host cannot take all of
	// MaxConnections. Default DefaultMaxConnectionsPerAddress.
	MaxConnectionsPerAddress int
	// AuthGuard slows guessing: a wrong AUTH token takes from its
	// address's bucket, and an address that failed too often waits, then
	// is refused (internal/base/authguard). The node shares one with the HTTP
	// API. Default: one of this Server's own.
	AuthGuard *authguard.Guard
	// TLS, if set, serves RESP over TLS with it (the node passes the HTTP
	// listener's, whose certificate is looked up per handshake, so a
	// reload applies to the next connection). Default: plain TCP.
	TLS *tls.Config
	// Registerer receives the RESP metrics (the node's registry, served
	// at /metrics). Default: a fresh registry.
	Registerer prometheus.Registerer
	// IdleTimeout closes a connection that sent nothing for that long,
	// so idle or abandoned clients do not hold goroutines and buffers.
	// Default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// Convergence, if set, is the replica's convergence as GET
	// /v1/convergence answers it, for INFO's replication section.
	Convergence func() api.Convergence
	// Shards, in a sharded region, routes a command to a holder of its
	// key's shard (shards.go). Default: nil, this replica holds every
	// shard.
	Shards Shards
	// Union, in a sharded region, is the HTTP API's union of unique
	// counts (httpapi.Server.UniquesUnion), which gathers the sketches of
	// keys on shards this replica does not hold: PFCOUNT of such keys
	// reads through it. Nil: such a PFCOUNT is refused with CROSSSLOT.
	Union func(ctx context.Context, keys []string) (api.Uniques, error)
	// Hot are the items split into parts, as the HTTP API's
	// (httpapi.Config.Hot): SADD and SREM of a user go to the user's
	// part, SCARD sums the parts where all are held here. Default none.
	Hot shard.Hot
	// Version is what HELLO and INFO report. Default version.Version().
	Version string
}

func (c *Config) ensureDefaults() {
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = DefaultMaxConnections
	}
	if c.MaxConnectionsPerAddress == 0 {
		c.MaxConnectionsPerAddress = DefaultMaxConnectionsPerAddress
	}
	if c.AuthGuard == nil {
		c.AuthGuard = authguard.New(authguard.Config{})
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	if c.Version == "" {
		c.Version = version.Version()
	}
}

// Validate reports every problem with c at once.
func (c Config) Validate() error {
	var errs []error
	if c.Replica == nil {
		errs = append(errs, errors.New("resp: Replica is required"))
	}
	if c.Listener == nil {
		errs = append(errs, errors.New("resp: Listener is required"))
	}
	if c.RequestTimeout < 0 {
		errs = append(errs, errors.New("resp: RequestTimeout < 0"))
	}
	if c.MaxRequestBytes < 0 {
		errs = append(errs, errors.New("resp: MaxRequestBytes < 0"))
	}
	if c.IdleTimeout < 0 {
		errs = append(errs, errors.New("resp: IdleTimeout < 0"))
	}
	if c.MaxConnections < 0 {
		errs = append(errs, errors.New("resp: MaxConnections < 0"))
	}
	if c.MaxConnectionsPerAddress < 0 {
		errs = append(errs, errors.New("resp: MaxConnectionsPerAddress < 0"))
	}
	return errors.Join(errs...)
}

// Server is the RESP front door of one replica, serving from New until
// Close.
type Server struct {
	cfg  Config
	rep  *region.Replica
	log  hclog.Logger
	ln   net.Listener
	srv  *redcon.Server
	auth atomic.Pointer[tokens]
	// commands maps a lower-case command name to its handler.
	commands map[string]command
	cursors  *cursors // where SSCAN pages stopped

	open     atomic.Int64  // connections open
	refused  atomic.Uint64 // connections refused over MaxConnections or MaxConnectionsPerAddress
	commandN atomic.Uint64 // commands answered
	nextID   atomic.Int64  // the last CLIENT ID given
	metrics  *metrics

	// perAddr counts the connections open from each client address
	// (authguard.Host): accept adds on redcon's accept loop, closed
	// takes away on connection goroutines. An address leaves the map
	// when its last connection closes, so it holds at most the open
	// connections.
	perAddrMu sync.Mutex
	perAddr   map[string]int

	// stop ends in-flight commands' waits when Close gives up waiting.
	stop     context.Context
	cancel   context.CancelFunc
	conns    sync.WaitGroup // one per accepted connection, done when redcon closes it
	served   chan struct{}  // closed when the accept loop returns
	serveErr error          // its error, read after served

	closeOnce sync.Once
	closeErr  error
}

// tokens are the tokens of each role, split.
type tokens struct {
	read, write, admin [][]byte
}

// role is what a connection's AUTH opened.
type role int

const (
	roleNone role = iota
	roleRead
	roleWrite
	roleAdmin
)

// session is one connection's state.
type session struct {
	role  role
	token string // the token AUTH opened role with: the client of the rate limits
	addr  string // the client's address, its client without a token
	host  string // addr without the port: the per-address limits' key
	id    int64  // CLIENT ID: unique per connection of this Server
	name  string
	resp  int  // protocol version: 2, or 3 after HELLO 3
	quit  bool // QUIT answered: run nothing it pipelined after
	// tx, from MULTI to EXEC or DISCARD, holds the queued commands
	// (tx.go).
	tx *tx
}

// New starts serving cfg.Listener.
func New(cfg Config) (*Server, error) {
	cfg.ensureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, rep: cfg.Replica, log: cfg.Logger.Named("resp"), served: make(chan struct{}),
		commands: commandTable(), cursors: newCursors(MaxCursors), perAddr: map[string]int{}}
	m, err := newMetrics(cfg.Registerer, func() float64 { return float64(s.open.Load()) })
	if err != nil {
		return nil, err
	}
	s.metrics = m
	s.stop, s.cancel = context.WithCancel(context.Background())
	s.SetTokens(cfg.ReadToken, cfg.WriteToken, cfg.AdminToken)
	ln := cfg.Listener
	if cfg.TLS != nil {
		ln = tls.NewListener(ln, cfg.TLS)
	}
	s.ln = &boundedListener{Listener: ln, max: cfg.MaxRequestBytes}
	s.srv = redcon.NewServerNetwork("tcp", cfg.Listener.Addr().String(), s.handle, s.accept, s.closed)
	s.srv.AcceptError = func(err error) { s.log.Warn("accept failed", "error", err) }
	s.srv.SetIdleClose(cfg.IdleTimeout)
	go func() {
		defer close(s.served)
		s.serveErr = s.srv.Serve(s.ln)
	}()
	return s, nil
}

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Status is the listener's state for /v1/status.
func (s *Server) Status() api.RESPStatus {
	return api.RESPStatus{
		Addr:           s.ln.Addr().String(),
		Connections:    s.open.Load(),
		MaxConnections: s.cfg.MaxConnections,
		Refused:        s.refused.Load(),
		Commands:       s.commandN.Load(),
	}
}

// SetTokens replaces the tokens of each role (a reload). Connections
// already authenticated keep their role.
func (s *Server) SetTokens(read, write, admin string) {
	split := func(setting string) [][]byte {
		var out [][]byte
		for _, t := range strings.Fields(setting) {
			out = append(out, []byte(t))
		}
		return out
	}
	s.auth.Store(&tokens{read: split(read), write: split(write), admin: split(admin)})
}

// Close stops accepting, closes every connection and waits for their
// handlers, cutting off writes still waiting for their commit when ctx
// ends. Close is idempotent.
func (s *Server) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		// Closing the listener ends redcon's accept loop, which then
		// closes every connection it accepted.
		if err := s.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			s.closeErr = fmt.Errorf("resp: close listener: %w", err)
		}
		<-s.served
		handlers := make(chan struct{})
		go func() {
			s.conns.Wait()
			close(handlers)
		}()
		select {
		case <-handlers:
		case <-ctx.Done():
			s.cancel()
			<-handlers
		}
		s.cancel()
		if s.serveErr != nil {
			s.closeErr = errors.Join(s.closeErr, fmt.Errorf("resp: serve: %w", s.serveErr))
		}
	})
	return s.closeErr
}

// accept takes a connection, or refuses it (an error, then closed) when
// MaxConnections are open, or MaxConnectionsPerAddress from its address.
// It runs on redcon's accept loop, so the total needs no lock against
// itself; closed runs on connection goroutines.
func (s *Server) accept(c redcon.Conn) bool {
	host := authguard.Host(c.RemoteAddr())
	refuse := func(reason, msg string) bool {
		s.refused.Add(1)
		s.metrics.refused.WithLabelValues(reason).Inc()
		if s.cfg.TLS != nil {
			// The error would need a handshake first, on the accept
			// loop, which a client that never finishes one would hold:
			// the connection is closed without it. A deadline already
			// past fails redcon's flush at once.
			_ = c.NetConn().SetDeadline(time.Now())
			return false
		}
		// A few bytes into an empty socket buffer: the deadline only
		// guards against a peer that is already gone.
		_ = c.NetConn().SetWriteDeadline(time.Now().Add(time.Second))
		c.WriteError(msg)
		return false // redcon flushes the error and closes
	}
	if s.open.Load() >= int64(s.cfg.MaxConnections) {
		return refuse("max", fmt.Sprintf("ERR max number of clients reached: this replica serves at most %d RESP connections (code %s)",
			s.cfg.MaxConnections, frontdoor.CodeRateLimited))
	}
	s.perAddrMu.Lock()
	if s.perAddr[host] >= s.cfg.MaxConnectionsPerAddress {
		s.perAddrMu.Unlock()
		return refuse("per_address", fmt.Sprintf("ERR max number of clients reached for your address: this replica serves at most %d RESP connections from one address (code %s)",
			s.cfg.MaxConnectionsPerAddress, frontdoor.CodeRateLimited))
	}
	s.perAddr[host]++
	s.perAddrMu.Unlock()
	s.open.Add(1)
	s.conns.Add(1)
	c.SetContext(&session{resp: 2, addr: c.RemoteAddr(), host: host, id: s.nextID.Add(1)})
	return true
}

func (s *Server) closed(c redcon.Conn, err error) {
	defer s.conns.Done()
	s.open.Add(-1)
	if sess, ok := c.Context().(*session); ok {
		s.perAddrMu.Lock()
		if s.perAddr[sess.host]--; s.perAddr[sess.host] <= 0 {
			delete(s.perAddr, sess.host)
		}
		s.perAddrMu.Unlock()
	}
	if err != nil && !errors.Is(err, net.ErrClosed) {
		s.log.Debug("connection closed", "remote", c.RemoteAddr(), "error", err)
	}
}

// handle answers a command and the rest the client pipelined with it
// (pipeline.go): exactly one reply each, in order, never a panic into
// redcon (which would end the process).
func (s *Server) handle(c redcon.Conn, cmd redcon.Command) {
	if bc, ok := c.NetConn().(*boundedConn); ok {
		bc.handled()
	}
	sess, _ := c.Context().(*session)
	if sess == nil { // accept sets one; never nil in practice
		sess = &session{resp: 2, addr: c.RemoteAddr(), host: authguard.Host(c.RemoteAddr()), id: s.nextID.Add(1)}
		c.SetContext(sess)
	}
	if len(c.PeekPipeline()) == 0 {
		s.serveOne(c, sess, cmd)
		return
	}
	s.serve(c, sess, append([]redcon.Command{cmd}, c.ReadPipeline()...))
}

// matchToken reports whether got is one of want, in constant time per
// token.
func matchToken(got []byte, want [][]byte) bool {
	ok := false
	for _, w := range want {
		if subtle.ConstantTimeCompare(got, w) == 1 {
			ok = true
		}
	}
	return ok
}

// roleOf is the highest role token opens, roleNone if none.
func (t *tokens) roleOf(token []byte) role {
	switch {
	case matchToken(token, t.admin):
		return roleAdmin
	case matchToken(token, t.write):
		return roleWrite
	case matchToken(token, t.read):
		return roleRead
	}
	return roleNone
}

// boundedListener wraps each accepted connection in a boundedConn.
type boundedListener struct {
	net.Listener
	max int
}

func (l *boundedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &boundedConn{Conn: c, max: l.max}, nil
}

// boundedConn bounds what redcon buffers for one command: redcon grows
// its buffer until a command is complete, so a client announcing a huge
// bulk string could make it take any amount of memory. Bytes read since
// the last command was handled are counted; past the bound, the client
// gets an error and the connection ends (the rest of the stream cannot
// be parsed without reading the command).
type boundedConn struct {
	net.Conn
	max     int
	pending atomic.Int64 // bytes read since a command was last handled
}

// errTooLarge ends a connection whose command passed the bound.
var errTooLarge = errors.New("resp: command too large")

// Read refuses to read on once a command has taken max bytes: redcon
// reads again only while no command in its buffer is complete, so what
// was read since the last command was handled is that command's.
func (c *boundedConn) Read(b []byte) (int, error) {
	if c.pending.Load() >= int64(c.max) {
		_, _ = c.Conn.Write([]byte(fmt.Sprintf("-ERR request exceeds %d bytes (code body_too_large)\r\n", c.max)))
		return 0, errTooLarge
	}
	n, err := c.Conn.Read(b)
	c.pending.Add(int64(n))
	return n, err
}

// handled resets the count: a command was complete.
func (c *boundedConn) handled() { c.pending.Store(0) }
