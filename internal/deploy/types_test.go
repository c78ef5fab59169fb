package deploy_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/testkit"
)

// Event types across regions: a type registered in us reaches eu and ap
// (GET /v1/types, and reads with ?with=meta); marked inactive in us while
// eu is cut off, it leaves eu taking writes of its keys until the heal,
// and after it eu refuses them with 409 inactive_type too; active again
// from eu, us takes them again.
func TestTypesThroughCutAndHeal(t *testing.T) {
	startsRegions(t, "starts three regions")
	urls := startReadyDeployment(t)
	us, eu := urls[0], urls[1]
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
	if b := do("GET", eu+"/v1/types", "", 200); len(b["types"].([]any)) != 1 {
		t.Fatalf("types: %v", b)
	}
}
