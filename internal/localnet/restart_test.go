package localnet

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// A region's server stops and starts again on the same ports: its clients
// reconnect to the URL they had, and messages cross the gateways again.
func TestStopAndStartServer(t *testing.T) {
	c := startCluster(t, "us", "eu", "ap")
	url := c.ClientURL("us")
	pub, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub := connect(t, c, "eu")
	ch := make(chan *nats.Msg, 64)
	if _, err := sub.ChanSubscribe("restart.test", ch); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, func() error { return delivered(pub, "restart.test", ch) })

	if err := c.StopServer("us"); err != nil {
		t.Fatal(err)
	}
	if err := c.StopServer("us"); err == nil {
		t.Fatal("stopping a stopped server succeeded")
	}
	testkit.WaitFor(t, 5*time.Second, func() error {
		if pub.IsConnected() {
			return errNotYet("client still connected to the stopped server")
		}
		return nil
	})

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.StartServer(ctx, "us"); err != nil {
		t.Fatal(err)
	}
	if err := c.StartServer(ctx, "us"); err == nil {
		t.Fatal("starting a running server succeeded")
	}
	if got := c.ClientURL("us"); got != url {
		t.Fatalf("client URL changed from %s to %s", url, got)
	}
	testkit.WaitFor(t, 10*time.Second, func() error { return delivered(pub, "restart.test", ch) })

	// Links still apply to the new server.
	if err := c.SetLink("us", "eu", false); err != nil {
		t.Fatal(err)
	}
	payload := []byte("after-cut")
	if err := pub.Publish("restart.test", payload); err != nil {
		t.Fatal(err)
	}
	if n := countPayload(ch, string(payload), 300*time.Millisecond); n != 0 {
		t.Fatalf("%d messages crossed a cut link", n)
	}
	if err := c.SetLink("us", "eu", true); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, func() error { return delivered(pub, "restart.test", ch) })

	if err := c.StopServer("nowhere"); err == nil {
		t.Fatal("stopping an unknown region succeeded")
	}
}

type errNotYet string

func (e errNotYet) Error() string { return string(e) }
