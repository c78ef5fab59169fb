package deploy_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/internal/deploy"
	"github.com/tally-dev/tally/shard"
)

// Event types across regions: a type registered in us reaches eu and ap
// (GET /v1/types, and reads with ?with=meta); marked inactive in us while
// eu is cut off, it leaves eu taking writes of its keys until the heal,
// and after it eu refuses them with 409 inactive_type too; active again
// from eu, us takes them again, and every region reads the same exact
// total of the type (GET /v1/types/{name}/total), split by region.
func TestTypesThroughCutAndHeal(t *testing.T) {
	startsThreeRegions(t, "starts three regions")
	urls := startReadyDeployment(t)
	us, eu, ap := urls[0], urls[1], urls[2]
	do := func(method, url, body string, want int) map[string]any {
		t.Helper()
		st, b, err := testkit.DoJSON(method, url, body)
		if err != nil || st != want {
			t.Fatalf("%s %s: %d %v %v, want %d", method, url, st, b, err, want)
		}
		return b
	}
	status := func(want string, regions ...string) {
		t.Helper()
		testkit.WaitFor(t, 20*time.Second, func() error {
			for _, u := range regions {
				st, b, err := testkit.DoJSON("GET", u+"/v1/types/video", "")
				if err != nil || st != 200 || b["status"] != want || b["owner"] != "media" {
					return fmt.Errorf("%s: %d %v %v", u, st, b, err)
				}
			}
			return nil
		})
	}
	cut := func(up bool) { t.Helper(); setEULinks(t, eu, up) }

	do("PUT", us+"/v1/types/video", `{"owner":"media","description":"views of a video"}`, 200)
	status("active", urls...)
	do("POST", eu+"/v1/counters/video:v123/incr", `{"by":2}`, 200)
	testkit.WaitFor(t, 20*time.Second, func() error {
		for _, u := range urls {
			_, b, err := testkit.DoJSON("GET", u+"/v1/counters/video:v123?with=meta", "")
			if m, _ := b["meta"].(map[string]any); err != nil || b["value"] != float64(2) || m["type"] != "video" || m["description"] != "views of a video" {
				return fmt.Errorf("%s: %v %v", u, b, err)
			}
		}
		return nil
	})

	cut(false)
	do("PUT", us+"/v1/types/video", `{"owner":"media","status":"inactive"}`, 200)
	status("inactive", urls[0], urls[2])
	do("POST", us+"/v1/counters/video:v123/incr", "", 409)
	do("POST", eu+"/v1/counters/video:v123/incr", "", 200) // eu has not heard
	if b := do("GET", eu+"/v1/types/video", "", 200); b["status"] != "active" {
		t.Fatalf("eu, cut off, already sees %v", b)
	}
	cut(true)
	status("inactive", urls...)
	if b := do("POST", eu+"/v1/counters/video:v124/incr", "", 409); b["code"] != "inactive_type" {
		t.Fatalf("eu after the heal: %v", b)
	}
	do("PUT", eu+"/v1/likes/video:v1/u456", "", 409)
	do("POST", eu+"/v1/counters/other/incr", "", 200) // a key of no type

	// The one eu took while cut off counts everywhere.
	testkit.WaitFor(t, 20*time.Second, func() error {
		for _, u := range urls {
			if _, b, err := testkit.DoJSON("GET", u+"/v1/counters/video:v123", ""); err != nil || b["value"] != float64(3) {
				return fmt.Errorf("%s: %v %v", u, b, err)
			}
		}
		return nil
	})

	do("PUT", eu+"/v1/types/video", `{"owner":"media","status":"active"}`, 200)
	status("active", urls...)
	do("POST", us+"/v1/counters/video:v123/incr", "", 200)
	do("POST", ap+"/v1/counters/video:v9/incr", `{"by":5}`, 200)
	// The type's total, summed over its keys from every region, is the
	// same exact sum at each: 4 of video:v123 and 5 of video:v9.
	testkit.WaitFor(t, 20*time.Second, func() error {
		for _, u := range urls {
			st, b, err := testkit.DoJSON("GET", u+"/v1/types/video/total", "")
			regions, _ := b["regions"].(map[string]any)
			if err != nil || st != 200 || b["value"] != float64(9) || b["keys"] != float64(2) || b["approx"] != false ||
				len(regions) != 3 || regions["us"] != float64(1) || regions["eu"] != float64(3) || regions["ap"] != float64(5) {
				return fmt.Errorf("%s: total %d %v %v, want 9 of 2 keys (us 1, eu 3, ap 5), exact", u, st, b, err)
			}
		}
		return nil
	})
	if b := do("GET", eu+"/v1/types", "", 200); len(b["types"].([]any)) != 1 {
		t.Fatalf("types: %v", b)
	}
}

// GET /v1/types/{name}/window in two regions of two replicas each, every
// shard held once: increments booked in us in one minute and in eu in
// the next, on keys of every replica's shards, read at each replica over
// each minute, give the same exact sums everywhere, split by region, a
// key of no type left out.
func TestTypeWindowAcrossShardedRegions(t *testing.T) {
	startsSmallRegions(t, "starts four replicas")
	cfg := deploy.DefaultConfig()
	cfg.Regions, cfg.Replicas, cfg.Copies, cfg.Milestones = []string{"us", "eu"}, 2, 1, ""
	d := startConfig(t, cfg)
	urls := d.URLs() // us-1 us-2 eu-1 eu-2
	waitReady(t, urls)
	held := getShards(t, urls[0]).Held("us-1")
	if st, b, err := testkit.DoJSON("PUT", urls[0]+"/v1/types/video", `{"owner":"media"}`); err != nil || st != 200 {
		t.Fatalf("put type: %d %v %v", st, b, err)
	}
	// Two whole minutes within the event times a write may carry.
	base := time.Now().Add(-4 * time.Minute).Truncate(time.Minute).Add(time.Minute).UnixMilli()
	wantA, wantB, notHeld := int64(0), int64(0), 0
	for i := range 8 {
		key := fmt.Sprintf("video:k%d", i)
		if !held.Has(shard.Of(key)) {
			notHeld++
		}
		body := fmt.Sprintf(`{"by":%d,"at":%d}`, i+1, base+5_000)
		if st, b, err := testkit.DoJSON("POST", urls[i%2]+"/v1/counters/"+key+"/incr", body); err != nil || st != 200 {
			t.Fatalf("incr %s in us: %d %v %v", key, st, b, err)
		}
		wantA += int64(i + 1)
		body = fmt.Sprintf(`{"by":%d,"at":%d}`, 10*(i+1), base+65_000)
		if st, b, err := testkit.DoJSON("POST", urls[2+i%2]+"/v1/counters/"+key+"/incr", body); err != nil || st != 200 {
			t.Fatalf("incr %s in eu: %d %v %v", key, st, b, err)
		}
		wantB += int64(10 * (i + 1))
	}
	if notHeld == 0 || notHeld == 8 {
		t.Fatalf("%d of 8 keys on shards us-1 does not hold: want some of each", notHeld)
	}
	if st, b, err := testkit.DoJSON("POST", urls[1]+"/v1/counters/other/incr", fmt.Sprintf(`{"by":100,"at":%d}`, base+5_000)); err != nil || st != 200 {
		t.Fatalf("incr other: %d %v %v", st, b, err)
	}
	for _, c := range []struct {
		from   int64
		want   int64
		region string
	}{{base, wantA, "us"}, {base + 60_000, wantB, "eu"}} {
		for _, u := range urls {
			testkit.WaitFor(t, 30*time.Second, func() error {
				st, b, err := testkit.DoJSON("GET", fmt.Sprintf("%s/v1/types/video/window?from=%d&to=%d", u, c.from, c.from+60_000), "")
				regions, _ := b["regions"].(map[string]any)
				if err != nil || st != 200 || b["value"] != float64(c.want) || b["keys"] != float64(8) || b["approx"] != false ||
					b["partial"] != nil || b["shards"] != nil || len(regions) != 1 || regions[c.region] != float64(c.want) {
					return fmt.Errorf("%s: %d %v %v, want value %d of 8 keys, all %s", u, st, b, err, c.want, c.region)
				}
				return nil
			})
		}
	}
}
