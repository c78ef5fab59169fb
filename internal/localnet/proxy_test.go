package localnet

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// target is a TCP server for proxy tests that hands every accepted
// connection to the test.
type target struct {
	ln    net.Listener
	conns chan net.Conn
	wg    sync.WaitGroup
}

func newTarget(t *testing.T) *target {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tg := &target{ln: ln, conns: make(chan net.Conn, 16)}
	tg.wg.Add(1)
	go func() {
		defer tg.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tg.conns <- c
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		tg.wg.Wait()
		close(tg.conns)
		for c := range tg.conns {
			_ = c.Close()
		}
	})
	return tg
}

// accept returns the next connection the target accepted.
func (tg *target) accept(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-tg.conns:
		t.Cleanup(func() { _ = c.Close() })
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("target accepted no connection")
		return nil
	}
}

func newTestProxy(t *testing.T, tg *target) *Proxy {
	t.Helper()
	p, err := NewProxy("127.0.0.1:0", tg.ln.Addr().String(), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close proxy: %v", err)
		}
	})
	return p
}

// dial connects to the proxy and returns the client and target ends.
func dial(t *testing.T, p *Proxy, tg *target) (client, server net.Conn) {
	t.Helper()
	client, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client, tg.accept(t)
}

func send(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := c.Write([]byte(s)); err != nil {
		t.Fatalf("write %q: %v", s, err)
	}
}

func expect(t *testing.T, c net.Conn, want string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("read %q: %v", want, err)
	}
	if string(buf) != want {
		t.Fatalf("read %q, want %q", buf, want)
	}
}

// expectNothing checks that nothing arrives on c within d.
func expectNothing(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if n > 0 {
		t.Fatalf("read %q, want nothing", buf[:n])
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read: %v, want a timeout", err)
	}
}

// expectClosed checks that c is closed by the peer promptly.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := c.Read(make([]byte, 1))
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read: %v, want the connection closed", err)
	}
}

func TestProxyForwardsBothWays(t *testing.T) {
	noGoroutineLeak(t)
	tg := newTarget(t)
	p := newTestProxy(t, tg)
	client, server := dial(t, p, tg)

	send(t, client, "hello")
	expect(t, server, "hello")
	send(t, server, "world!")
	expect(t, client, "world!")

	testkit.WaitFor(t, 2*time.Second, func() error {
		s := p.Stats()
		if s.Bytes[Forward] != 5 || s.Bytes[Backward] != 6 || s.Active != 1 || s.Accepted != 1 {
			return errors.New("unexpected stats")
		}
		return nil
	})
	if got := p.Target(); got != tg.ln.Addr().String() {
		t.Errorf("Target() = %q", got)
	}
}

func TestProxyDownClosesAndRejects(t *testing.T) {
	noGoroutineLeak(t)
	tg := newTarget(t)
	p := newTestProxy(t, tg)
	client, server := dial(t, p, tg)
	send(t, client, "a")
	expect(t, server, "a")

	p.SetUp(false)
	if p.Up() {
		t.Fatal("Up() after SetUp(false)")
	}
	expectClosed(t, client)
	expectClosed(t, server)

	// While down a new connection is accepted and closed at once, and
	// never reaches the target.
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	expectClosed(t, c2)
	select {
	case c := <-tg.conns:
		c.Close()
		t.Fatal("target reached while the proxy is down")
	default:
	}
	if s := p.Stats(); s.Rejected < 1 || s.Active != 0 {
		t.Fatalf("stats %+v, want a rejection and no active connection", s)
	}

	p.SetUp(true)
	client, server = dial(t, p, tg)
	send(t, client, "b")
	expect(t, server, "b")
}

func TestProxyOneWayDrop(t *testing.T) {
	noGoroutineLeak(t)
	tg := newTarget(t)
	p := newTestProxy(t, tg)
	client, server := dial(t, p, tg)

	if err := p.SetDrop(Forward, true); err != nil {
		t.Fatal(err)
	}
	send(t, client, "lost")
	// The other direction still flows, and the connection stays open.
	send(t, server, "back")
	expect(t, client, "back")
	expectNothing(t, server, 200*time.Millisecond)
	if s := p.Stats(); s.Dropped[Forward] != 4 || s.Dropped[Backward] != 0 || !s.Drop[Forward] {
		t.Fatalf("stats %+v, want 4 bytes dropped forward", s)
	}

	// Lifting the drop ends the damaged connection, as a real loss would;
	// a new one carries bytes again.
	if err := p.SetDrop(Forward, false); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := client.Read(buf); err == nil {
		t.Fatal("the connection that lost bytes is still open after the drop was lifted")
	}
	client, server = dial(t, p, tg)
	send(t, client, "kept")
	expect(t, server, "kept")
}

func TestProxyLatency(t *testing.T) {
	noGoroutineLeak(t)
	tg := newTarget(t)
	p := newTestProxy(t, tg)
	client, server := dial(t, p, tg)

	const lat = 150 * time.Millisecond
	if err := p.SetLatency(Backward, lat); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	send(t, server, "slow")
	send(t, client, "fast")
	expect(t, server, "fast")
	if d := time.Since(start); d >= lat {
		t.Errorf("forward direction delayed %v, want no latency", d)
	}
	expect(t, client, "slow")
	if d := time.Since(start); d < lat {
		t.Errorf("backward direction took %v, want at least %v", d, lat)
	}
	if s := p.Stats(); s.Latency[Backward] != lat {
		t.Errorf("stats latency %v", s.Latency)
	}
}

func TestProxyCloseIsIdempotentAndStopsEverything(t *testing.T) {
	noGoroutineLeak(t)
	tg := newTarget(t)
	p, err := NewProxy("127.0.0.1:0", tg.ln.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var clients []net.Conn
	for range 3 {
		c, s := dial(t, p, tg)
		send(t, c, "x")
		expect(t, s, "x")
		clients = append(clients, c)
	}
	// A latency keeps bytes queued inside the proxy while it closes.
	if err := p.SetLatency(Forward, time.Hour); err != nil {
		t.Fatal(err)
	}
	send(t, clients[0], "queued")

	if err := p.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	for _, c := range clients {
		expectClosed(t, c)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Error("proxy still accepts after Close")
	}
}

func TestProxyInvalidArguments(t *testing.T) {
	if _, err := NewProxy("127.0.0.1:0", "no-port", nil); err == nil || !strings.Contains(err.Error(), "no-port") {
		t.Errorf("NewProxy with a bad target: %v", err)
	}
	if _, err := NewProxy("256.0.0.1:0", "127.0.0.1:1", nil); err == nil || !strings.Contains(err.Error(), "listen proxy") {
		t.Errorf("NewProxy with a bad listen address: %v", err)
	}
	tg := newTarget(t)
	p := newTestProxy(t, tg)
	if err := p.SetDrop(Dir(7), true); err == nil {
		t.Error("SetDrop accepted an invalid direction")
	}
	if err := p.SetLatency(Forward, -time.Second); err == nil {
		t.Error("SetLatency accepted a negative latency")
	}
	if Forward.String() != "forward" || Backward.String() != "backward" {
		t.Error("Dir.String")
	}
}
