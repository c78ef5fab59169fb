package httpapi

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tally-dev/tally/internal/base/buildtags"
	"github.com/tally-dev/tally/internal/base/failpoint"
	"github.com/tally-dev/tally/shard"
)

// hotEnv serves items under "viral:" split in three parts, unsharded: the
// parts live on this replica alike.
func hotEnv(t *testing.T, splitTwoParts bool) *env {
	return newEnv(t, envOpts{api: func(c *Config) {
		c.Hot = shard.Hot{{Prefix: "viral:", Parts: 3}}
		if splitTwoParts {
			fp, err := failpoint.New(failpoint.SplitTwoParts)
			if err != nil {
				t.Fatal(err)
			}
			c.Failpoints = fp
		}
	}})
}

func hotNum(t *testing.T, v any) int {
	t.Helper()
	n, ok := v.(json.Number)
	if !ok {
		t.Fatalf("%v is not a number", v)
	}
	i, err := n.Int64()
	if err != nil {
		t.Fatal(err)
	}
	return int(i)
}

// likeUnlike has 30 users like viral:1 (one of them twice, once by POST
// /v1/likes), and users 0..4 unlike it again, by both unlike routes and a
// batch of events; it returns the item's count as read.
func likeUnlike(t *testing.T, e *env) int {
	t.Helper()
	for u := range 30 {
		if r := e.do("PUT", fmt.Sprintf("/v1/likes/viral:1/u%d", u), ""); r.status != 200 || hotNum(t, r.body["parts"]) != 3 {
			t.Fatalf("like: %d %s", r.status, r.raw)
		}
	}
	if r := e.do("POST", "/v1/likes", `{"item":"viral:1","userId":"u7"}`); r.status != 200 || r.body["changed"] != false {
		t.Fatalf("a second like of u7: %d %s", r.status, r.raw)
	}
	for u := range 2 {
		if r := e.do("DELETE", fmt.Sprintf("/v1/likes/viral:1/u%d", u), ""); r.status != 200 {
			t.Fatalf("unlike: %d %s", r.status, r.raw)
		}
	}
	if r := e.do("DELETE", "/v1/likes/viral:1", `{"userId":"u2"}`); r.status != 200 {
		t.Fatalf("unlike by body: %d %s", r.status, r.raw)
	}
	if r := e.do("POST", "/v1/events", `[{"type":"unlike","item":"viral:1","user":"u3"},{"type":"unlike","item":"viral:1","user":"u4"},{"type":"like","item":"calm","user":"u4"}]`); r.status != 200 || hotNum(t, r.body["applied"]) != 3 {
		t.Fatalf("events: %d %s", r.status, r.raw)
	}
	r := e.do("GET", "/v1/likes/viral:1", "")
	if r.status != 200 || hotNum(t, r.body["parts"]) != 3 || r.body["partial"] != nil {
		t.Fatalf("read: %d %s", r.status, r.raw)
	}
	return hotNum(t, r.body["count"])
}

// A split item's likes go to the users' parts, each counted once, and a
// read sums the parts; one part reads alone with ?part=k; the like state
// and the likers are the users'. Outside a chaos build the flag of the
// bug split-user-two-parts is set, and changes nothing.
func TestHotItemParts(t *testing.T) {
	e := hotEnv(t, !buildtags.Chaos)
	if n := likeUnlike(t, e); n != 25 {
		t.Fatalf("viral:1 counts %d, want 25", n)
	}
	sum, nonEmpty := 0, 0
	for k := range 3 {
		r := e.do("GET", fmt.Sprintf("/v1/likes/viral:1?part=%d", k), "")
		if r.status != 200 {
			t.Fatalf("part %d: %d %s", k, r.status, r.raw)
		}
		c := hotNum(t, r.body["count"])
		sum += c
		if c > 0 {
			nonEmpty++
		}
		if rd, err := e.rep.Likes().Count(fmt.Sprintf("viral:1|%d", k)); err != nil || rd.Value != int64(c) {
			t.Fatalf("part %d reads %d, stored %v %v", k, c, rd.Value, err)
		}
	}
	if sum != 25 || nonEmpty != 3 {
		t.Fatalf("parts sum to %d over %d parts, want 25 over 3", sum, nonEmpty)
	}
	if rd, _ := e.rep.Likes().Count("viral:1"); rd.Value != 0 {
		t.Fatalf("the item's own vector holds %d: likes went there, not to parts", rd.Value)
	}
	if r := e.do("GET", "/v1/likes/viral:1?part=3", ""); r.status != 400 {
		t.Fatalf("part 3 of 3: %d %s", r.status, r.raw)
	}
	for u, want := range map[string]bool{"u0": false, "u5": true, "u29": true} {
		if r := e.do("GET", "/v1/likes/viral:1/"+u, ""); r.status != 200 || r.body["liked"] != want {
			t.Fatalf("%s likes viral:1: %s, want %v", u, r.raw, want)
		}
	}
	r := e.do("GET", "/v1/likers/viral:1?limit=10", "")
	users := r.body["users"].([]any)
	if r.status != 200 || len(users) != 10 || users[0].(map[string]any)["id"] != "u10" || r.body["next"] != "u19" {
		t.Fatalf("likers: %d %s", r.status, r.raw)
	}
	if r := e.do("GET", "/v1/likes/calm", ""); r.body["parts"] != nil || hotNum(t, r.body["count"]) != 1 {
		t.Fatalf("an item not split: %s", r.raw)
	}
	if r := e.do("PUT", "/v1/likes/viral:1%7C0/u1", ""); r.status != 400 {
		t.Fatalf("a client naming a part: %d %s", r.status, r.raw)
	}
	if !strings.Contains(e.do("PUT", "/v1/likes/viral:2/u1", "").raw, `"part":`) {
		t.Fatal("a like of a split item does not say its part")
	}
	// A user's likes and a feed name the item, never a part.
	if r := e.do("GET", "/v1/users/u5/likes", ""); r.status != 200 || !strings.Contains(r.raw, `"id":"viral:1"`) || strings.Contains(r.raw, "|") {
		t.Fatalf("u5's likes: %d %s", r.status, r.raw)
	}
	if r := e.do("GET", "/v1/feed?user=u5&items=viral:1,calm", ""); r.status != 200 ||
		!strings.Contains(r.raw, `{"item":"viral:1","count":25,"liked":true}`) || !strings.Contains(r.raw, `{"item":"calm","count":1,"liked":false}`) {
		t.Fatalf("feed: %d %s", r.status, r.raw)
	}
	// Windows, series and trending sum the parts, and name the item.
	if r := e.do("GET", "/v1/likes/viral:1/window?last=1h", ""); r.status != 200 || hotNum(t, r.body["value"]) != 25 || r.body["key"] != "viral:1" || hotNum(t, r.body["parts"]) != 3 {
		t.Fatalf("window: %d %s", r.status, r.raw)
	}
	if r := e.do("GET", "/v1/likes/viral:1/window?last=1h&part=1", ""); r.status != 200 || r.body["key"] != "viral:1|1" {
		t.Fatalf("window of part 1: %d %s", r.status, r.raw)
	}
	if r := e.do("GET", "/v1/window?kind=likes&key=viral:1&last=1h", ""); r.status != 200 || hotNum(t, r.body["value"]) != 25 {
		t.Fatalf("window by query: %d %s", r.status, r.raw)
	}
	if r := e.do("GET", "/v1/series?kind=likes&key=viral:1&key=calm&last=1h&step=1h", ""); r.status != 400 {
		t.Fatalf("series of a split item and another: %d %s", r.status, r.raw)
	}
	for _, path := range []string{"/v1/likes/viral:1/series?last=1h&step=1h", "/v1/series?kind=likes&key=viral:1&last=1h&step=1h"} {
		r = e.do("GET", path, "")
		if r.status != 200 || hotNum(t, r.body["parts"]) != 3 {
			t.Fatalf("%s: %d %s", path, r.status, r.raw)
		}
		total := 0
		for _, v := range r.body["series"].([]any)[0].(map[string]any)["values"].([]any) {
			total += hotNum(t, v)
		}
		if total != 25 || r.body["series"].([]any)[0].(map[string]any)["key"] != "viral:1" {
			t.Fatalf("%s sums to %d, want 25 of viral:1: %s", path, total, r.raw)
		}
	}
	for _, window := range []string{"10m", "all"} {
		r = e.do("GET", "/v1/trending?n=3&window="+window, "")
		items := r.body["items"].([]any)
		if r.status != 200 || len(items) != 3 || items[0].(map[string]any)["item"] != "viral:1" || hotNum(t, items[0].(map[string]any)["count"]) != 25 ||
			items[1].(map[string]any)["item"] != "calm" || items[2].(map[string]any)["item"] != "viral:2" {
			t.Fatalf("trending %s: %d %s", window, r.status, r.raw)
		}
	}
}
