package deploy_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/internal/deploy"
	"github.com/tally-dev/tally/internal/natsperm"
	"github.com/tally-dev/tally/route"
	"github.com/tally-dev/tally/shard"
)

// The attack of issue #42 against a real region of three replicas, copies
// 2, on real NATS: with us-1's own credentials, an attacker tries to read
// the region's forwarded requests (a plain subscription on every route
// subject, a queue subscription on another replica's, a subscription on
// another replica's inbox) and to answer them; meanwhile clients send
// writes with their tokens to us-1 over HTTP and RESP, a third of them
// forwarded, ten at a time so that forwarded ones travel batched, which
// the attacker would answer with a batch's answers. Every subscription is
// refused, nothing reaches the attacker,
// no token is ever on the wire, every acknowledged write is applied at
// every replica, and a client's RESP-in-HTTP headers apply nothing.
func TestForwardingCannotBeReadOrAnswered(t *testing.T) {
	startsSmallRegions(t, "starts three replicas")
	const token = "w-secret-token"
	cfg := deploy.DefaultConfig()
	cfg.Regions, cfg.Replicas, cfg.Copies, cfg.Milestones, cfg.RESP, cfg.WriteToken = []string{"us"}, 3, 2, "", true, token
	d := startConfig(t, cfg)
	urls, cfgs := d.URLs(), d.Configs()
	waitReady(t, urls)
	m := getShards(t, urls[0])
	held := m.Held(cfgs[0].Replica)

	nc, violations := connectAsReplica(t, d, "us", "us-1")
	var seen atomic.Int64
	var leaked atomic.Bool
	read := func(msg *nats.Msg) {
		seen.Add(1)
		if bytes.Contains(msg.Data, []byte(token)) || strings.Contains(fmt.Sprint(msg.Header), token) {
			leaked.Store(true)
		}
		forged := route.Answer{Kind: route.Served, Body: route.MarshalResults([]route.Result{{Value: 999999999}})}
		if req, err := route.UnmarshalRequest(msg.Data); err == nil && req.Kind == route.KindBatch {
			as := make([]route.Answer, len(req.Batch))
			for i := range as {
				as[i] = forged
			}
			forged = route.Answer{Kind: route.Answers, Body: route.MarshalAnswers(as)}
		}
		_ = msg.Respond(forged.Marshal())
	}
	for _, s := range []struct{ subject, queue string }{
		{"tally.route.us.>", ""},
		{route.Subject("us", "us-3"), ""},
		{route.Subject("us", "us-2"), "holders"},
		{"_INBOX_us-2.>", ""},
		{"_INBOX.>", ""},
	} {
		var err error
		if s.queue != "" {
			_, err = nc.QueueSubscribe(s.subject, s.queue, read)
		} else {
			_, err = nc.Subscribe(s.subject, read)
		}
		if err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-violations:
			if !strings.Contains(err.Error(), "Permissions Violation") {
				t.Fatalf("us-1's user subscribing to %s: %v", s.subject, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("us-1's user subscribed to %s", s.subject)
		}
	}
	// A forged answer to another replica's inbox is refused too.
	if err := nc.Publish("_INBOX_us-2.forged", []byte("forged")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-violations:
		if !strings.Contains(err.Error(), "Permissions Violation") {
			t.Fatalf("us-1's user publishing to us-2's inbox: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("us-1's user published to us-2's inbox")
	}

	// Keys us-1 does not hold, so that its writes are forwarded.
	var keys []string
	for i := 0; len(keys) < 10; i++ {
		if k := fmt.Sprintf("views:%d", i); !held.Has(shard.Of(k)) {
			keys = append(keys, k)
		}
	}
	// The operator's view of the route subjects, which no replica has:
	// the batches (route.KindBatch) the concurrent writes below travel in.
	admin, err := nats.Connect(d.Cluster().ClientURL("us"),
		nats.UserInfo(natsperm.AdminUser, d.NATSPassword(natsperm.AdminUser)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	var batches atomic.Int64
	if _, err := admin.Subscribe("tally.route.us.>", func(msg *nats.Msg) {
		if req, err := route.UnmarshalRequest(msg.Data); err == nil && req.Kind == route.KindBatch {
			batches.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := admin.Flush(); err != nil {
		t.Fatal(err)
	}
	// Writes ten at a time, so that forwarded ones for one holder travel
	// batched, until batches have: the attacker reads and answers none.
	want := map[string]int64{}
	var wantMu sync.Mutex
	for round := 0; round < 3 || batches.Load() == 0 && round < 30; round++ {
		var wg sync.WaitGroup
		for i := range 10 {
			wg.Go(func() {
				k := keys[i%len(keys)]
				req, _ := http.NewRequest("POST", urls[0]+"/v1/counters/"+k+"/incr", strings.NewReader(`{"by":3}`))
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("Content-Type", "application/json")
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != 200 || strings.Contains(string(body), "999999999") {
					t.Errorf("increment %d of %s at us-1: %d %s", i, k, res.StatusCode, body)
					return
				}
				wantMu.Lock()
				want[k] += 3
				wantMu.Unlock()
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}
	if batches.Load() == 0 {
		t.Fatal("no forwarded batch traveled: the attack on batches was not tried")
	}
	rc := redis.NewClient(&redis.Options{Addr: d.RESPAddrs()[0], Password: token, MaxRetries: -1})
	defer rc.Close()
	ctx := context.Background()
	for i := range 10 {
		k := keys[i]
		if v, err := rc.IncrBy(ctx, k, 2).Result(); err != nil || v == 999999999 {
			t.Fatalf("INCRBY %s at us-1: %d %v", k, v, err)
		}
		want[k] += 2
	}
	// A client's headers asking the holder to run a RESP command.
	k := keys[0]
	req, _ := http.NewRequest("POST", urls[0]+"/v1/counters/"+k+"/incr",
		strings.NewReader("*3\r\n$6\r\nINCRBY\r\n$"+fmt.Sprint(len(k))+"\r\n"+k+"\r\n$5\r\n77777\r\n"))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Tally-Proto", "resp")
	req.Header.Set("Tally-Token", token)
	req.Header.Set("Tally-Method", "GET")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode < 400 || res.StatusCode >= 500 {
		t.Fatalf("RESP in an HTTP body with the forwarding's headers: %d %s, want a 4xx", res.StatusCode, body)
	}

	for i, u := range urls {
		testkit.WaitFor(t, 30*time.Second, func() error {
			for k, v := range want {
				st, b, err := testkit.DoJSON("GET", u+"/v1/counters/"+k, "")
				if err != nil || st != 200 || b["value"] != float64(v) {
					return fmt.Errorf("%s reads %s as %d %v %v, want %d", cfgs[i].Replica, k, st, b, err, v)
				}
			}
			return nil
		})
	}
	if n := seen.Load(); n != 0 || leaked.Load() {
		t.Fatalf("us-1's user received %d messages (a token among them: %v)", n, leaked.Load())
	}
}

// connectAsReplica connects to region's NATS server with replica's own
// credentials and inbox prefix, as an attacker holding them would; the
// channel receives the server's refusals (permission violations). The
// connection closes when the test ends.
func connectAsReplica(t *testing.T, d *deploy.Deployment, region, replica string) (*nats.Conn, chan error) {
	t.Helper()
	violations := make(chan error, 64)
	nc, err := nats.Connect(d.Cluster().ClientURL(region),
		nats.UserInfo(natsperm.ReplicaUser(replica), d.NATSPassword(natsperm.ReplicaUser(replica))),
		nats.CustomInboxPrefix("_INBOX_"+replica),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, violations
}
