package localnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// dialTimeout bounds how long a proxy waits for its target to accept.
const dialTimeout = 5 * time.Second

// acceptBackoff is the pause after a transient Accept error.
const acceptBackoff = 10 * time.Millisecond

// Proxy is a fault-injecting TCP proxy: it listens on a local port and
// forwards every connection it accepts to a fixed target.
//
// While up, bytes flow both ways, optionally delayed (SetLatency) or
// discarded (SetDrop) per direction. Going down closes every forwarded
// connection, and while down a new connection is accepted and closed at
// once, so both ends notice immediately rather than after a timeout.
// There is no half-close: when either end closes its connection, the
// proxy delivers what it holds for the other end and closes both.
//
// A Proxy owns its goroutines: Close stops them all and waits for them.
type Proxy struct {
	ln     net.Listener
	target string
	f      *faults
	log    hclog.Logger

	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// NewProxy listens on listen (host:port; port 0 picks a free one) and
// forwards to target. The proxy starts up. log may be nil.
func NewProxy(listen, target string, log hclog.Logger) (*Proxy, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("proxy target %q: %w", target, err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("listen proxy %s: %w", listen, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		ln:     ln,
		target: target,
		f:      newFaults(),
		log:    log.With("proxy", ln.Addr().String(), "target", target),
		ctx:    ctx,
		cancel: cancel,
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		acceptLoop(p.ctx, p.ln, p.log, &p.wg, p.handle)
	}()
	return p, nil
}

// Addr is the address the proxy listens on, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// SetUp brings the proxy up or down; down closes every live connection.
func (p *Proxy) SetUp(up bool) { p.f.setUp(up) }

// Up reports whether the proxy forwards.
func (p *Proxy) Up() bool { return p.f.isUp() }

// SetDrop makes the proxy discard (drop) or forward the bytes travelling in
// direction d: one-way loss. Starting a drop leaves connections open;
// lifting it closes them, since their streams lost bytes mid-way (which no
// real network does) and the protocol they carry cannot be trusted. Clients
// dial again, as they would after a real loss.
func (p *Proxy) SetDrop(d Dir, drop bool) error {
	if !d.valid() {
		return fmt.Errorf("proxy %s: set drop: invalid direction %v", p.Addr(), d)
	}
	p.f.setDrop(d, drop)
	return nil
}

// SetLatency delays the bytes travelling in direction d by lat (0 for
// none). It applies to bytes read after the call.
func (p *Proxy) SetLatency(d Dir, lat time.Duration) error {
	if !d.valid() {
		return fmt.Errorf("proxy %s: set latency: invalid direction %v", p.Addr(), d)
	}
	if lat < 0 {
		return fmt.Errorf("proxy %s: set latency: negative latency %v", p.Addr(), lat)
	}
	p.f.setLatency(d, lat)
	return nil
}

// Stats returns the fault state and counters of the proxy.
func (p *Proxy) Stats() Stats { return p.f.stats() }

// Close stops listening, closes every connection and waits for every
// goroutine of the proxy. It is idempotent.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.cancel()
		if err := p.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			p.closeErr = fmt.Errorf("close proxy %s: %w", p.Addr(), err)
		}
		p.f.shutdown()
		p.wg.Wait()
	})
	return p.closeErr
}

func (p *Proxy) handle(conn net.Conn) {
	if !p.f.isUp() {
		p.f.rejected.Add(1)
		_ = conn.Close()
		return
	}
	d := net.Dialer{Timeout: dialTimeout}
	server, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		p.log.Debug("dial target failed", "error", err)
		_ = conn.Close()
		return
	}
	pr := newPair(conn, server)
	p.f.serve(&p.wg, pr, conn, server, Forward)
}

// acceptLoop accepts connections on ln until ctx ends or ln is closed,
// handing each to handle in a goroutine counted in wg.
func acceptLoop(ctx context.Context, ln net.Listener, log hclog.Logger, wg *sync.WaitGroup, handle func(net.Conn)) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			log.Warn("accept failed", "error", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(acceptBackoff):
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			handle(conn)
		}()
	}
}
