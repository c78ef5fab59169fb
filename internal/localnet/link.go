package localnet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"
)

// handshakeTimeout bounds the gateway handshake the ingress relays (INFO
// from the server, CONNECT from the dialer) before it knows which link the
// connection belongs to.
const handshakeTimeout = 5 * time.Second

// maxProtoLine bounds the INFO and CONNECT lines the ingress reads.
const maxProtoLine = 64 << 10

// LinkState is the state and counters of the link between regions A and B
// (A < B). AB fields concern the traffic from A to B, BA the reverse.
type LinkState struct {
	A, B string
	Up   bool

	DropAB, DropBA       bool
	LatencyAB, LatencyBA time.Duration

	Conns    int   // gateway connections carried now (normally 2: one outbound each way)
	Accepted int64 // gateway connections carried since start
	Rejected int64 // gateway connections refused because the link was down

	BytesAB, BytesBA     int64 // bytes delivered
	DroppedAB, DroppedBA int64 // bytes discarded by a one-way drop
}

// linkKey names the link between two regions, a < b.
type linkKey struct{ a, b string }

// keyOf returns the link from region from to region to, and the direction
// of that link the traffic from -> to travels in.
func keyOf(from, to string) (linkKey, Dir) {
	if from < to {
		return linkKey{from, to}, Forward
	}
	return linkKey{to, from}, Backward
}

// link returns the fault state of the link between two distinct regions
// and the direction from -> to within it.
func (c *Cluster) link(from, to string) (*faults, Dir, error) {
	if from == to {
		return nil, 0, fmt.Errorf("link %s-%s: a region has no link to itself", from, to)
	}
	var errs []error
	for _, r := range []string{from, to} {
		if c.byName[r] == nil {
			errs = append(errs, fmt.Errorf("unknown region %q", r))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, 0, fmt.Errorf("link %s-%s: %w", from, to, err)
	}
	k, d := keyOf(from, to)
	return c.links[k], d, nil
}

// SetLink cuts (up=false) or heals (up=true) the link between regions a and
// b, both directions. A cut closes the gateway connections of the link at
// once. A reconnection attempt is then held unanswered while every link it
// can belong to is cut, and goes through when one heals; one found to
// cross a cut link during its handshake is closed before the remote
// server hears of it (doc.go, "Making a cut airtight").
func (c *Cluster) SetLink(a, b string, up bool) error {
	f, _, err := c.link(a, b)
	if err != nil {
		return fmt.Errorf("set link: %w", err)
	}
	f.setUp(up)
	if up {
		c.linkMu.Lock()
		close(c.linkUp)
		c.linkUp = make(chan struct{})
		c.linkMu.Unlock()
	}
	c.log.Info("link changed", "a", a, "b", b, "up", up)
	return nil
}

// Held is how many gateway connections are held now, unanswered, because
// every link they can belong to is cut.
func (c *Cluster) Held() int { return int(c.held.Load()) }

// holdWhileCut keeps a connection accepted on dst's ingress unanswered
// while every link it can belong to is cut, and reports false if the
// cluster closed meanwhile. The dialer is a region whose outbound gateway
// into dst is not carried yet; which one is known only from its CONNECT,
// which it sends after the server's INFO, so the ingress waits before
// dialing the server at all. A nats-server waits for a gateway's INFO
// without a deadline (without TLS, as here), so the attempt stays open,
// like a dial into a partition, and completes as soon as the link heals:
// the gateway is back at once instead of after the server's fixed
// one-second wait between reconnection attempts.
func (c *Cluster) holdWhileCut(dst *region, client net.Conn) bool {
	c.linkMu.Lock()
	changed := c.linkUp
	c.linkMu.Unlock()
	if c.candidates(dst) != allCut {
		return true
	}
	c.held.Add(1)
	defer c.held.Add(-1)
	// The dialer sends nothing before the INFO: a read ends only when it
	// gives up (closes) or when the hold ends (the deadline below).
	gone := make(chan struct{})
	var n int
	go func() {
		defer close(gone)
		var b [1]byte
		n, _ = client.Read(b[:])
	}()
	release := func() bool {
		_ = client.SetReadDeadline(time.Now())
		<-gone
		return n == 0 && client.SetReadDeadline(time.Time{}) == nil
	}
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	for {
		select {
		case <-changed:
			c.linkMu.Lock()
			changed = c.linkUp
			c.linkMu.Unlock()
			switch c.candidates(dst) {
			case noneCut:
				return release()
			case someCut:
				// The attempt may come from a link still cut, which
				// would close it: give the other links a moment to
				// heal too (a region's links heal one call at a time).
				settle.Reset(holdSettle)
			}
		case <-settle.C:
			if c.candidates(dst) != allCut {
				return release()
			}
		case <-gone:
			return false
		case <-c.ctx.Done():
			release()
			return false
		}
	}
}

// holdSettle is how long a held gateway connection waits, once some but
// not all of the links it can belong to are up, for the rest to heal
// before it goes through anyway.
const holdSettle = 500 * time.Millisecond

// Whether the links a gateway connection into a region can belong to are
// cut (candidates).
const (
	noneCut = iota
	someCut
	allCut
)

// candidates reports whether the links to dst of the regions whose
// outbound gateway into dst is not carried now are cut: none, some or
// all. With no such region (a duplicate connection) it reports noneCut.
func (c *Cluster) candidates(dst *region) int {
	up, cut := 0, 0
	for _, r := range c.regions {
		if r == dst {
			continue
		}
		f, d, err := c.link(r.name, dst.name)
		if err != nil || f.carries(d) {
			continue
		}
		if f.isUp() {
			up++
		} else {
			cut++
		}
	}
	switch {
	case cut == 0:
		return noneCut
	case up == 0:
		return allCut
	default:
		return someCut
	}
}

// SetDrop makes the link discard (one-way loss) or forward the bytes
// travelling from region from to region to, leaving the connections open.
// The servers notice only through their pings (see Config.PingInterval).
// Discarding part of a gateway byte stream can leave a connection in a
// state no real network produces (a protocol message cut in two, interest
// updates lost), so lifting a drop closes the link's connections and the
// gateways dial again, as they would after a real loss. To model a clean
// partition use SetLink.
func (c *Cluster) SetDrop(from, to string, drop bool) error {
	f, d, err := c.link(from, to)
	if err != nil {
		return fmt.Errorf("set drop: %w", err)
	}
	f.setDrop(d, drop)
	return nil
}

// SetLatency delays the bytes travelling from region from to region to by
// lat (0 for none).
func (c *Cluster) SetLatency(from, to string, lat time.Duration) error {
	f, d, err := c.link(from, to)
	if err != nil {
		return fmt.Errorf("set latency: %w", err)
	}
	if lat < 0 {
		return fmt.Errorf("set latency %s->%s: negative latency %v", from, to, lat)
	}
	f.setLatency(d, lat)
	return nil
}

// Links returns the state of every link, sorted by (A, B).
func (c *Cluster) Links() []LinkState {
	out := make([]LinkState, 0, len(c.links))
	for k, f := range c.links {
		s := f.stats()
		out = append(out, LinkState{
			A: k.a, B: k.b, Up: s.Up,
			DropAB: s.Drop[Forward], DropBA: s.Drop[Backward],
			LatencyAB: s.Latency[Forward], LatencyBA: s.Latency[Backward],
			Conns: s.Active, Accepted: s.Accepted, Rejected: s.Rejected,
			BytesAB: s.Bytes[Forward], BytesBA: s.Bytes[Backward],
			DroppedAB: s.Dropped[Forward], DroppedBA: s.Dropped[Backward],
		})
	}
	slices.SortFunc(out, func(x, y LinkState) int {
		if n := strings.Compare(x.A, y.A); n != 0 {
			return n
		}
		return strings.Compare(x.B, y.B)
	})
	return out
}

// handleIngress serves one connection accepted on the ingress of region
// dst, the only gateway address the other regions know for dst. It relays
// the gateway handshake to learn which region dialed, then forwards the
// connection under the fault state of that link.
func (c *Cluster) handleIngress(dst *region, client net.Conn) {
	select {
	case <-dst.ready:
	case <-c.ctx.Done():
		_ = client.Close()
		return
	}
	if !c.holdWhileCut(dst, client) {
		_ = client.Close()
		return
	}
	d := net.Dialer{Timeout: dialTimeout}
	server, err := d.DialContext(c.ctx, "tcp", dst.gwAddr)
	if err != nil {
		c.log.Debug("ingress: dial gateway failed", "region", dst.name, "error", err)
		_ = client.Close()
		return
	}
	closeBoth := func() {
		_ = client.Close()
		_ = server.Close()
	}
	// Until the connection belongs to a link, closing it on shutdown is
	// the job of this goroutine.
	stop := context.AfterFunc(c.ctx, closeBoth)
	src, info, cr, sr, err := gatewayHandshake(client, server)
	stop()
	if err != nil {
		c.log.Debug("ingress: gateway handshake failed", "region", dst.name, "error", err)
		closeBoth()
		return
	}
	f, dir, err := c.link(src, dst.name)
	if err != nil {
		c.log.Warn("ingress: rejecting gateway connection", "region", dst.name, "error", err)
		closeBoth()
		return
	}
	if f.serve(&c.wg, newPair(client, server), cr, sr, dir) {
		// The INFO line went to the dialer before the link was known.
		f.bytes[dir.reverse()].Add(int64(info))
	}
}

// gatewayHandshake relays the first protocol line of a gateway connection
// in each direction: the accepting server's INFO to the dialer, then reads
// the dialer's CONNECT, which names its gateway (region). The CONNECT line
// is not forwarded: it is put back in front of the returned client reader,
// so nothing of the dialer reaches the server until the caller decides to
// forward. It returns the dialer's region, the size of the INFO relayed,
// and readers of both sides that hold the bytes already buffered.
func gatewayHandshake(client, server net.Conn) (src string, info int, cr, sr io.Reader, err error) {
	deadline := time.Now().Add(handshakeTimeout)
	if err := errors.Join(client.SetDeadline(deadline), server.SetDeadline(deadline)); err != nil {
		return "", 0, nil, nil, fmt.Errorf("set handshake deadline: %w", err)
	}
	sbuf := bufio.NewReaderSize(server, maxProtoLine)
	line, err := readProtoLine(sbuf, "INFO")
	if err != nil {
		return "", 0, nil, nil, fmt.Errorf("read server INFO: %w", err)
	}
	if _, err := client.Write(line); err != nil {
		return "", 0, nil, nil, fmt.Errorf("relay INFO: %w", err)
	}
	cbuf := bufio.NewReaderSize(client, maxProtoLine)
	connect, err := readProtoLine(cbuf, "CONNECT")
	if err != nil {
		return "", 0, nil, nil, fmt.Errorf("read dialer CONNECT: %w", err)
	}
	src, err = connectGateway(connect)
	if err != nil {
		return "", 0, nil, nil, err
	}
	if err := errors.Join(client.SetDeadline(time.Time{}), server.SetDeadline(time.Time{})); err != nil {
		return "", 0, nil, nil, fmt.Errorf("clear handshake deadline: %w", err)
	}
	return src, len(line), io.MultiReader(bytes.NewReader(connect), cbuf), sbuf, nil
}

// readProtoLine reads one CRLF-terminated protocol line and checks its
// operation name.
func readProtoLine(r *bufio.Reader, op string) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	line = bytes.Clone(line)
	got, _, _ := strings.Cut(strings.TrimSpace(string(line)), " ")
	if !strings.EqualFold(got, op) {
		return nil, fmt.Errorf("expected %s, got %.40q", op, line)
	}
	return line, nil
}

// connectGateway returns the gateway name of a CONNECT line.
func connectGateway(line []byte) (string, error) {
	_, arg, _ := strings.Cut(strings.TrimSpace(string(line)), " ")
	var connect struct {
		Gateway string `json:"gateway"`
	}
	if err := json.Unmarshal([]byte(arg), &connect); err != nil {
		return "", fmt.Errorf("parse CONNECT: %w", err)
	}
	if connect.Gateway == "" {
		return "", errors.New("CONNECT names no gateway: not a gateway connection")
	}
	return connect.Gateway, nil
}
