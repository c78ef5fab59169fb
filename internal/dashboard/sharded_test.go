package dashboard

import (
	"testing"

	"github.com/tally-dev/tally/api"
)

// shardedTargets is `tallyd local --regions us,eu --replicas 3 --copies 2`
// as the dashboard watches it: three replicas a region.
var shardedTargets = []Target{
	{Region: "us", Replica: "us-1"}, {Region: "us", Replica: "us-2"}, {Region: "us", Replica: "us-3"},
	{Region: "eu", Replica: "eu-1"}, {Region: "eu", Replica: "eu-2"}, {Region: "eu", Replica: "eu-3"},
}

// TestSummarizeShardedRegions: 5 likes (3 booked in us, 2 in eu) read 5
// at every replica; the summary has one entry a region with its replicas
// inside, each region's count 5 (not 15: one replica's answer, not a sum
// over them), an exact answer preferred to an approx one, and the shard
// states of the region's map.
func TestSummarizeShardedRegions(t *testing.T) {
	shardMap := func(states ...string) *api.ShardMap {
		m := &api.ShardMap{Shards: 3, Copies: 2}
		holds := [][]string{{"0", "1"}, {"1", "2"}, {"2", "0"}} // each shard on two replicas
		for i, st := range states {
			m.Replicas = append(m.Replicas, api.ShardHolding{Replica: "r" + string(rune('1'+i)), Shards: holds[i], Count: 2, State: st})
		}
		return m
	}
	var views []RegionOverview
	for _, tg := range shardedTargets {
		v := RegionOverview{Target: tg, Reachable: true, Likes: &api.Likes{Item: "post1", Count: 5}, Counter: &api.Counter{Key: "views", Value: 7}}
		switch tg.Replica {
		case "us-1": // recovering: approx, and a stale peer
			v.Likes = &api.Likes{Item: "post1", Count: 4, Approx: true}
			v.Shards = shardMap("up", "stale", "up")
		case "us-2", "us-3":
			v.Shards = shardMap("up", "stale", "up")
		case "eu-3":
			v.Reachable, v.Likes, v.Counter = false, nil, nil
		default:
			v.Shards = shardMap("up", "up", "up")
		}
		views = append(views, v)
	}
	sum := summarize(views)
	if len(sum) != 2 || sum[0].Region != "us" || sum[1].Region != "eu" {
		t.Fatalf("summary %+v: want us then eu", sum)
	}
	total := int64(0)
	for _, s := range sum {
		if len(s.Replicas) != 3 || s.Replicas[0] != s.Region+"-1" || s.Replicas[2] != s.Region+"-3" {
			t.Errorf("%s: replicas %v", s.Region, s.Replicas)
		}
		if s.Likes == nil || s.Likes.Count != 5 || s.Likes.Approx {
			t.Errorf("%s: likes %+v, want the exact 5", s.Region, s.Likes)
		}
		if s.Counter == nil || s.Counter.Value != 7 {
			t.Errorf("%s: counter %+v, want 7", s.Region, s.Counter)
		}
		total += s.Likes.Count
	}
	if sum[0].Reachable != 3 || sum[1].Reachable != 2 {
		t.Errorf("reachable us %d, eu %d; want 3 and 2", sum[0].Reachable, sum[1].Reachable)
	}
	// us: r2 stale holds shards 1 and 2, each with one other copy up.
	if got := *sum[0].Shards; got != (ShardStates{Shards: 3, Copies: 2, Up: 1, Degraded: 2}) {
		t.Errorf("us shards %+v", got)
	}
	if got := *sum[1].Shards; got != (ShardStates{Shards: 3, Copies: 2, Up: 3}) {
		t.Errorf("eu shards %+v", got)
	}
	// Both holders of shard 1 stale: down.
	if got := *shardStates(shardMap("stale", "stale", "up")); got.Down != 1 || got.Degraded != 2 || got.Up != 0 {
		t.Errorf("two stale holders: %+v", got)
	}
	// Holdings as replicas answer them, in runs: r1 holds 0-511, r2
	// 512-1023, r3 all; r2 stale leaves 512-1023 degraded, r2 and r3
	// stale leaves them down; every shard is counted once.
	ranges := func(states ...string) *api.ShardMap {
		m := &api.ShardMap{Shards: 1024, Copies: 2}
		for i, held := range [][]string{{"0-511"}, {"512-1022", "1023"}, {"0-1023"}} {
			m.Replicas = append(m.Replicas, api.ShardHolding{Replica: "r" + string(rune('1'+i)), Shards: held, State: states[i]})
		}
		return m
	}
	if got := *shardStates(ranges("up", "up", "up")); got != (ShardStates{Shards: 1024, Copies: 2, Up: 1024}) {
		t.Errorf("runs, all up: %+v", got)
	}
	if got := *shardStates(ranges("up", "stale", "up")); got != (ShardStates{Shards: 1024, Copies: 2, Up: 512, Degraded: 512}) {
		t.Errorf("runs, r2 stale: %+v", got)
	}
	if got := *shardStates(ranges("up", "stale", "stale")); got != (ShardStates{Shards: 1024, Copies: 2, Degraded: 512, Down: 512}) {
		t.Errorf("runs, r2 and r3 stale: %+v", got)
	}
	if bad := ranges("up", "up", "up"); true {
		bad.Replicas[1].Shards = []string{"9-2"}
		if got := shardStates(bad); got != nil {
			t.Errorf("an unreadable holding: %+v, want no states", got)
		}
	}
	// An unsharded region (one replica) has no shard states.
	if s := summarize([]RegionOverview{{Target: Target{Region: "ap", Replica: "ap-1"}, Shards: &api.ShardMap{Shards: 1, Replicas: []api.ShardHolding{{Replica: "ap-1"}}}}}); s[0].Shards != nil {
		t.Errorf("one replica: shards %+v", s[0].Shards)
	}
}

// TestMergeSeriesShardedRegions: every replica of a sharded region
// answers the region's whole series; the chart has one line a region and
// a total of the true likes (5 over two steps, not 15).
func TestMergeSeriesShardedRegions(t *testing.T) {
	grid := []int64{fakeT, fakeT + 10_000}
	view := func(regions map[string][]int64) seriesRead {
		return seriesRead{s: api.Series{Kind: "likes", Step: "10s", Times: grid, Final: true,
			Series: []api.SeriesOfKey{{Key: "*", Values: make([]int64, len(grid)), Regions: regions}}}}
	}
	both := map[string][]int64{"us": {1, 2}, "eu": {0, 2}}
	reads := []seriesRead{view(both), view(both), view(both), {err: &statusError{503, "503 not_ready"}}, view(both), view(both)}
	sv, err := mergeSeries(shardedTargets, reads)
	if err != nil {
		t.Fatal(err)
	}
	if len(sv.Lines) != 2 || sv.Lines[0].Region != "us" || sv.Lines[1].Region != "eu" {
		t.Fatalf("lines %+v: want one for us, one for eu", sv.Lines)
	}
	if fmtPtrs(sv.Total) != "[1 4]" {
		t.Errorf("total %s, want [1 4] (5 likes)", fmtPtrs(sv.Total))
	}
	// eu-1 failed: eu's line is eu-2's, its own region's, and not approx.
	if sv.Lines[1].Source != "eu" || sv.Approx || !sv.Final {
		t.Errorf("eu line from %q, approx %v final %v", sv.Lines[1].Source, sv.Approx, sv.Final)
	}
}
