package deploy_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// Issue 34's likes, on a whole deployment: an unlike at t, then a like
// stamped t − 30 s arriving later at a region cut off from the first
// (which takes it, with a later HLC) and at one that has the unlike
// (which drops it): unliked everywhere after the heal, the count exact.
// A toggle retried at another region once it is there is a duplicate;
// toggles at two regions at once reconcile to one state, counted once.
// A keyed toggle, like or unlike retried after the user's next action is
// a duplicate in its region and in every region it reached.
func TestLikeClientTimeAndTogglesThroughCutAndHeal(t *testing.T) {
	startsThreeRegions(t, "starts three regions")
	urls := startReadyDeployment(t)
	us, eu, ap := urls[0], urls[1], urls[2]
	do := func(method, url, body string) map[string]any {
		t.Helper()
		st, b, err := testkit.DoJSON(method, url, body)
		if err != nil || st != 200 {
			t.Fatalf("%s %s %s: %d %v %v", method, url, body, st, b, err)
		}
		return b
	}
	link := func(from, to string, up bool) {
		t.Helper()
		do("PUT", us+"/v1/admin/links/"+from+"/"+to, fmt.Sprintf(`{"up":%v}`, up))
	}
	agree := func(item string, count float64, liked map[string]bool) {
		t.Helper()
		testkit.WaitFor(t, 20*time.Second, func() error {
			for _, u := range urls {
				_, b, err := testkit.DoJSON("GET", u+"/v1/likes/"+item, "")
				if err != nil {
					return err
				}
				if b["count"] != count || b["approx"] != false {
					return fmt.Errorf("%s %s: %v, want count %v, exact", u, item, b, count)
				}
				for user, want := range liked {
					if _, b, err := testkit.DoJSON("GET", u+"/v1/likes/"+item+"/"+user, ""); err != nil || b["liked"] != want {
						return fmt.Errorf("%s %s/%s: %v %v, want liked %v", u, item, user, b, err, want)
					}
				}
			}
			return nil
		})
	}

	do("PUT", us+"/v1/likes/post7/alice", "")
	agree("post7", 1, map[string]bool{"alice": true})
	link("us", "eu", false)
	link("us", "ap", false)
	now := time.Now().UnixMilli()
	if b := do("DELETE", us+"/v1/likes/post7/alice", fmt.Sprintf(`{"at":%d}`, now)); b["liked"] != false || b["changed"] != true {
		t.Fatalf("unlike at t: %v", b)
	}
	// eu has not heard of the unlike: it takes the late like.
	if b := do("POST", eu+"/v1/likes", fmt.Sprintf(`{"videoId":"post7","userId":"alice","at":%d}`, now-30_000)); b["liked"] != true {
		t.Fatalf("late like at eu, cut off: %v", b)
	}
	link("us", "eu", true)
	link("us", "ap", true)
	agree("post7", 0, map[string]bool{"alice": false})
	// ap has the unlike now: the same late like changes nothing there.
	if b := do("PUT", ap+"/v1/likes/post7/alice", fmt.Sprintf(`{"at":%d}`, now-30_000)); b["liked"] != false || b["changed"] != false {
		t.Fatalf("late like at ap, after the heal: %v", b)
	}

	// A toggle, then its retry at another region once it is there.
	if b := do("POST", us+"/v1/likes/post8/bob/toggle", `{"idempotency_key":"tap-1"}`); b["liked"] != true || b["changed"] != true {
		t.Fatalf("toggle: %v", b)
	}
	agree("post8", 1, map[string]bool{"bob": true})
	if b := do("POST", eu+"/v1/likes/post8/bob/toggle", `{"idempotency_key":"tap-1"}`); b["liked"] != true || b["duplicate"] != true || b["count"] != float64(1) {
		t.Fatalf("toggle retried at eu: %v", b)
	}
	// Toggles of one user in two regions cut apart: each flips what it
	// sees (unliked: liked), and the count ends at one.
	link("us", "eu", false)
	for _, u := range []string{us, eu} {
		if b := do("POST", u+"/v1/likes/post8/carol/toggle", ""); b["liked"] != true {
			t.Fatalf("toggle at %s: %v", u, b)
		}
	}
	link("us", "eu", true)
	agree("post8", 2, map[string]bool{"bob": true, "carol": true})

	// reached waits until every region has the user's latest action on
	// the item that us has (its time and replica): that the state agrees
	// is not enough when the last action restored the state before the
	// first.
	reached := func(item, user string) {
		t.Helper()
		want := do("GET", us+"/v1/likes/"+item+"/"+user, "")
		if want["at"] == nil || want["replica"] == nil {
			t.Fatalf("us %s/%s: %v, want the deciding action's time and replica", item, user, want)
		}
		testkit.WaitFor(t, 20*time.Second, func() error {
			for _, u := range urls {
				_, b, err := testkit.DoJSON("GET", u+"/v1/likes/"+item+"/"+user, "")
				if err != nil || b["at"] != want["at"] || b["replica"] != want["replica"] || b["liked"] != want["liked"] {
					return fmt.Errorf("%s %s/%s: %v %v, want %v", u, item, user, b, err, want)
				}
			}
			return nil
		})
	}

	// A toggle's key outlives the user's next action: toggle tkB (liked),
	// toggle tkC (unliked), retry tkB: a duplicate that flips nothing, in
	// the region that took both and, once they are there, in the others.
	toggle := func(u, key string) map[string]any {
		t.Helper()
		return do("POST", u+"/v1/likes/post9/dan/toggle", fmt.Sprintf(`{"idempotency_key":%q}`, key))
	}
	if b := toggle(us, "tkB"); b["liked"] != true || b["changed"] != true {
		t.Fatalf("tkB: %v", b)
	}
	if b := toggle(us, "tkC"); b["liked"] != false || b["changed"] != true {
		t.Fatalf("tkC: %v", b)
	}
	retried := func(b map[string]any, liked bool) bool {
		return b["duplicate"] == true && b["changed"] == false && b["liked"] == liked && b["count"] == float64(0)
	}
	if b := toggle(us, "tkB"); !retried(b, true) {
		t.Fatalf("tkB retried at us after tkC: %v, want a duplicate answering liked, count 0", b)
	}
	reached("post9", "dan")
	for _, u := range []string{eu, ap} {
		if b := toggle(u, "tkB"); !retried(b, true) {
			t.Fatalf("tkB retried at %s: %v", u, b)
		}
		if b := toggle(u, "tkC"); !retried(b, false) {
			t.Fatalf("tkC retried at %s: %v", u, b)
		}
	}
	agree("post9", 0, map[string]bool{"dan": false})

	// The same for a keyed like and a keyed unlike, by the route and by
	// an event: a like retried after the unlike likes nothing, anywhere.
	if b := do("PUT", us+"/v1/likes/post10/erin", `{"idempotency_key":"lk1"}`); b["liked"] != true || b["changed"] != true {
		t.Fatalf("keyed like: %v", b)
	}
	if b := do("DELETE", us+"/v1/likes/post10/erin", `{"idempotency_key":"lu1"}`); b["liked"] != false || b["changed"] != true {
		t.Fatalf("keyed unlike: %v", b)
	}
	if b := do("PUT", us+"/v1/likes/post10/erin", `{"idempotency_key":"lk1"}`); !retried(b, true) {
		t.Fatalf("like lk1 retried at us after the unlike: %v", b)
	}
	reached("post10", "erin")
	if b := do("PUT", ap+"/v1/likes/post10/erin", `{"idempotency_key":"lk1"}`); !retried(b, true) {
		t.Fatalf("like lk1 retried at ap: %v", b)
	}
	if b := do("DELETE", eu+"/v1/likes/post10/erin", `{"idempotency_key":"lu1"}`); !retried(b, false) {
		t.Fatalf("unlike lu1 retried at eu: %v", b)
	}
	b := do("POST", eu+"/v1/events", `{"type":"like","item":"post10","user":"erin","idempotency_key":"lk1"}`+"\n")
	if r, _ := b["results"].([]any); len(r) != 1 || r[0].(map[string]any)["duplicate"] != true || r[0].(map[string]any)["value"] != float64(0) {
		t.Fatalf("like lk1 retried as an event at eu: %v", b)
	}
	agree("post10", 0, map[string]bool{"erin": false})
}
