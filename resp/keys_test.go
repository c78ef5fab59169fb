package resp_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/resp"
	"github.com/tally-dev/tally/shard"
)

// GET of a key never written is nil, as in Redis; a counter back at 0
// is "0". EXISTS and TYPE see counters and unique counts as strings,
// likes as sets, and an emptied set as gone.
func TestKeyspaceAsRedisClientsExpect(t *testing.T) {
	n := startNode(t, nil)
	ctx := context.Background()
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			c := client(t, n, proto, "")
			p := fmt.Sprint(proto)
			if err := c.Get(ctx, "never"+p).Err(); err != redis.Nil {
				t.Fatalf("GET of a key never written: %v, want nil", err)
			}
			if err := c.Incr(ctx, "zero"+p).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.Decr(ctx, "zero"+p).Err(); err != nil {
				t.Fatal(err)
			}
			if v, err := c.Get(ctx, "zero"+p).Result(); err != nil || v != "0" {
				t.Fatalf("GET of a counter back at 0: %q %v", v, err)
			}
			if v, err := c.MGet(ctx, "zero"+p, "never"+p).Result(); err != nil || fmt.Sprint(v) != "[0 <nil>]" {
				t.Fatalf("MGET: %v %v", v, err)
			}
			if err := c.PFAdd(ctx, "uniq"+p, "a").Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.SAdd(ctx, "likes:set"+p, "alice").Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.SAdd(ctx, "likes:emptied"+p, "bob").Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.SRem(ctx, "likes:emptied"+p, "bob").Err(); err != nil {
				t.Fatal(err)
			}
			for key, want := range map[string]string{
				"zero" + p: "string", "uniq" + p: "string", "likes:set" + p: "set",
				"never" + p: "none", "likes:emptied" + p: "none", "likes:never" + p: "none",
			} {
				if v, err := c.Type(ctx, key).Result(); err != nil || v != want {
					t.Fatalf("TYPE %s: %q %v, want %q", key, v, err, want)
				}
			}
			if v, err := c.Exists(ctx, "zero"+p, "uniq"+p, "likes:set"+p, "never"+p, "likes:emptied"+p, "zero"+p).Result(); err != nil || v != 4 {
				t.Fatalf("EXISTS: %d %v, want 4 (a key named twice counts twice)", v, err)
			}
			wantErr(t, c.Exists(ctx, "a b").Err(), `ERR key "a b" is not valid`, "bad_id")
			wantErr(t, c.Type(ctx, "likes:").Err(), "ERR item is empty", "bad_id")
		})
	}
}

// INFO names tally and its version in its own fields; redis_version is
// there once, for clients that check it. CLIENT ID is unique per
// connection and HELLO reports the same id.
func TestInfoAndClientID(t *testing.T) {
	n := startNode(t, nil)
	ctx := context.Background()
	c := client(t, n, 2, "")
	info, err := c.Info(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(info, "# Server\r\nserver_name:tally\r\ntally_version:test\r\n") ||
		strings.Count(info, "redis_version:") != 1 || !strings.Contains(info, "redis_version:"+resp.RedisCompatVersion+"\r\n") ||
		!strings.Contains(info, "connected_clients:1\r\n") {
		t.Fatalf("INFO:\n%s", info)
	}
	ids := map[int64]bool{}
	for i := range 3 {
		c := client(t, n, 3, "")
		id, err := c.ClientID(ctx).Result()
		if err != nil || id <= 0 || ids[id] {
			t.Fatalf("connection %d: CLIENT ID %d %v; seen %v", i, id, err, ids)
		}
		ids[id] = true
		if again, err := c.ClientID(ctx).Result(); err != nil || again != id {
			t.Fatalf("CLIENT ID again on the same connection: %d %v, want %d", again, err, id)
		}
		hello, err := c.Do(ctx, "HELLO", "3").Result()
		if err != nil || fmt.Sprint(hello.(map[any]any)["id"]) != fmt.Sprint(id) {
			t.Fatalf("HELLO's id: %v %v, want %d", hello, err, id)
		}
	}
	// The RESP metrics are on the node's registry, at /metrics.
	wantErr(t, c.Get(ctx, "a b").Err(), "ERR", "bad_id")
	wantErr(t, c.Do(ctx, "FROB").Err(), "ERR unknown command", "not_found")
	for name, want := range map[string]float64{
		`tally_resp_commands_total{command="info"}`:                1,
		`tally_resp_commands_total{command="unknown"}`:             1,
		`tally_resp_command_duration_seconds_count{command="get"}`: 1,
		`tally_resp_errors_total{code="bad_id"}`:                   1,
		`tally_resp_errors_total{code="not_found"}`:                1,
	} {
		if v := metric(t, n, name); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
}

// In a sharded region, EXISTS and TYPE of a key on a shard this replica
// does not hold are refused, not forwarded.
func TestKeyCommandsRefuseUnheldShards(t *testing.T) {
	n := startNode(t, nil)
	here, there := "k:here", ""
	for i := 0; there == ""; i++ {
		if k := fmt.Sprint("k:there", i); shard.Of(k) != shard.Of(here) {
			there = k
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := resp.New(resp.Config{Replica: n.Replica(), Listener: ln, Shards: holdsOne{shard.Of(here)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	c := redis.NewClient(&redis.Options{Addr: s.Addr().String(), Protocol: 2, MaxRetries: -1, PoolSize: 1})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	if v, err := c.Exists(ctx, here).Result(); err != nil || v != 0 {
		t.Fatalf("EXISTS of a held key: %d %v", v, err)
	}
	wantErr(t, c.Exists(ctx, here, there).Err(), "ERR key \""+there+"\" is on shard", "shard_not_held")
	wantErr(t, c.Type(ctx, there).Err(), "ERR key \""+there+"\" is on shard", "shard_not_held")
	wantErr(t, c.Scan(ctx, 0, "", 10).Err(), "ERR SCAN is not served in a sharded region", "bad_request")
	wantErr(t, c.DBSize(ctx).Err(), "ERR DBSIZE is not served in a sharded region", "bad_request")
}

// scanAll runs SCAN to the end with opts and returns every key listed,
// failing on a key listed twice.
func scanAll(t *testing.T, c *redis.Client, match string, count int64, typ string) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	seen := map[string]bool{}
	cursor, pages := uint64(0), 0
	for {
		var keys []string
		var err error
		if typ != "" {
			keys, cursor, err = c.ScanType(ctx, cursor, match, count, typ).Result()
		} else {
			keys, cursor, err = c.Scan(ctx, cursor, match, count).Result()
		}
		if err != nil {
			t.Fatalf("SCAN page %d: %v", pages, err)
		}
		if int64(len(keys)) > count {
			t.Fatalf("SCAN page %d: %d keys, COUNT %d", pages, len(keys), count)
		}
		for _, k := range keys {
			if seen[k] {
				t.Fatalf("SCAN listed %q twice", k)
			}
			seen[k] = true
			out = append(out, k)
		}
		if pages++; cursor == 0 {
			break
		}
		if pages > 10000 {
			t.Fatal("SCAN does not end")
		}
	}
	slices.Sort(out)
	return out
}

// SCAN lists every counter and every set with members, once, by pages
// of at most COUNT keys; MATCH and TYPE filter; DBSIZE counts what SCAN
// lists. Unique counts are not listed.
func TestScanAndDBSize(t *testing.T) {
	n := startNode(t, nil)
	ctx := context.Background()
	c := client(t, n, 2, "")
	var counters, sets []string
	for i := range 30 {
		k := fmt.Sprintf("c:%d", i)
		if err := c.Incr(ctx, k).Err(); err != nil {
			t.Fatal(err)
		}
		counters = append(counters, k)
	}
	for i := range 10 {
		k := fmt.Sprintf("likes:s%d", i)
		if err := c.SAdd(ctx, k, "alice").Err(); err != nil {
			t.Fatal(err)
		}
		sets = append(sets, k)
	}
	if err := c.SAdd(ctx, "likes:emptied", "bob").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.SRem(ctx, "likes:emptied", "bob").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.PFAdd(ctx, "uniq", "x").Err(); err != nil {
		t.Fatal(err)
	}
	all := append(slices.Clone(counters), sets...)
	slices.Sort(all)
	slices.Sort(counters)
	slices.Sort(sets)
	if got := scanAll(t, c, "", 7, ""); !slices.Equal(got, all) {
		t.Fatalf("SCAN COUNT 7:\n got %v\nwant %v", got, all)
	}
	if got := scanAll(t, c, "", 1000, ""); !slices.Equal(got, all) {
		t.Fatalf("SCAN COUNT 1000:\n got %v\nwant %v", got, all)
	}
	if got := scanAll(t, c, "c:1*", 5, ""); fmt.Sprint(got) != "[c:1 c:10 c:11 c:12 c:13 c:14 c:15 c:16 c:17 c:18 c:19]" {
		t.Fatalf("SCAN MATCH c:1*: %v", got)
	}
	if got := scanAll(t, c, "", 3, "set"); !slices.Equal(got, sets) {
		t.Fatalf("SCAN TYPE set: %v", got)
	}
	if got := scanAll(t, c, "", 3, "string"); !slices.Equal(got, counters) {
		t.Fatalf("SCAN TYPE string: %v", got)
	}
	if v, err := c.DBSize(ctx).Result(); err != nil || v != 40 {
		t.Fatalf("DBSIZE: %d %v, want 40", v, err)
	}
	wantErr(t, c.Scan(ctx, 12345, "", 10).Err(), "ERR cursor 12345 is unknown here", "bad_request")
	wantErr(t, c.Do(ctx, "SCAN", "0", "COUNT").Err(), "ERR syntax error", "bad_request")
}
