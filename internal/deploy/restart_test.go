package deploy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/internal/deploy"
	"github.com/tally-dev/tally/shard"
)

// Issue #42: after a drain settled, the whole deployment restarts on its
// data. The stored map is the truth and stays at its revision (the
// config's map, which still gives us-3 its shards, only seeds an empty
// bucket), and every acknowledged increment reads exactly at every
// replica, us-3 included, which holds no keyed shard any more.
func TestRestartAfterDrainKeepsTheStoredMap(t *testing.T) {
	startsSmallRegions(t, "starts three replicas twice")
	cfg := deploy.DefaultConfig()
	cfg.Regions, cfg.Replicas, cfg.Copies, cfg.Milestones = []string{"us"}, 3, 2, ""
	cfg.DataDir = t.TempDir()
	cfg = withTestPace(withMoveRequestTimeout(cfg))
	start := func() *deploy.Deployment {
		d, err := deploy.Start(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		waitReady(t, d.URLs())
		return d
	}
	stop := func(d *deploy.Deployment) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			t.Fatalf("close: %v", err)
		}
	}
	d := start()
	urls := d.URLs()
	want := map[string]int64{}
	incr := func(n int) {
		t.Helper()
		for i := range n {
			k := fmt.Sprintf("views:%d", i%20)
			u := urls[i%len(urls)]
			if st, b, err := testkit.DoJSON("POST", u+"/v1/counters/"+k+"/incr", `{"by":1}`); err != nil || st != 200 {
				t.Fatalf("incr %s at %s: %d %v %v", k, u, st, b, err)
			}
			want[k]++
		}
	}
	incr(200)
	drained, err := shard.Drained("us", cfg.ReplicaIDs("us"), cfg.Copies, "us-3")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := d.MoveShards(ctx, drained, t.Logf); err != nil {
		t.Fatal(err)
	}
	incr(100)
	before := getShards(t, urls[0])
	if !before.Equal(drained) {
		t.Fatalf("after the drain us serves by revision %d, not the drained map", before.Revision)
	}
	stop(d)

	d = start()
	defer stop(d)
	urls = d.URLs()
	for _, u := range urls {
		if m := getShards(t, u); m.Revision != before.Revision || !m.Equal(before) {
			t.Fatalf("%s serves by revision %d after the restart (equal %v), want the stored map at %d", u, m.Revision, m.Equal(before), before.Revision)
		}
	}
	for _, u := range urls {
		testkit.WaitFor(t, 60*time.Second, func() error {
			for k, v := range want {
				st, b, err := testkit.DoJSON("GET", u+"/v1/counters/"+k, "")
				if err != nil || st != 200 || b["value"] != float64(v) {
					return fmt.Errorf("%s reads %s as %d %v %v, want %d", u, k, st, b, err, v)
				}
			}
			return nil
		})
	}
}
