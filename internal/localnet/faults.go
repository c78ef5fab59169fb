package localnet

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Dir is one direction of the traffic through a Proxy.
type Dir int

const (
	// Forward is the direction from the dialing client to the target.
	Forward Dir = iota
	// Backward is the direction from the target back to the client.
	Backward
)

func (d Dir) String() string {
	switch d {
	case Forward:
		return "forward"
	case Backward:
		return "backward"
	default:
		return fmt.Sprintf("Dir(%d)", int(d))
	}
}

func (d Dir) valid() bool { return d == Forward || d == Backward }

func (d Dir) reverse() Dir { return 1 - d }

// Stats is a snapshot of the fault state and counters of a Proxy. The
// arrays are indexed by Dir.
type Stats struct {
	Up       bool
	Drop     [2]bool
	Latency  [2]time.Duration
	Active   int      // connections being forwarded now
	Accepted int64    // connections forwarded since start
	Rejected int64    // connections closed at once because the proxy was down
	Bytes    [2]int64 // bytes delivered
	Dropped  [2]int64 // bytes discarded by a one-way drop
}

// readBufSize is the largest chunk read from one side at a time.
const readBufSize = 32 << 10

// queueLen bounds the chunks in flight per direction of a connection (the
// ones waiting out an added latency); a full queue pushes back on the reader.
const queueLen = 64

// faults is the fault state shared by every connection of a proxy or of a
// link between two regions, and the set of those connections so that going
// down closes them.
type faults struct {
	mu      sync.Mutex
	up      bool
	drop    [2]bool
	latency [2]time.Duration
	pairs   map[*pair]struct{}
	closed  bool // after shutdown no connection is registered

	accepted atomic.Int64
	rejected atomic.Int64
	bytes    [2]atomic.Int64
	dropped  [2]atomic.Int64
}

func newFaults() *faults {
	return &faults{up: true, pairs: make(map[*pair]struct{})}
}

// setUp brings the faults up or down. Going down closes every live
// connection, so both ends notice at once.
func (f *faults) setUp(up bool) {
	f.mu.Lock()
	f.up = up
	var victims []*pair
	if !up {
		for p := range f.pairs {
			victims = append(victims, p)
		}
	}
	f.mu.Unlock()
	for _, p := range victims {
		p.close()
	}
}

// setDrop starts or ends one-way loss. Ending it closes the link's live
// connections: the streams lost bytes mid-way, which no real network does
// (TCP delivers a stream whole or resets it), and NATS trusts TCP. After a
// real loss the connections time out and are dialed again; closing them
// here does the same at once.
func (f *faults) setDrop(d Dir, drop bool) {
	f.mu.Lock()
	lifted := f.drop[d] && !drop
	f.drop[d] = drop
	var victims []*pair
	if lifted {
		for p := range f.pairs {
			victims = append(victims, p)
		}
	}
	f.mu.Unlock()
	for _, p := range victims {
		p.close()
	}
}

func (f *faults) setLatency(d Dir, lat time.Duration) {
	f.mu.Lock()
	f.latency[d] = lat
	f.mu.Unlock()
}

// carries reports whether a live connection's client-to-server bytes
// travel in direction d: on a gateway link, whether the region at that
// direction's start has its outbound gateway across it.
func (f *faults) carries(d Dir) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for p := range f.pairs {
		if p.dir == d {
			return true
		}
	}
	return false
}

func (f *faults) isUp() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.up
}

// state is what happens to bytes read now in direction d.
func (f *faults) state(d Dir) (drop bool, lat time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.drop[d], f.latency[d]
}

func (f *faults) stats() Stats {
	f.mu.Lock()
	s := Stats{Up: f.up, Drop: f.drop, Latency: f.latency, Active: len(f.pairs)}
	f.mu.Unlock()
	s.Accepted = f.accepted.Load()
	s.Rejected = f.rejected.Load()
	for d := range 2 {
		s.Bytes[d] = f.bytes[d].Load()
		s.Dropped[d] = f.dropped[d].Load()
	}
	return s
}

// shutdown closes every live connection and refuses new ones for good.
func (f *faults) shutdown() {
	f.mu.Lock()
	f.closed = true
	victims := make([]*pair, 0, len(f.pairs))
	for p := range f.pairs {
		victims = append(victims, p)
	}
	f.mu.Unlock()
	for _, p := range victims {
		p.close()
	}
}

// register adds p to the live connections, unless the faults are down or
// shut down.
func (f *faults) register(p *pair) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	if !f.up {
		f.rejected.Add(1)
		return false
	}
	f.pairs[p] = struct{}{}
	f.accepted.Add(1)
	return true
}

func (f *faults) unregister(p *pair) {
	f.mu.Lock()
	delete(f.pairs, p)
	f.mu.Unlock()
}

// pair is one proxied connection: the accepted client side and the dialed
// server side. Closing either direction closes both.
type pair struct {
	client, server net.Conn
	dir            Dir // the direction client-to-server bytes travel in (serve)
	done           chan struct{}
	once           sync.Once
	onClose        func()
}

func newPair(client, server net.Conn) *pair {
	return &pair{client: client, server: server, done: make(chan struct{})}
}

func (p *pair) close() {
	p.once.Do(func() {
		close(p.done)
		_ = p.client.Close()
		_ = p.server.Close()
		if p.onClose != nil {
			p.onClose()
		}
	})
}

// serve forwards p under the faults f until either side fails or closes,
// or f goes down or is shut down. cr and sr read the client and server
// sides (they may be buffered readers holding bytes already read off the
// sockets); fwd is the direction of f that client-to-server bytes travel
// in. The four forwarding goroutines are counted in wg. It reports false,
// having closed p, if f was down.
func (f *faults) serve(wg *sync.WaitGroup, p *pair, cr, sr io.Reader, fwd Dir) bool {
	p.onClose = func() { f.unregister(p) }
	p.dir = fwd
	if !f.register(p) {
		p.close()
		return false
	}
	f.pump(wg, p, cr, p.server, fwd)
	f.pump(wg, p, sr, p.client, fwd.reverse())
	return true
}

type chunk struct {
	data []byte
	due  time.Time // zero: no added latency
}

// pump forwards src to dst in direction d with a reader and a writer
// goroutine joined by a bounded queue, so that an added latency delays
// every chunk by the same amount without limiting throughput.
func (f *faults) pump(wg *sync.WaitGroup, p *pair, src io.Reader, dst net.Conn, d Dir) {
	q := make(chan chunk, queueLen)
	wg.Add(2)
	go func() {
		defer wg.Done()
		f.read(p, src, q, d)
	}()
	go func() {
		defer wg.Done()
		f.write(p, dst, q, d)
	}()
}

func (f *faults) read(p *pair, src io.Reader, q chan<- chunk, d Dir) {
	defer close(q)
	buf := make([]byte, readBufSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			drop, lat := f.state(d)
			if drop {
				f.dropped[d].Add(int64(n))
			} else {
				c := chunk{data: bytes.Clone(buf[:n])}
				if lat > 0 {
					c.due = time.Now().Add(lat)
				}
				select {
				case q <- c:
				case <-p.done:
					return
				}
			}
		}
		if err != nil {
			// EOF or error: the writer flushes what is queued, then
			// closes the pair.
			return
		}
	}
}

func (f *faults) write(p *pair, dst net.Conn, q <-chan chunk, d Dir) {
	defer p.close()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var c chunk
		var ok bool
		select {
		case <-p.done:
			return
		case c, ok = <-q:
			if !ok {
				return
			}
		}
		if wait := time.Until(c.due); !c.due.IsZero() && wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-p.done:
				return
			}
		}
		n, err := dst.Write(c.data)
		f.bytes[d].Add(int64(n))
		if err != nil {
			return
		}
	}
}
