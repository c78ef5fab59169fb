package deploy_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/internal/deploy"
	"github.com/tally-dev/tally/route"
	"github.com/tally-dev/tally/shard"
)

// RESP commands travel between replicas as typed operations, on real
// NATS with two sharded regions of two replicas, copies 1. With us-1's
// own credentials an attacker forges typed requests of the operation
// kinds RESP brought (a toggle, a unique count's ids, a read of likers)
// for eu's replicas, which us-1 never reaches: NATS refuses every
// publish, and nothing is applied there. A forged request of the kind a
// RESP command's bytes once were, to us-1's own region, is refused by the
// decoder: no answer, nothing applied. A client's HTTP request carrying a
// RESP command and the old forwarding's headers applies nothing, while
// the same commands over RESP at us-1, of keys it does not hold, reach
// their holder typed and apply. The same holds of the view reads HTTP's
// one-key reads travel as: forged for eu, refused; and HTTP reads at us-1
// of a key us-2 holds answer us-2's view, whatever a client's headers
// say, applying nothing.
func TestTypedRESPForwardingCannotBeForged(t *testing.T) {
	startsSmallRegions(t, "starts two sharded regions")
	const token = "w-secret-token"
	cfg := deploy.DefaultConfig()
	cfg.Regions, cfg.Replicas, cfg.Copies, cfg.Milestones, cfg.RESP, cfg.WriteToken = []string{"us", "eu"}, 2, 1, "", true, token
	d := startConfig(t, cfg)
	urls, cfgs, addrs := d.URLs(), d.Configs(), d.RESPAddrs()
	waitReady(t, urls)
	at := map[string]int{} // replica -> index in urls, cfgs, addrs
	for i, c := range cfgs {
		at[c.Replica] = i
	}
	ctx := context.Background()
	client := func(replica string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addrs[at[replica]], Password: token, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}

	nc, violations := connectAsReplica(t, d, "us", "us-1")

	// A key us-1 does not hold: us-2 holds it (copies 1).
	held := getShards(t, urls[at["us-1"]]).Held("us-1")
	var key string
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("typed:%d", i); !held.Has(shard.Of(k)) {
			key = k
		}
	}

	// The kind a RESP command's bytes once were (3: protocol, role,
	// arguments), forged by us-1's user for us-2: refused unread.
	forged := append([]byte{route.Version, 3, 4}, "us-1"...)
	forged = binary.AppendVarint(forged, int64(shard.Of(key)))
	forged = append(forged, 0, 0, 2, 3, 3) // no deadline, no address; RESP 2, the admin role, 3 arguments
	for _, a := range []string{"INCRBY", key, "77777"} {
		forged = append(forged, byte(len(a)))
		forged = append(forged, a...)
	}
	if _, err := route.UnmarshalRequest(forged); err == nil || !strings.Contains(err.Error(), "unknown request kind 3") {
		t.Fatalf("the forged request decodes: %v", err)
	}
	// Its 3 s wait for an answer runs beside the forgeries for eu below.
	kind3 := make(chan error, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := nc.RequestWithContext(rctx, route.Subject("us", "us-2"), forged)
		kind3 <- err
	}()

	// Forged typed requests of RESP's operation kinds, for eu's replicas.
	// Each waits its 3 s for an answer that must not come; they wait side
	// by side, not one after another (fourteen waits were most of the
	// test's time), and each must bring its own permissions violation,
	// naming its target's subject.
	const item, user, uniq = "forged-item", "mallory", "forged-uniques"
	type forgery struct {
		target string
		req    route.Request
	}
	var sent []forgery
	for _, target := range []string{"eu-1", "eu-2"} {
		req := route.Request{Kind: route.KindOps, From: "eu-2", Shard: shard.Of(item), Ops: []route.Op{
			{Kind: route.OpToggle, Key: item, User: user, Idem: "forged"},
		}}
		if target == "eu-2" {
			req.Shard, req.Ops = shard.Of(uniq), []route.Op{{Kind: route.OpUniques, Key: uniq, List: []string{"a", "b"}}}
		}
		forgeries := []route.Request{req, {Kind: route.KindOps, Shard: shard.Of(item), Ops: []route.Op{{Kind: route.OpAllLikers, Key: item, By: 10}}}}
		// The view reads HTTP's one-key reads brought.
		for _, k := range []route.OpKind{route.OpCounterView, route.OpLikesView, route.OpLikedView, route.OpLikersView, route.OpBudgetView} {
			forgeries = append(forgeries, route.Request{Kind: route.KindOps, From: target, Shard: shard.Of(item),
				Ops: []route.Op{{Kind: k, Key: item, User: user, By: 10}}})
		}
		// The same writes and reads together as one batch.
		forgeries = append(forgeries, route.Request{Kind: route.KindBatch, From: target, Shard: -1, Batch: forgeries[:2:2]})
		for _, r := range forgeries {
			sent = append(sent, forgery{target, r})
		}
	}
	answered := make(chan string, len(sent))
	var waits sync.WaitGroup
	for _, f := range sent {
		waits.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			if _, err := nc.RequestWithContext(rctx, route.Subject("eu", f.target), f.req.Marshal()); err == nil {
				what := fmt.Sprint("batch of ", len(f.req.Batch))
				if len(f.req.Ops) > 0 {
					what = fmt.Sprint(f.req.Ops[0].Kind)
				}
				answered <- fmt.Sprintf("us-1's user had an answer from %s to a forged %s", f.target, what)
			}
		})
	}
	want := map[string]int{} // subject -> forgeries sent there without a violation heard yet
	for _, f := range sent {
		want[fmt.Sprintf("%q", route.Subject("eu", f.target))]++
	}
	deadline := time.After(10 * time.Second)
	for range sent {
		select {
		case err := <-violations:
			if !strings.Contains(err.Error(), "Permissions Violation") {
				t.Fatalf("us-1's user publishing to eu's replicas: %v", err)
			}
			named := false
			for subject, n := range want {
				if n > 0 && strings.Contains(err.Error(), subject) {
					want[subject]--
					named = true
					break
				}
			}
			if !named {
				t.Fatalf("a violation for none of the forgeries still unrefused %v: %v", want, err)
			}
		case <-deadline:
			t.Fatalf("us-1's user published forged requests to eu's replicas: no violation for %v", want)
		}
	}
	waits.Wait()
	close(answered)
	for msg := range answered {
		t.Error(msg)
	}
	if t.Failed() {
		t.FailNow()
	}
	for _, r := range []string{"eu-1", "eu-2"} {
		c := client(r)
		if liked, err := c.SIsMember(ctx, "likes:"+item, user).Result(); err != nil || liked {
			t.Fatalf("%s: SISMEMBER after a forged toggle: %v %v", r, liked, err)
		}
		if n, err := c.PFCount(ctx, uniq).Result(); err != nil || n != 0 {
			t.Fatalf("%s: PFCOUNT after forged ids: %d %v", r, n, err)
		}
	}

	// A client's HTTP request carrying a RESP command and the old
	// forwarding's headers, for the key us-2 holds.
	req, _ := http.NewRequest("POST", urls[at["us-1"]]+"/v1/counters/"+key+"/incr",
		strings.NewReader("*3\r\n$6\r\nINCRBY\r\n$"+fmt.Sprint(len(key))+"\r\n"+key+"\r\n$5\r\n77777\r\n"))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Tally-Proto", "resp")
	req.Header.Set("Tally-Role", "3")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode < 400 || res.StatusCode >= 500 {
		t.Fatalf("RESP in an HTTP body with the forwarding's headers: %d %s, want a 4xx", res.StatusCode, body)
	}

	if err := <-kind3; !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("us-2 answered a request of kind 3: %v", err)
	}

	// Nothing of either applied; RESP at us-1 reaches the holder typed.
	c := client("us-1")
	if v, err := c.Get(ctx, key).Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET %s at us-1 after the forgeries: %q %v, want nil", key, v, err)
	}
	if v, err := c.IncrBy(ctx, key, 2).Result(); err != nil || v != 2 {
		t.Fatalf("INCRBY %s at us-1: %d %v", key, v, err)
	}
	if n, err := c.SAdd(ctx, "likes:"+key, "ann", "bob").Result(); err != nil || n != 2 {
		t.Fatalf("SADD at us-1: %d %v", n, err)
	}
	if n, err := c.PFAdd(ctx, key+":u", "a", "b", "c").Result(); err != nil || n != 1 {
		t.Fatalf("PFADD at us-1: %d %v", n, err)
	}
	holder := client("us-2")
	if v, err := holder.Get(ctx, key).Result(); err != nil || v != "2" {
		t.Fatalf("GET %s at its holder us-2: %q %v", key, v, err)
	}

	for _, r := range []*redis.Client{c, holder} {
		if m, err := r.SMembers(ctx, "likes:"+key).Result(); err != nil || fmt.Sprint(m) != "[ann bob]" {
			t.Fatalf("SMEMBERS: %v %v", m, err)
		}
	}

	// HTTP reads at us-1 of the key us-2 holds go to us-2 typed, whatever
	// a client's headers say: a method override, the marks of forwarding,
	// an operation, a served-by, a shard. None applies anything, and the
	// answer is us-2's.
	smuggle := map[string]string{"X-HTTP-Method-Override": "PUT", "Tally-Forwarded": "true", "Tally-Gathered": "true",
		"Tally-Op": "incr", "Tally-By": "77777", "Tally-Served-By": "us-2", "Tally-Shard": fmt.Sprint(shard.Of(key)), "Tally-From": "us-2"}
	get := func(u string, headers map[string]string) (string, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", u, res.StatusCode, body)
		}
		return res.Header.Get("Tally-Served-By"), body
	}
	for _, path := range []string{"/v1/counters/" + key, "/v1/likes/" + key + "/mallory", "/v1/likes/" + key, "/v1/likers/" + key, "/v1/budgets/" + key} {
		by, body := get(urls[at["us-1"]]+path, smuggle)
		_, theirs := get(urls[at["us-2"]]+path, nil)
		if by != "us-2" {
			t.Fatalf("GET %s at us-1 served by %q, want its holder us-2", path, by)
		}
		if mine, holders := withoutStaleness(t, body), withoutStaleness(t, theirs); mine != holders {
			t.Fatalf("GET %s at us-1 answered %s, its holder %s", path, mine, holders)
		}
	}
	if v, err := holder.Get(ctx, key).Result(); err != nil || v != "2" {
		t.Fatalf("GET %s at its holder after the headers: %q %v, want 2", key, v, err)
	}
	if liked, err := holder.SIsMember(ctx, "likes:"+key, "mallory").Result(); err != nil || liked {
		t.Fatalf("mallory likes %s after a GET with a method override: %v %v", key, liked, err)
	}
}

// withoutStaleness is a JSON answer without its staleness_ms, which moves
// with the clock between two reads, re-encoded.
func withoutStaleness(t *testing.T, b []byte) string {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	delete(v, "staleness_ms")
	delete(v, "approx") // follows staleness
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
