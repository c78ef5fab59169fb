package resp_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/node"
	"github.com/tally-dev/tally/shard"
)

// SADD and SREM of an item split into parts go to each user's part, as
// the HTTP API's likes do: SCARD and HTTP read the same sum, and a
// user's SREM undoes the like wherever it was sent; listing the members
// is refused with a pointer to HTTP.
func TestRESPHotItem(t *testing.T) {
	n := startNode(t, func(c *node.Config) { c.Hot = []node.HotConfig{{Prefix: "viral:", Splits: 3}} })
	ctx := context.Background()
	c := client(t, n, 2, "")
	users := make([]any, 20)
	for i := range users {
		users[i] = fmt.Sprintf("u%d", i)
	}
	if added, err := c.SAdd(ctx, "likes:viral:1", users...).Result(); err != nil || added != 20 {
		t.Fatalf("SADD: %d %v", added, err)
	}
	base := "http://" + n.Addr().String()
	if code, b := testkit.CallJSON(t, "PUT", base+"/v1/likes/viral:1/u3"); code != 200 || b["changed"] != false {
		t.Fatalf("HTTP like of a RESP like: %d %v", code, b)
	}
	if removed, err := c.SRem(ctx, "likes:viral:1", "u0", "u1").Result(); err != nil || removed != 2 {
		t.Fatalf("SREM: %d %v", removed, err)
	}
	if card, err := c.SCard(ctx, "likes:viral:1").Result(); err != nil || card != 18 {
		t.Fatalf("SCARD: %d %v", card, err)
	}
	if code, b := testkit.CallJSON(t, "GET", base+"/v1/likes/viral:1"); code != 200 || b["count"] != 18.0 || b["parts"] != 3.0 {
		t.Fatalf("HTTP read: %d %v", code, b)
	}
	if m, err := c.SIsMember(ctx, "likes:viral:1", "u5").Result(); err != nil || !m {
		t.Fatalf("SISMEMBER u5: %v %v", m, err)
	}
	if m, err := c.SIsMember(ctx, "likes:viral:1", "u0").Result(); err != nil || m {
		t.Fatalf("SISMEMBER u0: %v %v", m, err)
	}
	_, err := c.SMembers(ctx, "likes:viral:1").Result()
	wantErr(t, err, "ERR", "bad_request")

	// The keyspace shows the split item once, as one set, also when its
	// first part has no like.
	user := "u0"
	for i := 0; shard.PartOf(user, 3) == 0; i++ {
		user = fmt.Sprint("u", i)
	}
	if err := c.SAdd(ctx, "likes:viral:2", user).Err(); err != nil {
		t.Fatal(err)
	}
	if got := scanAll(t, c, "", 2, ""); fmt.Sprint(got) != "[likes:viral:1 likes:viral:2]" {
		t.Fatalf("SCAN: %v", got)
	}
	if v, err := c.DBSize(ctx).Result(); err != nil || v != 2 {
		t.Fatalf("DBSIZE: %d %v", v, err)
	}
	if v, err := c.Type(ctx, "likes:viral:1").Result(); err != nil || v != "set" {
		t.Fatalf("TYPE: %q %v", v, err)
	}
}
