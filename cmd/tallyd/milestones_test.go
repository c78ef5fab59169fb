package main

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestLocalMilestonesFireOnce is issue #5's "done when" as a test: likes
// pour into all three regions of `tallyd local` at once, and every region's
// /v1/milestones shows the same events, each milestone exactly once.
func TestLocalMilestonesFireOnce(t *testing.T) {
	run := startLocal(t, "--milestones", "every:25")
	const perRegion = 60 // 180 counted likes: at least milestones 25..175
	for _, u := range run.urls {
		poll(t, 30*time.Second, func() error {
			if st, _, err := httpDo("GET", u+"/readyz", ""); err != nil || st != 200 {
				return fmt.Errorf("%s not ready: %d %v", u, st, err)
			}
			return nil
		})
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(run.urls))
	for r, u := range run.urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perRegion {
				code, _, err := httpDo("PUT", fmt.Sprintf("%s/v1/likes/post%d/u%d-%d", u, i%3, r, i), "")
				if err != nil || code != 200 {
					errs <- fmt.Errorf("like in region %d: %d %v", r, code, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Numbers go out in leased blocks, and an idle replica gives its
	// block's unused tail back; so when the likes stop, some numbers below
	// the high-water mark may be free, waiting for the next likes. Like on
	// in one region until every given-back number is used: then every
	// milestone below the high-water mark must have fired, once.
	hwm, k := 0.0, 0
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		_, st, err := httpDo("GET", run.urls[0]+"/v1/sequences/likes", "")
		if err != nil {
			t.Fatal(err)
		}
		free, _ := st["free"].([]any)
		leases, _ := st["leases"].([]any)
		if len(free) == 0 && len(leases) == 0 {
			hwm, _ = st["hwm"].(float64)
			break
		}
		if len(free) == 0 {
			time.Sleep(50 * time.Millisecond) // leases still held: wait for the idle give-back
			continue
		}
		k++
		if code, _, err := httpDo("PUT", fmt.Sprintf("%s/v1/likes/tail/v%d", run.urls[0], k), ""); err != nil || code != 200 {
			t.Fatalf("like: %d %v", code, err)
		}
	}
	var want []float64
	for m := 25.0; m < hwm; m += 25 {
		want = append(want, m)
	}
	if hwm != float64(3*perRegion+k+1) {
		t.Fatalf("hwm %v with no lease held and nothing free: want one number per counted like, %d", hwm, 3*perRegion+k)
	}
	var first string
	for _, u := range run.urls {
		poll(t, 30*time.Second, func() error {
			_, out, err := httpDo("GET", u+"/v1/milestones", "")
			if err != nil {
				return err
			}
			ms, _ := out["milestones"].([]any)
			if len(ms) != len(want) {
				return fmt.Errorf("%s: %d milestones, want %d: %v", u, len(ms), len(want), ms)
			}
			var desc string
			for i, m := range ms {
				ev := m.(map[string]any)
				if ev["number"] != want[i] {
					return fmt.Errorf("%s: milestone %d is %v, want %v", u, i, ev["number"], want[i])
				}
				desc += fmt.Sprintf("%v:%v/%v@%v ", ev["number"], ev["item"], ev["user"], ev["region"])
			}
			if first == "" {
				first = desc
			} else if desc != first {
				return fmt.Errorf("regions disagree:\n%s\n%s", first, desc)
			}
			return nil
		})
	}
	t.Logf("milestones: %s", first)
}
