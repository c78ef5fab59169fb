package natsflush_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/internal/base/natsflush"
	"github.com/tally-dev/tally/internal/base/testkit"
)

// dropper is a TCP proxy in front of a real nats-server. Armed, it cuts
// the next client connection that sends a PING, without passing the
// chunk on: the connection drops while the client's flush waits for its
// PONG, as a busy machine's stalled link does.
type dropper struct {
	ln     net.Listener
	server string
	armed  atomic.Bool
	wg     sync.WaitGroup
}

func startDropper(t *testing.T, server string) *dropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &dropper{ln: ln, server: server}
	d.wg.Add(1)
	go d.accept()
	t.Cleanup(func() { ln.Close(); d.wg.Wait() })
	return d
}

func (d *dropper) accept() {
	defer d.wg.Done()
	for {
		c, err := d.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", d.server)
		if err != nil {
			c.Close()
			continue
		}
		d.wg.Add(2)
		go func() { defer d.wg.Done(); _, _ = io.Copy(c, s); c.Close() }()
		go func() { defer d.wg.Done(); d.forward(s, c) }()
	}
}

// forward copies the client's bytes to the server until the client goes
// or, armed, a chunk holds a PING: then it closes both sides.
func (d *dropper) forward(s, c net.Conn) {
	defer s.Close()
	defer c.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if bytes.Contains(buf[:n], []byte("PING\r\n")) && d.armed.CompareAndSwap(true, false) {
				return
			}
			if _, werr := s.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func TestFlushWaitsOutADrop(t *testing.T) {
	ns := testkit.StartNATS(t, false)
	d := startDropper(t, ns.Addr().String())
	reconnected := make(chan struct{}, 4)
	nc, err := nats.Connect("nats://"+d.ln.Addr().String(),
		nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond), nats.ReconnectJitter(0, 0),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	// The premise: a plain flush fails with "connection closed" when the
	// link drops while it waits, though the connection is not closed.
	d.armed.Store(true)
	if err := nc.Flush(); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("a flush across a drop: %v, want %v", err, nats.ErrConnectionClosed)
	}
	if nc.IsClosed() {
		t.Fatal("the connection closed for good; it should reconnect")
	}
	// Armed before the reconnect completed, the proxy would cut the
	// reconnect's own PING, not the flush's.
	select {
	case <-reconnected:
	case <-time.After(10 * time.Second):
		t.Fatal("no reconnect after the drop")
	}

	// A subscription whose flush meets a drop: Flush waits it out, and
	// the subscription (sent again on the reconnect) receives.
	got := make(chan string, 1)
	if _, err := nc.Subscribe("s", func(m *nats.Msg) { got <- string(m.Data) }); err != nil {
		t.Fatal(err)
	}
	d.armed.Store(true)
	if err := natsflush.Flush(nc); err != nil {
		t.Fatalf("Flush across a drop: %v", err)
	}
	if d.armed.Load() {
		t.Fatal("the link was not dropped during the flush: the test tested nothing")
	}
	pub, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Publish("s", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m != "hello" {
			t.Fatalf("got %q", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the subscription flushed across the drop receives nothing")
	}
}

func TestFlushOfAClosedConnectionFails(t *testing.T) {
	ns := testkit.StartNATS(t, false)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	if err := natsflush.Flush(nc); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("Flush of a closed connection: %v", err)
	}
}
