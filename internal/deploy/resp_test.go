package deploy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/internal/deploy"
	"github.com/tally-dev/tally/internal/testkit"
)

// Over RESP, a like at one region is a member everywhere once replicated,
// and increments at two regions add up everywhere (issue 32's done-when,
// through go-redis instead of redis-cli).
func TestRESPReplicates(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three regions")
	}
	cfg := deploy.DefaultConfig()
	cfg.RESP = true
	d := startConfig(t, cfg)
	for _, u := range d.URLs() {
		testkit.WaitFor(t, 30*time.Second, func() error {
			if st, _, err := testkit.DoJSON("GET", u+"/readyz", ""); err != nil || st != 200 {
				return fmt.Errorf("%s not ready: %d %v", u, st, err)
			}
			return nil
		})
	}
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
		}
		return nil
	})
}
