package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// The tour's application example (docs/tour.md): `tallyd milestones follow` on a local
// deployment prints each milestone once, runs --exec for it, and after a
// restart under the same --durable name goes on where it left off.
func TestMilestonesFollow(t *testing.T) {
	t.Parallel()
	run := startLocal(t, "--milestones", "every:5")
	// startLocal returns once the replicas listen; the banner's line for
	// the follower comes after them.
	var nats []string
	testkit.WaitFor(t, 30*time.Second, func() error {
		if nats = regexp.MustCompile(`--nats (\S+) --durable`).FindStringSubmatch(run.out.String()); nats == nil {
			return fmt.Errorf("local's banner names no NATS URL for the follower:\n%s", run.out)
		}
		return nil
	})
	for _, u := range run.urls {
		testkit.WaitFor(t, 60*time.Second, func() error {
			if code, _, err := testkit.DoJSON("GET", u+"/readyz", ""); err != nil || code != 200 {
				return fmt.Errorf("%s not ready: %d %v", u, code, err)
			}
			return nil
		})
	}
	like := func(from, to int) {
		for i := from; i < to; i++ {
			code, _, err := testkit.DoJSON("PUT", fmt.Sprintf("%s/v1/likes/post/u%d", run.urls[i%3], i), "")
			if err != nil || code != 200 {
				t.Fatalf("like: %d %v", code, err)
			}
		}
	}
	hooked := filepath.Join(t.TempDir(), "hooked")
	// follow runs the follower until it has printed want, and returns
	// what it printed, in number order: milestones are published as their
	// ranks become known, which for two blocks of two replicas may be in
	// either order.
	follow := func(want ...uint64) []uint64 {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		out := &lockedBuilder{}
		c := &cli{stdout: out, stderr: &lockedBuilder{}, getenv: noEnv}
		code := make(chan int, 1)
		go func() {
			code <- c.run(ctx, []string{"milestones", "follow", "--nats", nats[1], "--durable", "app", "--retry", "200ms",
				"--exec", "echo $TALLY_MILESTONE_NUMBER >> " + hooked})
		}()
		var got []uint64
		testkit.WaitFor(t, 30*time.Second, func() error {
			got = got[:0]
			for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				var ev struct{ Number uint64 }
				if json.Unmarshal([]byte(line), &ev) == nil && ev.Number > 0 {
					got = append(got, ev.Number)
				}
			}
			for _, n := range want {
				if !slices.Contains(got, n) {
					return fmt.Errorf("printed %v, want %v", got, want)
				}
			}
			return nil
		})
		cancel()
		if c := <-code; c != 0 {
			t.Fatalf("follow exited %d", c)
		}
		slices.Sort(got)
		return got
	}
	like(0, 12)
	if got := follow(5, 10); fmt.Sprint(got) != "[5 10]" {
		t.Fatalf("first run printed %v, want [5 10]", got)
	}
	like(12, 21)
	if got := follow(15, 20); fmt.Sprint(got) != "[15 20]" {
		t.Fatalf("after the restart it printed %v, want only the new [15 20]", got)
	}
	b, err := os.ReadFile(hooked)
	ran := strings.Fields(string(b))
	slices.Sort(ran)
	if err != nil || fmt.Sprint(ran) != "[10 15 20 5]" {
		t.Fatalf("--exec ran for %q (%v), want 5 10 15 20", b, err)
	}
}
