package deploy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/internal/deploy"
)

// Over RESP, a like at one region is a member everywhere once replicated,
// and increments at two regions add up everywhere (issue 32's done-when,
// through go-redis instead of redis-cli).
func TestRESPReplicates(t *testing.T) {
	startsThreeRegions(t, "starts three regions")
	cfg := deploy.DefaultConfig()
	cfg.RESP = true
	d := startConfig(t, cfg)
	waitReady(t, d.URLs())
	addrs := d.RESPAddrs()
	if len(addrs) != 3 {
		t.Fatalf("RESP addresses: %v", addrs)
	}
	ctx := context.Background()
	var clients []*redis.Client
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, Protocol: 2, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		clients = append(clients, c)
	}
	if v, err := clients[0].SAdd(ctx, "likes:post1", "alice").Result(); err != nil || v != 1 {
		t.Fatalf("SADD at %s: %d %v", addrs[0], v, err)
	}
	for _, by := range []*redis.Client{clients[0], clients[1]} {
		if err := by.IncrBy(ctx, "views:p", 5).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := clients[2].PFAdd(ctx, "visitors", "a", "b", "c").Err(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, func() error {
		for i, c := range clients {
			card, err := c.SCard(ctx, "likes:post1").Result()
			if err != nil {
				return err
			}
			member, err := c.SIsMember(ctx, "likes:post1", "alice").Result()
			if err != nil {
				return err
			}
			views, err := c.Get(ctx, "views:p").Int64()
			if err != nil {
				return err
			}
			uniques, err := c.PFCount(ctx, "visitors").Result()
			if err != nil {
				return err
			}
			if card != 1 || !member || views != 10 || uniques != 3 {
				return fmt.Errorf("%s: SCARD %d, SISMEMBER %v, GET %d, PFCOUNT %d; want 1, true, 10, 3",
					addrs[i], card, member, views, uniques)
			}
			// INFO says what GET /v1/convergence says.
			info, err := c.Info(ctx, "replication").Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "converged:1\r\n") || !strings.Contains(info, "peers:2\r\n") || !strings.Contains(info, "peers_in_sync:2\r\n") {
				return fmt.Errorf("%s: INFO %q, want converged with 2 peers in sync", addrs[i], info)
			}
		}
		return nil
	})
}

// PFADD at both sides of a cut, then a heal: PFCOUNT agrees everywhere,
// and counts every id once (issue 32's done-when).
func TestRESPUniquesThroughCutAndHeal(t *testing.T) {
	startsThreeRegions(t, "starts three regions")
	cfg := deploy.DefaultConfig()
	cfg.RESP, cfg.Milestones = true, ""
	d := startConfig(t, cfg)
	urls := d.URLs()
	waitReady(t, urls)
	ctx := context.Background()
	clients := respClients(t, d.RESPAddrs(), 2)
	if st, b, err := testkit.DoJSON("PUT", urls[0]+"/v1/admin/links/us/eu", `{"up":false}`); err != nil || st != 200 {
		t.Fatalf("cut: %d %v %v", st, b, err)
	}
	// 300 ids at us, 300 at eu, 100 of them at both.
	for i := range 300 {
		if err := clients[0].PFAdd(ctx, "viewers", fmt.Sprintf("v%d", i)).Err(); err != nil {
			t.Fatal(err)
		}
		if err := clients[1].PFAdd(ctx, "viewers", fmt.Sprintf("v%d", i+200)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if st, _, err := testkit.DoJSON("PUT", urls[0]+"/v1/admin/links/us/eu", `{"up":true}`); err != nil || st != 200 {
		t.Fatalf("heal: %d %v", st, err)
	}
	var counts []int64
	testkit.WaitFor(t, 30*time.Second, func() error {
		counts = counts[:0]
		for _, c := range clients {
			n, err := c.PFCount(ctx, "viewers").Result()
			if err != nil {
				return err
			}
			counts = append(counts, n)
		}
		if counts[0] != counts[1] || counts[1] != counts[2] {
			return fmt.Errorf("PFCOUNT viewers differs between regions: %v", counts)
		}
		return nil
	})
	// 500 distinct ids; HyperLogLog's error at this size is well under 5%.
	if counts[0] < 475 || counts[0] > 525 {
		t.Fatalf("PFCOUNT viewers = %d everywhere, want about 500", counts[0])
	}
}

// In a sharded deployment, RESP commands sent to any replica run at a
// holder of their key's shard (forwarded once), and read the same from
// every replica; MGET and PFCOUNT over keys of several shards read from
// their holders and answer whole at every replica.
func TestRESPShardedForwards(t *testing.T) {
	startsShardedRegions(t, "starts six replicas")
	cfg := deploy.DefaultConfig()
	cfg.Regions, cfg.Replicas, cfg.Copies, cfg.Milestones, cfg.RESP = []string{"us", "eu"}, 3, 2, "", true
	d := startConfig(t, cfg)
	waitReady(t, d.URLs())
	ctx := context.Background()
	clients := respClients(t, d.RESPAddrs(), 3)
	const items = 12
	for i := range items {
		for j, c := range clients { // every replica takes a like of every item
			if v, err := c.SAdd(ctx, fmt.Sprintf("likes:item%d", i), fmt.Sprintf("u%d", j)).Result(); err != nil || v != 1 {
				t.Fatalf("SADD likes:item%d at replica %d: %d %v", i, j, v, err)
			}
		}
		if err := clients[i%len(clients)].IncrBy(ctx, fmt.Sprintf("views:%d", i), 5).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// A pipeline of writes to many shards: each answered, in order.
	pipe := clients[0].Pipeline()
	var incrs []*redis.IntCmd
	for i := range items {
		incrs = append(incrs, pipe.IncrBy(ctx, fmt.Sprintf("views:%d", i), 1))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("pipelined increments: %v", err)
	}
	for i, c := range incrs {
		if c.Val() < 1 {
			t.Fatalf("pipelined INCRBY views:%d answered %d", i, c.Val())
		}
	}
	testkit.WaitFor(t, 30*time.Second, func() error {
		for j, c := range clients {
			for i := range items {
				card, err := c.SCard(ctx, fmt.Sprintf("likes:item%d", i)).Result()
				if err != nil {
					return err
				}
				if card != int64(len(clients)) {
					return fmt.Errorf("replica %d: SCARD likes:item%d = %d, want %d", j, i, card, len(clients))
				}
				v, err := c.Get(ctx, fmt.Sprintf("views:%d", i)).Int64()
				if err != nil || v != 6 {
					return fmt.Errorf("replica %d: GET views:%d = %d %v, want 6", j, i, v, err)
				}
			}
		}
		return nil
	})
	// Reads of keys on several shards (issue #42): at every replica, MGET
	// asks each shard's part of a holder and answers in the keys' order,
	// and PFCOUNT unites the sketches of every key.
	keys := make([]string, items+1)
	for i := range items {
		keys[i] = fmt.Sprintf("views:%d", i)
	}
	keys[items] = keys[0] // a key twice, answered twice
	for j, c := range clients {
		vals, err := c.MGet(ctx, keys...).Result()
		if err != nil || len(vals) != len(keys) {
			t.Fatalf("replica %d: MGET over %d shards: %v %v", j, items, vals, err)
		}
		for i, v := range vals {
			if v != "6" {
				t.Fatalf("replica %d: MGET's value %d (%s) is %v, want 6", j, i, keys[i], v)
			}
		}
	}
	var ukeys []string
	for i := range 6 {
		k := fmt.Sprintf("viewers:%d", i)
		ukeys = append(ukeys, k)
		for v := range 10 { // viewers v0..v9 on every key, and one of each key's own
			if err := clients[i%len(clients)].PFAdd(ctx, k, fmt.Sprintf("v%d", v), fmt.Sprintf("own%d", i)).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	testkit.WaitFor(t, 30*time.Second, func() error {
		for j, c := range clients {
			n, err := c.PFCount(ctx, ukeys...).Result()
			if err != nil || n != 16 {
				return fmt.Errorf("replica %d: PFCOUNT of %d keys = %d %v, want 16", j, len(ukeys), n, err)
			}
		}
		return nil
	})
}

// respClients are go-redis clients of addrs speaking protocol proto,
// closed when the test ends.
func respClients(t *testing.T, addrs []string, proto int) []*redis.Client {
	var out []*redis.Client
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, Protocol: proto, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		out = append(out, c)
	}
	return out
}
