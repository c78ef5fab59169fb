package deploy_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/deploy"
	"github.com/tally-dev/tally/internal/testkit"
)

func TestZZDebugTrending(t *testing.T) {
	cfg := deploy.DefaultConfig()
	cfg.Replicas, cfg.Copies, cfg.Milestones = 3, 2, ""
	d := startConfig(t, cfg)
	urls := d.URLs()
	waitReady(t, urls)
	for i := range 60 {
		testkit.DoJSON("PUT", fmt.Sprintf("%s/v1/likes/post%d/u%d", urls[i%9], i%7, i), "")
	}
	for round := range 2 {
		for _, u := range urls[:3] {
			t0 := time.Now()
			st, b, _ := testkit.DoJSON("GET", u+"/v1/trending?window=all&n=5", "")
			t.Logf("round %d %s: trending %d partial=%v in %s", round, u, st, b["partial"], time.Since(t0))
			t0 = time.Now()
			st, b, _ = testkit.DoJSON("GET", u+"/v1/feed?user=u5&items=post1,post2", "")
			t.Logf("round %d %s: feed %d partial=%v in %s", round, u, st, b["partial"], time.Since(t0))
		}
	}
}
