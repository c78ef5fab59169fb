package chaos

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// A user likes an item in a region that has just restarted, and, 1.5 s
// after that like was acknowledged, unlikes it in another region that has
// not heard from the first. The unlike is the user's latest action, and
// the clocks of all regions are in step (they share one machine): it must
// win (docs/architecture.md, Like records: a local action takes a fresh
// HLC so that the user's latest action wins everywhere).
//
// This once failed: a restarted replica's clock started at a persisted
// ceiling up to 5 s ahead of the wall clock, so its actions beat later ones
// elsewhere. The replica now persists the largest HLC it issued, in the
// batch that used it, and starts there.
func TestLatestActionWinsAfterARestart(t *testing.T) {
	realProcesses(t, "runs real processes")
	cfg := DefaultConfig()
	cfg.ToggleWeight, cfg.LateWeight = 0, 0 // the mix this test was tuned with
	cfg.Binary, cfg.Faults = chaosBinary(t), []string{}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := startDeployment(ctx, cfg, t.TempDir(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.stop()
	us, eu := d.proc("us"), d.proc("eu")
	timeout := 2 * time.Second

	// us works for a while (it persists its clock ceiling as it goes),
	// then is killed and restarted at once.
	for range 20 {
		if a := us.client.like(ctx, "warm", "someone", true, timeout); a.outcome != OutcomeOK {
			t.Fatalf("warm-up like: %+v", a)
		}
	}
	if err := d.kill(us, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.start(us); err != nil {
		t.Fatal(err)
	}
	if err := d.waitReady(ctx, us); err != nil {
		t.Fatal(err)
	}
	// us is cut off; the user likes there, then unlikes in eu.
	for _, other := range []string{"eu", "ap"} {
		if err := d.net.SetLink("us", other, false); err != nil {
			t.Fatal(err)
		}
	}
	if a := us.client.like(ctx, "post", "alice", true, timeout); a.outcome != OutcomeOK {
		t.Fatalf("like at us: %+v", a)
	}
	time.Sleep(1500 * time.Millisecond) // well after the like was acknowledged
	if a := eu.client.like(ctx, "post", "alice", false, timeout); a.outcome != OutcomeOK {
		t.Fatalf("unlike at eu: %+v", a)
	}
	if err := d.healLinks(); err != nil {
		t.Fatal(err)
	}
	// Wait until every region holds the same record, the same for 1 s.
	var stableSince time.Time
	last := map[string]bool{}
	testkit.WaitFor(t, 20*time.Second, func() error {
		now := map[string]bool{}
		for _, p := range d.procs {
			l, err := p.client.liked(ctx, "post", "alice", timeout)
			if err != nil {
				t.Fatal(err)
			}
			now[p.region] = l
		}
		if now["us"] != now["eu"] || now["eu"] != now["ap"] || len(last) > 0 && now["us"] != last["us"] {
			stableSince = time.Time{}
		} else if stableSince.IsZero() {
			stableSince = time.Now()
		}
		last = now
		if stableSince.IsZero() || time.Since(stableSince) <= time.Second {
			return fmt.Errorf("regions did not agree on alice's record for 1 s: %v", now)
		}
		return nil
	})
	if last["us"] {
		t.Fatal("alice likes post everywhere: her like at the restarted region beat her unlike 1.5 s later")
	}
}
