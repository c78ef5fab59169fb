package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/alloc"
	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/internal/base/testkit"
	tallynode "github.com/tally-dev/tally/node"
)

// The secrets every test server and replica shares.
const (
	testPassword   = "s3cret-for-tests"
	testWriteToken = "w-for-tests"
)

// tokenEnv is an environment with the write and admin tokens the shipped
// region configs require (their listener is public).
func tokenEnv(k string) string {
	switch k {
	case envWriteToken:
		return testWriteToken
	case envAdminToken:
		return "a-for-tests"
	}
	return ""
}

// natsEnv is the environment configs/nats/*.conf reads (see its header),
// for one server whose route port is routePort.
func natsEnv(region string, routePort int, certs testCerts) map[string]string {
	route := fmt.Sprintf("nats-route://route:%s@127.0.0.1:%d", testPassword, routePort)
	env := map[string]string{
		"NATS_SERVER_NAME": region + "-a",
		"NATS_TLS_CERT":    certs.cert, "NATS_TLS_KEY": certs.key, "NATS_TLS_CA": certs.ca,
		"NATS_ROUTE_PASSWORD": testPassword, "NATS_GATEWAY_PASSWORD": testPassword, "NATS_SYS_PASSWORD": testPassword,
		"NATS_ROUTE_A": route, "NATS_ROUTE_B": route, "NATS_ROUTE_C": route,
	}
	for _, r := range []string{"US", "EU", "AP"} {
		env["TALLY_"+r+"_1_NATS_PASSWORD"] = testPassword
	}
	env["TALLY_APPS_NATS_PASSWORD"] = testPassword
	env["TALLY_AUTHORITY_NATS_PASSWORD"] = testPassword
	env["TALLY_ADMIN_NATS_PASSWORD"] = testPassword
	return env
}

// TestConfigFilesParse parses every shipped config: the NATS files with
// nats-server's own parser, the tallyd files with tallyd's loader.
func TestConfigFilesParse(t *testing.T) {
	confs, _ := filepath.Glob(filepath.Join("..", "..", "configs", "nats", "*.conf"))
	hcls, _ := filepath.Glob(filepath.Join("..", "..", "configs", "*.hcl"))
	if len(confs) < 3 || len(hcls) < 4 {
		t.Fatalf("found %d .conf and %d .hcl files", len(confs), len(hcls))
	}
	certs := makeCerts(t)
	for _, f := range confs {
		region := strings.TrimSuffix(filepath.Base(f), ".conf")
		for k, v := range natsEnv(region, 6222, certs) {
			t.Setenv(k, v)
		}
		opts, err := server.ProcessConfigFile(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if opts.Cluster.Name != region || opts.Gateway.Name != region || opts.HTTPHost != "127.0.0.1" ||
			opts.Cluster.Username == "" || opts.Gateway.Username == "" || opts.TLSConfig == nil ||
			opts.Cluster.TLSConfig == nil || opts.Gateway.TLSConfig == nil {
			t.Fatalf("%s: want cluster and gateway %q with authorization and TLS, client TLS, monitoring on loopback: %+v", f, region, opts)
		}
	}
	for _, f := range hcls {
		args := []string{"--config", f}
		if _, err := loadConfig(args, tokenEnv, io.Discard); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
}

// errPortTaken: a NATS server could not listen on a port picked for it.
var errPortTaken = errors.New("a picked port was taken before the server listened")

// startRegionServers starts one NATS server per region on the shipped
// configs with local ports, generated certificates and test passwords.
// On errPortTaken the servers it started are shut down.
func startRegionServers(t *testing.T, regions []string, certs testCerts) (map[string][4]int, map[string]*server.Server, error) {
	t.Helper()
	ports := map[string][4]int{}
	for _, r := range regions {
		ports[r] = [4]int{freePort(t), freePort(t), freePort(t), freePort(t)}
	}
	servers := map[string]*server.Server{}
	for _, r := range regions {
		src, err := os.ReadFile(filepath.Join("..", "..", "configs", "nats", r+".conf"))
		if err != nil {
			return nil, nil, err
		}
		p := ports[r]
		conf := strings.NewReplacer(
			"0.0.0.0:4222", fmt.Sprintf("127.0.0.1:%d", p[0]),
			"0.0.0.0:6222", fmt.Sprintf("127.0.0.1:%d", p[1]),
			"0.0.0.0:7222", fmt.Sprintf("127.0.0.1:%d", p[2]),
			"127.0.0.1:8222", fmt.Sprintf("127.0.0.1:%d", p[3]),
			"/var/lib/nats/jetstream", filepath.Join(t.TempDir(), "js"),
		).Replace(string(src))
		conf = regexp.MustCompile(`nats://nats-[abc]\.(\w+)\.tally\.internal:7222`).ReplaceAllStringFunc(conf, func(u string) string {
			return fmt.Sprintf("nats://127.0.0.1:%d", ports[strings.Split(u, ".")[1]][2])
		})
		path := filepath.Join(t.TempDir(), r+".conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			return nil, nil, err
		}
		for k, v := range natsEnv(r, p[1], certs) {
			t.Setenv(k, v)
		}
		opts, err := server.ProcessConfigFile(path)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", r, err)
		}
		opts.NoSigs = true
		s, err := tryServer(opts)
		if err != nil {
			for _, s := range servers {
				s.Shutdown()
				s.WaitForShutdown()
			}
			return nil, nil, fmt.Errorf("region %s: %w", r, err)
		}
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		servers[r] = s
	}
	return ports, servers, nil
}

// TestNATSConfigs runs tally on the shipped NATS and tallyd configs, one
// server per region, with local ports, generated certificates and test
// passwords: replication and milestones work, a server without the
// certificates and password cannot join as a route or a gateway, and one
// replica's user cannot publish as another or touch the streams.
func TestNATSConfigs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three NATS servers and three replicas")
	}
	certs := makeCerts(t)
	regions := []string{"us", "eu", "ap"}
	// Free ports are picked before the servers listen on them; in between,
	// another test's outgoing connection may take one as its local port.
	// Then a server cannot listen: start again on other ports.
	var ports map[string][4]int // client, route, gateway, monitoring
	var servers map[string]*server.Server
	for attempt := 1; ; attempt++ {
		var err error
		ports, servers, err = startRegionServers(t, regions, certs)
		if err == nil {
			break
		}
		if !errors.Is(err, errPortTaken) || attempt == 3 {
			t.Fatal(err)
		}
		t.Logf("attempt %d: %v; again on other ports", attempt, err)
	}
	testkit.WaitFor(t, 30*time.Second, func() error {
		for r, s := range servers {
			if n := s.NumOutboundGateways(); n != 2 {
				return fmt.Errorf("%s has %d outbound gateways", r, n)
			}
		}
		return nil
	})

	// The lease authority, in the region of the allocator's bucket.
	auth, err := tallynode.StartAuthority(tallynode.AuthorityConfig{
		NATS: servers["us"].ClientURL(), NATSUser: tallynode.AuthorityUser, NATSPassword: testPassword, NATSCA: certs.ca,
		AllocCluster: "us", AllocReplicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(auth.Close)

	// tallyd serve on configs/<region>-1.hcl, pointed at the test servers.
	clients := map[string]*client.Client{}
	for _, r := range regions {
		addr := make(chan net.Addr, 1)
		c := &cli{stdout: io.Discard, stderr: io.Discard, onListen: func(a net.Addr) { addr <- a },
			getenv: func(k string) string {
				if k == envNATSPass {
					return testPassword
				}
				return tokenEnv(k)
			}}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- c.serve(ctx, []string{"--config", filepath.Join("..", "..", "configs", r+"-1.hcl"),
				"--listen", "127.0.0.1:0", "--data", filepath.Join(t.TempDir(), r),
				"--nats", servers[r].ClientURL(), "--nats-ca", certs.ca,
				"--tls-cert", certs.cert, "--tls-key", certs.key, "--drain-delay", "0",
				"--alloc-replicas", "1", "--milestones", "10", "--log-level", "warn"})
		}()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve %s: %v", r, err)
			}
		})
		select {
		case a := <-addr:
			cl, err := client.New(client.Config{BaseURL: "https://" + a.String(), Token: testWriteToken, HTTP: certs.kit.Client(t, false)})
			if err != nil {
				t.Fatal(err)
			}
			clients[r] = cl
		case err := <-done:
			t.Fatalf("serve %s: %v", r, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("serve %s did not listen", r)
		}
	}
	ctx := context.Background()
	for _, r := range regions {
		testkit.WaitFor(t, 60*time.Second, func() error { return clients[r].Ready(ctx) })
	}

	// Replication: likes in every region, counted everywhere.
	for i, r := range regions {
		if _, err := clients[r].Like(ctx, "post", fmt.Sprintf("u%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range regions {
		testkit.WaitFor(t, 20*time.Second, func() error {
			l, err := clients[r].Likes(ctx, "post")
			if err == nil && l.Count != 3 {
				err = fmt.Errorf("%s counts %d", r, l.Count)
			}
			return err
		})
	}
	// The event log: each replica's events reach its region's stream.
	for _, r := range regions {
		testkit.WaitFor(t, 20*time.Second, func() error {
			st, err := clients[r].Status(ctx)
			if err != nil {
				return err
			}
			ev := st.Events
			if ev == nil || ev.Published != ev.Logged || ev.Logged == 0 || ev.Error != "" {
				return fmt.Errorf("%s: events %+v", r, ev)
			}
			return nil
		})
	}
	// Milestones: the 10th like fires, seen in every region. (Likes go on
	// until it does: a number may sit in a lease's unused tail.)
	next := 3
	testkit.WaitFor(t, 60*time.Second, func() error {
		for _, r := range regions {
			m, err := clients[r].Milestones(ctx, 10)
			if err != nil {
				return err
			}
			if len(m.Milestones) == 0 || m.Milestones[0].Number != 10 {
				next++
				_, _ = clients[regions[next%3]].Like(ctx, "post", fmt.Sprintf("u%d", next))
				return fmt.Errorf("%s has milestones %+v", r, m.Milestones)
			}
		}
		return nil
	})

	// Strangers: a server without the certificates and password, posing
	// as the eu gateway and as a route of us, never links up.
	rogueGW := startServer(t, &server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
		Gateway: server.GatewayOpts{Name: "eu", Host: "127.0.0.1", Port: -1, Gateways: []*server.RemoteGatewayOpts{
			{Name: "us", URLs: []*url.URL{mustURL(t, fmt.Sprintf("nats://gateway:%s@127.0.0.1:%d", testPassword, ports["us"][2]))}}}}})
	rogueRoute := startServer(t, &server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
		Cluster: server.ClusterOpts{Name: "us", Host: "127.0.0.1", Port: -1},
		Routes:  []*url.URL{mustURL(t, fmt.Sprintf("nats-route://route:%s@127.0.0.1:%d", testPassword, ports["us"][1]))}})
	time.Sleep(3 * time.Second)
	if n := rogueGW.NumOutboundGateways(); n != 0 {
		t.Errorf("a gateway without certificates linked up (%d links)", n)
	}
	if n := rogueRoute.NumRoutes(); n != 0 {
		t.Errorf("a route without certificates linked up (%d routes)", n)
	}
	if n := servers["us"].NumRoutes(); n != 0 {
		t.Errorf("us accepted %d routes", n)
	}
	anon, err := nats.Connect(servers["us"].ClientURL(), nats.RootCAs(certs.ca))
	if err == nil {
		anon.Close()
		t.Error("a client without a user connected")
	}

	// One replica's user: not another replica's subjects, not the streams.
	violations := make(chan error, 16)
	nc, err := nats.Connect(servers["us"].ClientURL(), nats.RootCAs(certs.ca), nats.UserInfo("tally-us-1", testPassword),
		nats.CustomInboxPrefix("_INBOX_us-1"), // the only replies it may read
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, subject := range []string{"tally.delta.eu.eu-1", "tally.delta.us.us-2", "tally.delta.us.us-2.7", "tally.id.eu-1", "tally.events.eu.eu-1"} {
		if err := nc.Publish(subject, []byte("x")); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-violations:
			if !strings.Contains(err.Error(), "Permissions Violation") {
				t.Fatalf("publish %s: %v", subject, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("tally-us-1 published on %s without a permissions violation", subject)
		}
	}
	if _, err := nc.SubscribeSync("tally.ae.eu-1.page"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-violations:
		if !strings.Contains(err.Error(), "Permissions Violation") {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("tally-us-1 subscribed to eu-1's anti-entropy requests")
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	d := shipped{servers: servers, clients: clients, certs: certs, us1: nc, violations: violations}
	stream, err := js.Stream(ctx, "KV_tally_alloc")
	if err != nil {
		t.Fatalf("the allocator's stream: %v", err)
	}
	for what, f := range map[string]func(context.Context) error{
		"deleted the allocator's stream": func(c context.Context) error { return js.DeleteStream(c, "KV_tally_alloc") },
		"deleted the milestone stream":   func(c context.Context) error { return js.DeleteStream(c, "TALLY_MILESTONES") },
		"purged the allocator's stream":  func(c context.Context) error { return stream.Purge(c) },
	} {
		for len(violations) > 0 {
			<-violations
		}
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		v, err := d.violation(c, f)
		cancel()
		if err == nil {
			t.Fatalf("tally-us-1 %s", what)
		}
		if v == nil {
			t.Fatalf("no permissions violation when tally-us-1 %s: %v", what, err)
		}
		if !strings.Contains(v.Error(), "Permissions Violation") {
			t.Fatalf("tally-us-1 %s: %v", what, v)
		}
	}
	if _, err := js.Stream(ctx, "KV_tally_alloc"); err != nil {
		t.Fatalf("the allocator's stream after the attempts: %v", err)
	}
	attackShipped(t, d)
}

// shipped is a running deployment of the shipped configs, and us-1's own
// NATS connection, whose permission violations arrive on violations.
type shipped struct {
	servers    map[string]*server.Server
	clients    map[string]*client.Client
	certs      testCerts
	us1        *nats.Conn
	violations chan error
}

// denied runs an attack with us-1's credentials and wants it to fail with
// a permissions violation (issue #27, item 2). A refused request is never
// answered, so the attack would only end at its deadline: once the
// violation has arrived it is cancelled instead (attack runs on its own
// goroutine, which denied waits for).
func (d shipped) denied(t *testing.T, what string, attack func(context.Context) error) {
	t.Helper()
	for len(d.violations) > 0 {
		<-d.violations
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	v, err := d.violation(ctx, attack)
	switch {
	case v == nil:
		t.Errorf("tally-us-1 %s: no permissions violation (the attack returned %v)", what, err)
	case !strings.Contains(v.Error(), "Permissions Violation"):
		t.Errorf("tally-us-1 %s: %v", what, v)
	}
}

// violation runs attack with ctx and returns the first error the server
// reports to us-1 (nil if none within 5s of the attack's end) and what
// attack returned. Once an error arrives ctx's attack is cancelled; it
// returns only after attack has, and after a round trip to the server, so
// that a later report of this attack is in d.violations already (a caller
// drains it before its next attack).
func (d shipped) violation(ctx context.Context, attack func(context.Context) error) (v, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- attack(ctx) }()
	defer func() { _ = d.us1.Flush() }()
	select {
	case v = <-d.violations:
		cancel()
		return v, <-done
	case err = <-done:
	}
	select {
	case v = <-d.violations:
	case <-time.After(5 * time.Second):
	}
	return v, err
}

// connect is a NATS connection as user.
func (d shipped) connect(t *testing.T, region, user string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(d.servers[region].ClientURL(), append([]nats.Option{nats.RootCAs(d.certs.ca), nats.UserInfo(user, testPassword)}, opts...)...)
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// attackShipped: what a region's credentials may not do, each attack of
// issue #27 item 2 against the shipped configs.
func attackShipped(t *testing.T, d shipped) {
	ctx := context.Background()
	js, err := jetstream.New(d.us1)
	if err != nil {
		t.Fatal(err)
	}
	// Reconfiguring a stream: the event stream's publisher stays stuck on
	// a sealed stream or one that keeps a single message.
	events, err := js.Stream(ctx, "TALLY_EVENTS_US")
	if err != nil {
		t.Fatalf("us-1's event stream: %v", err)
	}
	for what, mutate := range map[string]func(*jetstream.StreamConfig){
		"limited its event stream to one message": func(c *jetstream.StreamConfig) { c.MaxMsgs = 1 },
		"sealed its event stream":                 func(c *jetstream.StreamConfig) { c.Sealed = true },
	} {
		cfg := events.CachedInfo().Config
		mutate(&cfg)
		d.denied(t, what, func(c context.Context) error { _, err := js.UpdateStream(c, cfg); return err })
		cfg = events.CachedInfo().Config
		mutate(&cfg)
		c, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := js.CreateStream(c, cfg) // allowed subject: must not change an existing stream
		cancel()
		if err == nil {
			t.Errorf("tally-us-1 %s by creating it again", what)
		}
	}
	if info, err := events.Info(ctx); err != nil || info.Config.Sealed || info.Config.MaxMsgs > 0 {
		t.Fatalf("the event stream after the attempts: %+v, %v", info, err)
	}

	// Other clients' replies: nothing answered on
	// another client's inbox is seen by us-1.
	d.denied(t, "subscribed to every client's replies", func(context.Context) error {
		_, err := d.us1.SubscribeSync("_INBOX.>")
		if err == nil {
			err = d.us1.Flush()
		}
		return err
	})

	// The allocator's bucket: us-1 may not write it, nor publish a
	// milestone, except through the lease authority.
	kv, err := js.KeyValue(ctx, "tally_alloc")
	if err != nil {
		t.Fatalf("the allocator's bucket: %v", err)
	}
	entry, err := kv.Get(ctx, "seq.likes")
	if err != nil {
		t.Fatal(err)
	}
	st, err := alloc.DecodeState(entry.Value())
	if err != nil {
		t.Fatal(err)
	}
	forged := st.Clone()
	forged.Dense.Rank = forged.Dense.Pos - 1 + 985 // milestone 1000 after 15 likes
	forged.Dense.Pos += 985
	forged.HWM += 985
	d.denied(t, "wrote a forged dense rank", func(c context.Context) error { _, err := kv.Put(c, "seq.likes", forged.Encode()); return err })
	d.denied(t, "deleted a sequence", func(c context.Context) error { return kv.Delete(c, "seq.searches") })
	d.denied(t, "purged a sequence", func(c context.Context) error { return kv.Purge(c, "seq.searches") })
	d.denied(t, "wrote a 900 KiB junk key", func(c context.Context) error {
		_, err := kv.Put(c, "junk", make([]byte, 900<<10))
		return err
	})
	fake := []byte(`{"sequence":"likes","number":1000000,"item":"post","user":"mallory","region":"us","replica":"us-1","time":"2026-01-01T00:00:00Z"}`)
	d.denied(t, "published a forged milestone", func(c context.Context) error {
		_, err := js.Publish(c, "tally.milestone.likes.1000000", fake)
		return err
	})
	d.denied(t, "wrote through the authority as eu-1", func(c context.Context) error {
		_, err := (&alloc.RemoteKV{NC: d.us1, Bucket: kv, Replica: "eu-1"}).Update(c, "seq.likes", forged.Encode(), entry.Revision())
		return err
	})
	// Through the authority, as itself: refused, never stored.
	remote := &alloc.RemoteKV{NC: d.us1, Bucket: kv, Replica: "us-1"}
	for what, write := range map[string]func(context.Context) error{
		"a forged dense rank": func(c context.Context) error {
			for {
				e, err := kv.Get(c, "seq.likes")
				if err != nil {
					return err
				}
				f, _ := alloc.DecodeState(e.Value())
				f.Dense.Rank = f.Dense.Pos - 1 // every number below counted as used
				f.Dense.Pos, f.HWM = f.Dense.Pos+985, f.HWM+985
				f.Dense.Rank += 985
				_, err = remote.Update(c, "seq.likes", f.Encode(), e.Revision())
				if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
					return err
				}
			}
		},
		"a claim of milestone 1000000": func(c context.Context) error {
			_, err := remote.Update(c, "ms.likes.1000000", fake, 0)
			return err
		},
		"a 600 KiB junk key": func(c context.Context) error { // 900 KiB exceed NATS's max_payload as JSON
			_, err := remote.Update(c, "junk", make([]byte, 600<<10), 0)
			return err
		},
		"a deleted sequence": func(c context.Context) error {
			_, err := remote.Update(c, "seq.searches", nil, 0)
			return err
		},
	} {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := write(c)
		cancel()
		if !errors.Is(err, alloc.ErrRefused) {
			t.Errorf("us-1 wrote %s through the lease authority: %v", what, err)
		}
	}
	if _, err := kv.Get(ctx, "ms.likes.1000000"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("a forged claim is in the bucket: %v", err)
	}
	for r, cl := range d.clients {
		m, err := cl.Milestones(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range m.Milestones {
			if ev.Number == 1000000 || ev.User == "mallory" {
				t.Errorf("%s lists a forged milestone %+v", r, ev)
			}
		}
	}
	if e, err := kv.Get(ctx, "seq.likes"); err != nil {
		t.Fatal(err)
	} else if st, err := alloc.DecodeState(e.Value()); err != nil || st.Dense.Rank > 100 {
		t.Errorf("the likes sequence after the attempts: %+v, %v", st, err)
	}

	// An application's durable consumer on the milestone stream: us-1 may
	// not read, acknowledge, take over or delete it.
	apps := d.connect(t, "us", "tally-apps")
	ajs, err := jetstream.New(apps)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ajs.CreateOrUpdateConsumer(ctx, "TALLY_MILESTONES", jetstream.ConsumerConfig{
		Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "tally.milestone.>"}); err != nil {
		t.Fatalf("an application's consumer: %v", err)
	}
	d.denied(t, "looked up an application's consumer", func(c context.Context) error {
		_, err := js.Consumer(c, "TALLY_MILESTONES", "billing")
		return err
	})
	d.denied(t, "took over an application's consumer", func(c context.Context) error {
		_, err := js.CreateOrUpdateConsumer(c, "TALLY_MILESTONES", jetstream.ConsumerConfig{Durable: "billing", AckPolicy: jetstream.AckNonePolicy})
		return err
	})
	d.denied(t, "fetched from an application's consumer", func(c context.Context) error {
		_, err := d.us1.Request("$JS.API.CONSUMER.MSG.NEXT.TALLY_MILESTONES.billing", []byte(`{"batch":1,"no_wait":true}`), time.Second)
		return err
	})
	d.denied(t, "acknowledged for an application's consumer", func(context.Context) error {
		return d.us1.Publish("$JS.ACK.TALLY_MILESTONES.billing.1.1.1.0.0", []byte("+ACK"))
	})
	d.denied(t, "deleted an application's consumer", func(c context.Context) error {
		return js.DeleteConsumer(c, "TALLY_MILESTONES", "billing")
	})
	if info, err := ajs.Consumer(ctx, "TALLY_MILESTONES", "billing"); err != nil || info.CachedInfo().AckFloor.Stream != 0 || info.CachedInfo().Config.AckPolicy != jetstream.AckExplicitPolicy {
		t.Fatalf("the application's consumer after the attempts: %v", err)
	}

}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func startServer(t *testing.T, opts *server.Options) *server.Server {
	t.Helper()
	s, err := tryServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// tryServer starts a NATS server and waits until it listens. It fails at
// once, with errPortTaken, if the server could not listen on a port.
func tryServer(opts *server.Options) (*server.Server, error) {
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, err
	}
	logger := &fatalLogger{fatal: make(chan string, 8)}
	if os.Getenv("TALLY_TEST_NATS_LOG") != "" {
		s.ConfigureLogger()
	} else {
		s.SetLogger(logger, false, false)
	}
	go s.Start()
	// Generous: under `go test -race ./...` on two cores this runs beside
	// the chaos suite's processes, and a JetStream server with TLS once
	// took more than 20 s to listen.
	for range 90 {
		if s.ReadyForConnections(time.Second) {
			return s, nil
		}
		select {
		case msg := <-logger.fatal:
			s.Shutdown()
			s.WaitForShutdown()
			if strings.Contains(msg, "Error listening") {
				return nil, fmt.Errorf("nats server %s: %s: %w", opts.ServerName, msg, errPortTaken)
			}
			return nil, fmt.Errorf("nats server %s: %s", opts.ServerName, msg)
		default:
		}
	}
	s.Shutdown()
	return nil, fmt.Errorf("nats server %s not ready", opts.ServerName)
}

// fatalLogger keeps a NATS server's fatal messages (it logs nothing else):
// a server that cannot listen says so only there, then waits forever.
type fatalLogger struct{ fatal chan string }

func (l *fatalLogger) Fatalf(format string, v ...any) {
	select {
	case l.fatal <- fmt.Sprintf(format, v...):
	default:
	}
}
func (l *fatalLogger) Noticef(string, ...any) {}
func (l *fatalLogger) Warnf(string, ...any)   {}
func (l *fatalLogger) Errorf(string, ...any)  {}
func (l *fatalLogger) Debugf(string, ...any)  {}
func (l *fatalLogger) Tracef(string, ...any)  {}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// testCerts are the PEM files of testkit.Certs the NATS servers and the
// API use: a CA and one certificate for 127.0.0.1 and localhost.
type testCerts struct {
	ca, cert, key string
	kit           *testkit.Certs
}

func makeCerts(t *testing.T) testCerts {
	t.Helper()
	k := testkit.NewCerts(t)
	return testCerts{ca: k.CA, cert: k.Cert, key: k.Key, kit: k}
}

// The shipped region configs' sequence blocks decode into sequences.
func TestConfigFileSequences(t *testing.T) {
	cfg, err := loadConfig([]string{"--config", filepath.Join("..", "..", "configs", "eu-1.hcl"),
		"--sequence", "extra=likes/post:*/every:10"}, tokenEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, sc := range cfg.Sequences {
		got = append(got, sc.String())
	}
	if want := "[launch=likes/video:launch/1000000 searches=increments/search:*/10^k extra=likes/post:*/every:10]"; fmt.Sprint(got) != want {
		t.Fatalf("sequences %v, want %s", got, want)
	}
}
