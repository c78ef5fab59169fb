package deploy_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/internal/deploy"
	"github.com/tally-dev/tally/shard"
)

// Issue #42: operations of many keys at any replica of a sharded region,
// on one region of three replicas, copies 2; and a type's total there.
// They share one deployment (each starts in a few seconds of CPU under
// -race): their keys differ, but the series' "*" line sums every counter
// written in the last ten minutes, so the type total, which writes
// counters, comes after it.
func TestManyKeysAtAnyReplicaOfAShardedRegion(t *testing.T) {
	startsSmallRegions(t, "starts three replicas")
	cfg := deploy.DefaultConfig()
	cfg.Regions, cfg.Replicas, cfg.Copies, cfg.Milestones = []string{"us"}, 3, 2, ""
	d := startConfig(t, cfg)
	urls := d.URLs()
	waitReady(t, urls)
	t.Run("import", func(t *testing.T) { importAtAnyReplica(t, urls) })
	t.Run("series", func(t *testing.T) { seriesOfKeysOnSeveralShards(t, urls) })
	t.Run("cashback", func(t *testing.T) { cashbackAtAnyReplica(t, urls) })
	t.Run("type total", func(t *testing.T) { typeTotalAtAnyReplica(t, urls) })
}

// typeTotalAtAnyReplica: GET /v1/types/{name}/total at any replica of a sharded region with two
// copies of each shard: the keys of the type on every shard, each shard
// summed once, a key of no type left out.
func typeTotalAtAnyReplica(t *testing.T, urls []string) {
	held := getShards(t, urls[0]).Held("us-1")
	if st, b, err := testkit.DoJSON("PUT", urls[0]+"/v1/types/video", `{"owner":"media"}`); err != nil || st != 200 {
		t.Fatalf("put type: %d %v %v", st, b, err)
	}
	want, notHeld := int64(0), 0
	for i := range 12 {
		key := fmt.Sprintf("video:k%d", i)
		if !held.Has(shard.Of(key)) {
			notHeld++
		}
		if st, b, err := testkit.DoJSON("POST", urls[i%3]+"/v1/counters/"+key+"/incr", fmt.Sprintf(`{"by":%d}`, i+1)); err != nil || st != 200 {
			t.Fatalf("incr %s: %d %v %v", key, st, b, err)
		}
		want += int64(i + 1)
	}
	if notHeld == 0 {
		t.Fatal("every key on a shard us-1 holds: nothing to gather")
	}
	if st, b, err := testkit.DoJSON("POST", urls[1]+"/v1/counters/other/incr", `{"by":100}`); err != nil || st != 200 {
		t.Fatalf("incr other: %d %v %v", st, b, err)
	}
	for _, u := range urls {
		testkit.WaitFor(t, 30*time.Second, func() error {
			st, b, err := testkit.DoJSON("GET", u+"/v1/types/video/total", "")
			if err != nil || st != 200 || b["value"] != float64(want) || b["keys"] != float64(12) || b["partial"] != nil || b["shards"] != nil {
				return fmt.Errorf("%s: %d %v %v, want value %d of 12 keys", u, st, b, err, want)
			}
			return nil
		})
	}
}

// cashbackAtAnyReplica: cashbacks of every (merchant, user) pair at every
// replica, keys on shards no one replica holds together among them. Each
// is paid (200) or refused (409) and nothing else; a paid one retried is
// a duplicate; money is conserved: what left the pool is what left the
// merchants is what the users got, and no merchant is overdrawn.
func cashbackAtAnyReplica(t *testing.T, urls []string) {
	m := getShards(t, urls[0])
	sameHolders := func(keys ...string) bool {
		first := strings.Join(m.Holders(shard.Of(keys[0])), ",")
		for _, k := range keys[1:] {
			if strings.Join(m.Holders(shard.Of(k)), ",") != first {
				return false
			}
		}
		return true
	}
	merchants, users := []string{"shop0", "shop1", "shop2"}, []string{"buyer0", "buyer1", "buyer2"}
	const pool, perMerchant = 1000, 5
	grant := func(key string, by int) {
		st, b, err := testkit.DoJSON("POST", urls[0]+"/v1/budgets/"+key+"/grant", fmt.Sprintf(`{"by":%d}`, by))
		if err != nil || st != 200 {
			t.Fatalf("grant %s: %d %v %v", key, st, b, err)
		}
	}
	grant("cbpool", pool)
	for _, mk := range merchants {
		grant(mk, perMerchant)
	}
	paid, crossed := 0, 0
	for i, u := range urls {
		for _, mk := range merchants {
			for _, user := range users {
				key := fmt.Sprintf("buy-%d-%s-%s", i, mk, user)
				body := fmt.Sprintf(`{"budget":"cbpool","merchant":%q,"user":%q,"amount":1,"idempotency_key":%q}`, mk, user, key)
				st, b, err := testkit.DoJSON("POST", u+"/v1/cashback", body)
				switch {
				case err != nil:
					t.Fatal(err)
				case st == 200:
					paid++
					if !sameHolders("cbpool", mk, user) {
						crossed++
					}
					// At another replica: a duplicate once the holder it
					// reaches has the first application (until then it
					// may answer 409 and spend nothing).
					testkit.WaitFor(t, 10*time.Second, func() error {
						if st, b, err := testkit.DoJSON("POST", urls[(i+1)%len(urls)]+"/v1/cashback", body); err != nil || st != 200 || b["duplicate"] != true {
							return fmt.Errorf("retry of %s at another replica: %d %v %v", key, st, b, err)
						}
						return nil
					})
				case st == 409:
				default:
					t.Fatalf("cashback %s at %s: %d %v", key, u, st, b)
				}
			}
		}
	}
	t.Logf("%d cashbacks paid, %d of them with keys on shards of different holders", paid, crossed)
	if crossed == 0 {
		t.Fatalf("%d paid, none with keys on shards of different holders", paid)
	}
	testkit.WaitFor(t, 30*time.Second, func() error {
		read := func(path, field string) (int64, error) {
			st, b, err := testkit.DoJSON("GET", urls[2]+path, "")
			if err != nil || st != 200 {
				return 0, fmt.Errorf("%s: %d %v %v", path, st, b, err)
			}
			v, _ := b[field].(float64)
			return int64(v), nil
		}
		left, err := read("/v1/budgets/cbpool", "remaining")
		if err != nil {
			return err
		}
		var fromMerchants, credited int64
		for _, mk := range merchants {
			r, err := read("/v1/budgets/"+mk, "remaining")
			if err != nil {
				return err
			}
			if r < 0 {
				t.Fatalf("merchant %s overdrawn: %d", mk, r)
			}
			fromMerchants += perMerchant - r
		}
		for _, user := range users {
			v, err := read("/v1/counters/"+user, "value")
			if err != nil {
				return err
			}
			credited += v
		}
		if pool-left != credited || fromMerchants != credited || credited != int64(paid) {
			return fmt.Errorf("pool paid %d, merchants %d, users got %d, %d purchases paid", pool-left, fromMerchants, credited, paid)
		}
		return nil
	})
}

// importAtAnyReplica: a history file imported at us-1 is split by shard
// there, each part applied by a holder, and the answer counts every line;
// a second import of the same file changes nothing. Every replica then
// reads every count.
func importAtAnyReplica(t *testing.T, urls []string) {
	held := getShards(t, urls[0]).Held("us-1")

	var lines []string
	likes, views := map[string]int{}, map[string]int64{}
	notHeld := 0
	for i := range 40 {
		item, key := fmt.Sprintf("old%d", i%8), fmt.Sprintf("views:old%d", i%5)
		if !held.Has(shard.Of(item)) {
			notHeld++
		}
		lines = append(lines, fmt.Sprintf(`{"videoId":%q,"userId":"u%d","timestamp":1698765432}`, item, i))
		lines = append(lines, fmt.Sprintf(`{"type":"incr","key":%q,"by":2,"at":1698765432000}`, key))
		likes[item]++
		views[key] += 2
	}
	if notHeld == 0 {
		t.Fatal("every item on a shard us-1 holds: nothing would be split")
	}
	body := strings.Join(lines, "\n") + "\n"
	for run := range 2 {
		st, b, err := testkit.DoJSON("POST", urls[0]+"/v1/admin/import", body)
		if err != nil || st != 200 || b["applied"] != float64(len(lines)) {
			t.Fatalf("import run %d at us-1: %d %v %v, want %d applied", run, st, b, err, len(lines))
		}
	}
	for _, u := range urls {
		testkit.WaitFor(t, 30*time.Second, func() error {
			for item, n := range likes {
				st, b, err := testkit.DoJSON("GET", u+"/v1/likes/"+item, "")
				if err != nil || st != 200 || b["count"] != float64(n) {
					return fmt.Errorf("%s reads %s as %d %v %v, want %d", u, item, st, b, err, n)
				}
			}
			for k, v := range views {
				st, b, err := testkit.DoJSON("GET", u+"/v1/counters/"+k, "")
				if err != nil || st != 200 || b["value"] != float64(v) {
					return fmt.Errorf("%s reads %s as %d %v %v, want %d", u, k, st, b, err, v)
				}
			}
			return nil
		})
	}
}

// seriesOfKeysOnSeveralShards: a series of keys on several shards at any
// replica: each shard's keys read at a holder over the one range the
// replica asked computed, the lines in the keys' order.
func seriesOfKeysOnSeveralShards(t *testing.T, urls []string) {
	var keys []string
	q := url.Values{"kind": {"counters"}, "last": {"10m"}, "step": {"1m"}}
	for i := range 8 {
		k := fmt.Sprintf("plays:%d", i)
		keys = append(keys, k)
		q.Add("key", k)
		for range i + 1 {
			if st, b, err := testkit.DoJSON("POST", urls[i%3]+"/v1/counters/"+k+"/incr", `{"by":1}`); err != nil || st != 200 {
				t.Fatalf("incr %s: %d %v %v", k, st, b, err)
			}
		}
	}
	q.Add("key", "*")
	for _, u := range urls {
		testkit.WaitFor(t, 30*time.Second, func() error {
			st, b, err := testkit.DoJSON("GET", u+"/v1/series?"+q.Encode(), "")
			if err != nil || st != 200 {
				return fmt.Errorf("%s: series %d %v %v", u, st, b, err)
			}
			lines, _ := b["series"].([]any)
			if len(lines) != len(keys)+1 {
				return fmt.Errorf("%s: %d lines for %d keys", u, len(lines), len(keys)+1)
			}
			total := 0.0
			for i, l := range lines {
				line, _ := l.(map[string]any)
				sum := 0.0
				vals, _ := line["values"].([]any)
				for _, v := range vals {
					f, _ := v.(float64)
					sum += f
				}
				want, key := float64(i+1), "*"
				if i < len(keys) {
					key = keys[i]
					total += want
				} else {
					want = total
				}
				if line["key"] != key || sum != want {
					return fmt.Errorf("%s: line %d is %v summing %v, want %s summing %v", u, i, line["key"], sum, key, want)
				}
			}
			return nil
		})
	}
}
