package deploy_test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/httpapi"
	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/internal/deploy"
	"github.com/tally-dev/tally/node"
	"github.com/tally-dev/tally/shard"
)

// A hot item split in three parts, in three regions of three replicas
// with two copies: its likes, sent to random replicas of every region,
// are served by the holders of the user's part, which spread them over
// more than one replica per region; a user's like sent twice, at two
// replicas, counts once; every replica of every region reads the exact
// count, like states and likers, after a cut and a heal too.
func TestHotItemSplitOverShards(t *testing.T) {
	startsShardedRegions(t, "starts nine replicas")
	const item, parts = "viral:1", 3
	cfg := deploy.DefaultConfig()
	cfg.Replicas, cfg.Copies = 3, 2
	cfg.Node = func(c *node.Config) { c.Hot = []node.HotConfig{{Prefix: "viral:", Splits: parts}} }
	d := startConfig(t, cfg)
	urls, cfgs := d.URLs(), d.Configs()
	waitReady(t, urls)
	maps := map[string]shard.Map{}
	for i, u := range urls {
		maps[cfgs[i].Region] = getShards(t, u)
	}
	hot := cfgs[0].HotItems()

	rng := rand.New(rand.NewPCG(31, 2))
	users := map[string]bool{}
	servedBy := map[string]map[string]bool{} // region -> replicas that served a like
	send := func(i int, method, path, body, user string) {
		t.Helper()
		req, _ := http.NewRequest(method, urls[i]+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s at %s: %d %s", method, path, cfgs[i].Replica, resp.StatusCode, b)
		}
		by := resp.Header.Get(httpapi.ServedByHeader)
		region := cfgs[i].Region
		if holders := maps[region].Holders(shard.Of(hot.Name(item, user))); !slices.Contains(holders, by) {
			t.Fatalf("%s %s of %s at %s was served by %q, not by a holder %v of its part", method, path, user, cfgs[i].Replica, by, holders)
		}
		if servedBy[region] == nil {
			servedBy[region] = map[string]bool{}
		}
		servedBy[region][by] = true
	}
	like := func(i int, user string) {
		t.Helper()
		if rng.IntN(2) == 0 {
			send(i, "PUT", "/v1/likes/"+item+"/"+user, "", user)
		} else {
			send(i, "POST", "/v1/likes", fmt.Sprintf(`{"item":%q,"userId":%q}`, item, user), user)
		}
		users[user] = true
	}
	for n := range 150 {
		user := fmt.Sprintf("fan%d", n)
		like(rng.IntN(len(urls)), user)
		if n%5 == 0 { // the same user again, at another random replica: counted once
			like(rng.IntN(len(urls)), user)
		}
	}
	for n := range 20 { // unlikes at random replicas, half by the body route
		user := fmt.Sprintf("fan%d", n*7)
		if n%2 == 0 {
			send(rng.IntN(len(urls)), "DELETE", "/v1/likes/"+item+"/"+user, "", user)
		} else {
			send(rng.IntN(len(urls)), "DELETE", "/v1/likes/"+item, fmt.Sprintf(`{"userId":%q}`, user), user)
		}
		delete(users, user)
	}
	for region, by := range servedBy {
		if len(by) < 2 {
			t.Errorf("region %s: the hot item's likes were all served by %v, want at least two replicas", region, by)
		}
	}
	// A batch of events at one replica: each like goes to its user's part.
	var batch []string
	for n := range 40 {
		user := fmt.Sprintf("batch%d", n)
		batch = append(batch, fmt.Sprintf(`{"type":"like","item":%q,"user":%q}`, item, user))
		users[user] = true
	}
	batch = append(batch, fmt.Sprintf(`{"type":"like","item":%q,"user":"fan1"}`, item)) // liked already
	if st, ans, err := testkit.DoJSON("POST", urls[4]+"/v1/events", "["+strings.Join(batch, ",")+"]"); err != nil || st != 200 || ans["applied"] != float64(41) {
		t.Fatalf("a batch of the hot item's likes: %d %v %v", st, ans, err)
	}

	exact := func() error {
		want := make([]string, 0, len(users))
		for u := range users {
			want = append(want, u)
		}
		sort.Strings(want)
		for i, u := range urls {
			_, b, err := testkit.DoJSON("GET", u+"/v1/likes/"+item, "")
			if err != nil {
				return err
			}
			if b["count"] != float64(len(users)) || b["approx"] != false || b["parts"] != float64(parts) || b["partial"] != nil {
				return fmt.Errorf("%s: %s = %v, want %d, not approx", cfgs[i].Replica, item, b, len(users))
			}
			var sum float64
			for k := range parts {
				_, p, err := testkit.DoJSON("GET", fmt.Sprintf("%s/v1/likes/%s?part=%d", u, item, k), "")
				if err != nil {
					return err
				}
				c, _ := p["count"].(float64)
				if c == 0 {
					return fmt.Errorf("%s: part %d of %s is empty: %v", cfgs[i].Replica, k, item, p)
				}
				sum += c
			}
			if sum != float64(len(users)) {
				return fmt.Errorf("%s: the parts of %s sum to %v, want %d", cfgs[i].Replica, item, sum, len(users))
			}
			_, win, err := testkit.DoJSON("GET", u+"/v1/likes/"+item+"/window?last=1h", "")
			if err != nil {
				return err
			}
			if win["value"] != float64(len(users)) || win["partial"] != nil {
				return fmt.Errorf("%s: window of %s = %v, want %d", cfgs[i].Replica, item, win, len(users))
			}
			_, tr, err := testkit.DoJSON("GET", u+"/v1/trending?window=all&n=3", "")
			if err != nil {
				return err
			}
			if top, _ := tr["items"].([]any); len(top) != 1 || top[0].(map[string]any)["item"] != item || top[0].(map[string]any)["count"] != float64(len(users)) {
				return fmt.Errorf("%s: trending %v, want %s alone at %d", cfgs[i].Replica, tr["items"], item, len(users))
			}
			_, l, err := testkit.DoJSON("GET", u+"/v1/likers/"+item+"?limit=1000", "")
			if err != nil {
				return err
			}
			var got []string
			for _, e := range l["users"].([]any) {
				got = append(got, e.(map[string]any)["id"].(string))
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("%s: likers of %s: %d users, want %d", cfgs[i].Replica, item, len(got), len(want))
			}
			_, feed, err := testkit.DoJSON("GET", u+"/v1/feed?user=fan1&items="+item, "")
			if err != nil {
				return err
			}
			if it, _ := feed["items"].([]any); len(it) != 1 || it[0].(map[string]any)["count"] != float64(len(users)) || it[0].(map[string]any)["liked"] != true {
				return fmt.Errorf("%s: feed of fan1 %v, want %s at %d, liked", cfgs[i].Replica, feed, item, len(users))
			}
			_, ul, err := testkit.DoJSON("GET", u+"/v1/users/fan1/likes", "")
			if err != nil {
				return err
			}
			if it, _ := ul["items"].([]any); len(it) != 1 || it[0].(map[string]any)["id"] != item {
				return fmt.Errorf("%s: fan1's likes %v, want %s", cfgs[i].Replica, ul, item)
			}
			for _, user := range []string{"fan1", "fan7", "batch3"} {
				_, s, err := testkit.DoJSON("GET", u+"/v1/likes/"+item+"/"+user, "")
				if err != nil {
					return err
				}
				if s["liked"] != users[user] {
					return fmt.Errorf("%s: %s likes %s: %v, want %v", cfgs[i].Replica, user, item, s, users[user])
				}
			}
		}
		return nil
	}
	testkit.WaitFor(t, 30*time.Second, exact)

	// A two-item page of likers walks every liker, in order.
	var walked []string
	for page := urls[2] + "/v1/likers/" + item + "?limit=2"; ; {
		st, l, err := testkit.DoJSON("GET", page, "")
		if err != nil || st != 200 {
			t.Fatalf("GET %s: %d %v %v", page, st, l, err)
		}
		for _, e := range l["users"].([]any) {
			walked = append(walked, e.(map[string]any)["id"].(string))
		}
		next, _ := l["next"].(string)
		if next == "" {
			break
		}
		page = urls[2] + "/v1/likers/" + item + "?limit=2&after=" + next
	}
	if len(walked) != len(users) || !slices.IsSorted(walked) {
		t.Fatalf("likers walked by pages of two: %d, want %d in order", len(walked), len(users))
	}

	// Cut us from eu; the same new users like on both sides, others on
	// one; heal: each counted once everywhere.
	if st, b, err := testkit.DoJSON("PUT", urls[0]+"/v1/admin/links/us/eu", `{"up":false}`); err != nil || st != 200 {
		t.Fatalf("cut: %d %v %v", st, b, err)
	}
	var us, eu []int
	for i, c := range cfgs {
		switch c.Region {
		case "us":
			us = append(us, i)
		case "eu":
			eu = append(eu, i)
		}
	}
	for n := range 30 {
		user := fmt.Sprintf("cut%d", n)
		like(us[rng.IntN(len(us))], user)
		if n%2 == 0 {
			like(eu[rng.IntN(len(eu))], user)
		}
	}
	if st, _, err := testkit.DoJSON("PUT", urls[0]+"/v1/admin/links/us/eu", `{"up":true}`); err != nil || st != 200 {
		t.Fatalf("heal: %d %v", st, err)
	}
	testkit.WaitFor(t, 60*time.Second, exact)
}
