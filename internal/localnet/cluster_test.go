package localnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// TestCluster runs one three-region super-cluster (forming one takes
// seconds, see doc.go) through a sequence of scenarios; each leaves every
// link up.
func TestCluster(t *testing.T) {
	noGoroutineLeak(t)
	c := startCluster(t, "us", "eu", "ap")
	if err := checkOnlyIngress(c); err != nil {
		t.Fatalf("after start: %v", err)
	}
	steps := []struct {
		name string
		fn   func(*testing.T, *Cluster)
	}{
		{"core", testCore},
		{"cut-and-heal", testCutAndHeal},
		{"latency", testLinkLatency},
		{"one-way-drop", testOneWayDrop},
		{"jetstream", testJetStream},
		{"bad-arguments", testBadArguments},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { s.fn(t, c) }) {
			return
		}
	}
	if err := c.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	for _, r := range c.Regions() {
		if c.Server(r).Running() {
			t.Errorf("server %s still running after Close", r)
		}
	}
}

func TestSingleRegionIsStandalone(t *testing.T) {
	noGoroutineLeak(t)
	c := startCluster(t, "solo")
	if got := c.Links(); len(got) != 0 {
		t.Fatalf("Links() = %v, want none", got)
	}
	if c.Server("solo").JetStreamIsClustered() {
		t.Fatal("single region runs clustered JetStream")
	}
	js, err := jetstream.New(connect(t, c, "solo"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := c.SetLink("solo", "other", false); err == nil {
		t.Fatal("SetLink to an unknown region succeeded")
	}
}

func testCore(t *testing.T, c *Cluster) {
	us, eu := connect(t, c, "us"), connect(t, c, "eu")
	ch := make(chan *nats.Msg, 64)
	if _, err := eu.ChanSubscribe("core.x", ch); err != nil {
		t.Fatal(err)
	}
	// Interest crosses the gateway asynchronously.
	testkit.WaitFor(t, 5*time.Second, func() error { return delivered(us, "core.x", ch) })
	if got := c.ClientURL("us"); got != c.Server("us").ClientURL() {
		t.Errorf("ClientURL(us) = %q", got)
	}
	if c.ClientURL("mars") != "" || c.Server("mars") != nil {
		t.Error("unknown region has a URL or server")
	}
}

// path is a receiver of one (from, to) path: a subscription in to.
type path struct {
	from *nats.Conn
	subj string
	ch   chan *nats.Msg
}

func newPath(t *testing.T, from, to *nats.Conn, subj string) path {
	t.Helper()
	p := path{from: from, subj: subj, ch: make(chan *nats.Msg, 1024)}
	if _, err := to.ChanSubscribe(subj, p.ch); err != nil {
		t.Fatal(err)
	}
	if err := to.Flush(); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p path) works(t *testing.T) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, func() error { return delivered(p.from, p.subj, p.ch) })
}

func testCutAndHeal(t *testing.T, c *Cluster) {
	us, eu, ap := connect(t, c, "us"), connect(t, c, "eu"), connect(t, c, "ap")
	usToEU := newPath(t, us, eu, "cut.us.eu")
	usToAP := newPath(t, us, ap, "cut.us.ap")
	apToEU := newPath(t, ap, eu, "cut.ap.eu")
	for _, p := range []path{usToEU, usToAP, apToEU} {
		p.works(t)
	}
	sUS, sEU := c.Server("us"), c.Server("eu")
	rejectedBefore := linkState(t, c, "eu", "us").Rejected

	if err := c.SetLink("us", "eu", false); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, func() error {
		if n := sUS.NumOutboundGateways(); n != 1 {
			return fmt.Errorf("us has %d outbound gateways, want 1", n)
		}
		return noInboundAcrossCut(c)
	})

	// For a second, publish us -> eu while checking that neither server
	// ever accepts the other's gateway: no reconnection around the cut.
	sent := 0
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		if err := us.Publish(usToEU.subj, []byte("must not arrive")); err != nil {
			t.Fatal(err)
		}
		sent++
		if err := noInboundAcrossCut(c); err != nil {
			t.Fatalf("while cut: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // paces the publishing
	}
	if err := us.Flush(); err != nil {
		t.Fatal(err)
	}
	// The other links still carry traffic (this also gives any message
	// that leaked time to arrive).
	usToAP.works(t)
	apToEU.works(t)
	if n := countPayload(usToEU.ch, "must not arrive", 200*time.Millisecond); n > 0 {
		t.Fatalf("eu received %d of %d messages from us across the cut", n, sent)
	}
	// Both servers try to reconnect, through the ingress, and each
	// attempt is held unanswered: only the cut link us-eu can carry it.
	testkit.WaitFor(t, 5*time.Second, func() error {
		if n := c.Held(); n != 2 {
			return fmt.Errorf("%d reconnection attempts held, want 2", n)
		}
		return nil
	})
	if got := linkState(t, c, "eu", "us").Rejected; got != rejectedBefore {
		t.Errorf("%d reconnection attempts rejected by the cut link, want none: they are held", got-rejectedBefore)
	}
	if err := checkOnlyIngress(c); err != nil {
		t.Fatalf("while cut: %v", err)
	}
	if ls := linkState(t, c, "eu", "us"); ls.Up || ls.Conns != 0 {
		t.Fatalf("cut link state %+v", ls)
	}
	if _, ok := gatewayz(t, sEU).OutboundGateways["us"]; ok {
		// The dialer registers its outbound for an instant before the
		// ingress closes it (see doc.go); it must not persist.
		testkit.WaitFor(t, 2*time.Second, func() error {
			if _, ok := gatewayz(t, sEU).OutboundGateways["us"]; ok {
				return errors.New("eu keeps an outbound gateway to us across the cut")
			}
			return nil
		})
	}

	if err := c.SetLink("eu", "us", true); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	if n := c.Held(); n != 0 {
		t.Errorf("%d reconnection attempts still held after the heal", n)
	}
	usToEU.works(t)
	if err := checkOnlyIngress(c); err != nil {
		t.Fatalf("after heal: %v", err)
	}
	if ls := linkState(t, c, "eu", "us"); !ls.Up || ls.Conns != 2 || ls.BytesAB == 0 || ls.BytesBA == 0 {
		t.Fatalf("healed link state %+v", ls)
	}
}

func testLinkLatency(t *testing.T, c *Cluster) {
	us, eu := connect(t, c, "us"), connect(t, c, "eu")
	if _, err := eu.Subscribe("lat.svc", func(m *nats.Msg) { _ = m.Respond([]byte("pong")) }); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, func() error {
		_, err := us.Request("lat.svc", nil, 200*time.Millisecond)
		return err
	})
	const lat = 200 * time.Millisecond
	if err := c.SetLatency("us", "eu", lat); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := us.Request("lat.svc", nil, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < lat {
		t.Errorf("request us -> eu took %v with %v latency", d, lat)
	}
	ls := linkState(t, c, "eu", "us")
	if ls.LatencyBA != lat || ls.LatencyAB != 0 {
		t.Errorf("link state %+v, want latency us->eu (BA) only", ls)
	}
	if err := c.SetLatency("us", "eu", 0); err != nil {
		t.Fatal(err)
	}
}

func testBadArguments(t *testing.T, c *Cluster) {
	for _, tc := range [][2]string{{"us", "us"}, {"us", "mars"}, {"venus", "mars"}} {
		if err := c.SetLink(tc[0], tc[1], false); err == nil {
			t.Errorf("SetLink(%s, %s) succeeded", tc[0], tc[1])
		}
		if err := c.SetDrop(tc[0], tc[1], true); err == nil {
			t.Errorf("SetDrop(%s, %s) succeeded", tc[0], tc[1])
		}
	}
	if err := c.SetLatency("us", "eu", -time.Second); err == nil {
		t.Error("negative latency accepted")
	}
	links := c.Links()
	if len(links) != 3 || links[0].A != "ap" || links[0].B != "eu" || links[2].A != "eu" || links[2].B != "us" {
		t.Errorf("Links() = %+v, want ap-eu, ap-us, eu-us", links)
	}
}

// noInboundAcrossCut checks that neither us nor eu has registered a
// gateway from the other.
func noInboundAcrossCut(c *Cluster) error {
	for _, p := range [][2]string{{"us", "eu"}, {"eu", "us"}} {
		gz, err := c.Server(p[0]).Gatewayz(nil)
		if err != nil {
			return err
		}
		if len(gz.InboundGateways[p[1]]) > 0 {
			return fmt.Errorf("%s has an inbound gateway from %s", p[0], p[1])
		}
	}
	if ls := c.Links(); ls[2].Conns != 0 {
		return fmt.Errorf("cut link carries %d connections", ls[2].Conns)
	}
	return nil
}

// checkOnlyIngress checks that the only gateway address any server knows
// for a region, and the address of every outbound gateway connection, is
// that region's ingress: the real gateway ports never leaked.
func checkOnlyIngress(c *Cluster) error {
	for _, r := range c.regions {
		v, err := r.srv.Varz(nil)
		if err != nil {
			return err
		}
		if len(v.Gateway.Gateways) != len(c.regions)-1 {
			return fmt.Errorf("%s knows %d remote gateways", r.name, len(v.Gateway.Gateways))
		}
		for _, gw := range v.Gateway.Gateways {
			want := c.byName[gw.Name].ingress.Addr().String()
			if len(gw.URLs) != 1 || gw.URLs[0] != want {
				return fmt.Errorf("%s knows URLs %v for %s, want only its ingress %s", r.name, gw.URLs, gw.Name, want)
			}
		}
		gz, err := r.srv.Gatewayz(nil)
		if err != nil {
			return err
		}
		for name, out := range gz.OutboundGateways {
			ingress := c.byName[name].ingress.Addr().String()
			if out.Connection == nil || out.Connection.Port != portOf(ingress) {
				return fmt.Errorf("%s's outbound gateway to %s bypasses the ingress %s: %+v", r.name, name, ingress, out.Connection)
			}
		}
		if real := r.srv.GatewayAddr().Port; real == portOf(r.ingress.Addr().String()) {
			return fmt.Errorf("%s: ingress and real gateway share port %d", r.name, real)
		}
	}
	return nil
}

func linkState(t *testing.T, c *Cluster, a, b string) LinkState {
	t.Helper()
	for _, l := range c.Links() {
		if l.A == a && l.B == b {
			return l
		}
	}
	t.Fatalf("no link %s-%s", a, b)
	return LinkState{}
}

func gatewayz(t *testing.T, s *server.Server) *server.Gatewayz {
	t.Helper()
	gz, err := s.Gatewayz(nil)
	if err != nil {
		t.Fatal(err)
	}
	return gz
}

func TestStartReportsServerFailure(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := DefaultConfig()
	cfg.Regions = []string{"us", "eu"}
	cfg.Dir = t.TempDir()
	cfg.ClientPorts = map[string]int{"eu": portOf(busy.Addr().String())}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Start(ctx, cfg)
	if err == nil {
		c.Close()
		t.Fatal("Start succeeded with a client port in use")
	}
	t.Log(err)
	if !strings.Contains(err.Error(), "eu") {
		t.Errorf("error does not name the region: %v", err)
	}
}

func testOneWayDrop(t *testing.T, c *Cluster) {
	us, eu := connect(t, c, "us"), connect(t, c, "eu")
	usToEU := newPath(t, us, eu, "drop.us.eu")
	euToUS := newPath(t, eu, us, "drop.eu.us")
	usToEU.works(t)
	euToUS.works(t)

	if err := c.SetDrop("us", "eu", true); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		if err := us.Publish(usToEU.subj, []byte("lost")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // paces the publishing
	}
	euToUS.works(t)
	if n := countPayload(usToEU.ch, "lost", 100*time.Millisecond); n > 0 {
		t.Fatalf("eu received %d messages from us through a dropping link", n)
	}
	// us -> eu is direction BA of the link eu-us.
	if ls := linkState(t, c, "eu", "us"); !ls.DropBA || ls.DroppedBA == 0 || ls.DropAB || !ls.Up {
		t.Fatalf("link state %+v, want bytes dropped us->eu only", ls)
	}

	if err := c.SetDrop("us", "eu", false); err != nil {
		t.Fatal(err)
	}
	// The dropped bytes may have cut a protocol message in two, in which
	// case eu closes the connection and us reconnects.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	usToEU.works(t)
}
