package bench

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/shard"
)

func TestParseShardsBench(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--measure", "size"}, `--measure "size": want space, likes, heal, move or hot`},
		{[]string{"--measure", "move", "--replicas", "3", "--copies", "3"}, "--copies 3: move takes the first region from --copies to --replicas (3) copies: want fewer copies"},
		{[]string{"--measure", "move", "--replicas", "2,3"}, "move takes one number of replicas per region, not 2"},
		{[]string{"--measure", "hot", "--batch", "0"}, "--batch 0: want 1.."},
		{[]string{"--measure", "hot", "--items", "5"}, "--items means nothing to --measure hot"},
		{[]string{"--measure", "likes", "--batch", "5"}, "--batch means nothing to --measure likes"},
		{[]string{"--replicas", "0"}, "--replicas 0: want 1..16 per region"},
		{[]string{"--replicas", "1,x"}, `--replicas: "x" is not an integer`},
		{[]string{"--replicas", ","}, "--replicas: want at least one number"},
		{[]string{"--copies", "0"}, "--copies 0: want 1..16"},
		{[]string{"--likes", "10", "--items", "11"}, "--items 11: want at most --likes (10)"},
		{[]string{"--regions", "us,us"}, "duplicate region"},
		{[]string{"--measure", "heal", "--regions", "us"}, "heal cuts the first region from the others: want at least two"},
		{[]string{"--measure", "heal", "--replicas", "1,3"}, "heal takes one number of replicas per region, not 2"},
		{[]string{"--measure", "likes", "--routes", "sideways"}, `--routes "sideways": want direct or random`},
		{[]string{"--measure", "likes", "--routes", ","}, "--routes: want direct, random or both"},
		{[]string{"--measure", "likes", "--concurrency", "0"}, "--concurrency 0"},
		{[]string{"--cut-for", "5s"}, "--cut-for means nothing to --measure space"},
		{[]string{"--measure", "heal", "--likes", "5"}, "--likes means nothing to --measure heal"},
		{[]string{"--measure", "likes", "--event-log=false"}, "--event-log means nothing to --measure likes"},
		{[]string{"--durability", "maybe"}, `--durability "maybe"`},
	}
	for _, c := range cases {
		code, stdout, stderr := runArgs(t, append([]string{"bench", "shards"}, c.args...)...)
		if code != 2 || stdout != "" {
			t.Errorf("%q: exit %d, stdout %q, want 2 and none", c.args, code, stdout)
		}
		if !strings.HasPrefix(stderr, "tallyd: bench shards: ") || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: stderr %q, want one line with %q", c.args, stderr, c.want)
		}
	}

	// Each measure's defaults.
	for measure, want := range map[string]shardsBenchConfig{
		"space": {Regions: []string{"us"}, Replicas: []int{1, 3, 6}, Items: 10_000, Durability: "none"},
		"likes": {Regions: []string{"us"}, Replicas: []int{1, 2, 3}, Items: 100_000, Durability: "fsync"},
		"heal":  {Regions: []string{"us", "eu", "ap"}, Replicas: []int{3}, Items: 16, Durability: "fsync"},
		"hot":   {Regions: []string{"us"}, Replicas: []int{1, 3}, Items: 10_000, Durability: "fsync"},
	} {
		cfg, err := parseShardsBench([]string{"--measure", measure}, nil)
		if err != nil {
			t.Fatalf("%s: %v", measure, err)
		}
		if strings.Join(cfg.Regions, ",") != strings.Join(want.Regions, ",") || len(cfg.Replicas) != len(want.Replicas) ||
			cfg.Replicas[0] != want.Replicas[0] || cfg.Items != want.Items || cfg.Durability != want.Durability || cfg.Copies != 2 {
			t.Errorf("%s: defaults %+v, want %+v and copies 2", measure, cfg, want)
		}
	}
}

// Space: the same likes in one-, three- and six-replica regions of two
// copies. Every loaded like is held by exactly copies replicas, and the
// sstable bytes per replica fall as copies/replicas.
func TestBenchShardsSpace(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three deployments of up to six replicas")
	}
	t.Parallel()
	cfg := defaultShardsBenchConfig()
	cfg.Likes, cfg.Items = 6_000, 240
	cfg = cfg.withDefaults()
	var out strings.Builder
	rows, err := runShardsSpace(context.Background(), cfg, Env{}, hclog.NewNullLogger(), &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3:\n%s", len(rows), out.String())
	}
	var base int64
	for k, r := range rows {
		if r.Replicas != cfg.Replicas[k] || len(r.PerReplica) != r.Replicas {
			t.Fatalf("row %d: %d replicas, %d measured, want %d:\n%s", k, r.Replicas, len(r.PerReplica), cfg.Replicas[k], out.String())
		}
		wantCopies := min(2, r.Replicas)
		if r.Copies != wantCopies {
			t.Errorf("%d replicas: copies %d, want %d", r.Replicas, r.Copies, wantCopies)
		}
		var shards int
		var likes int64
		for _, p := range r.PerReplica {
			shards += p.Shards
			likes += p.Likes
			if p.TableBytes <= 0 {
				t.Errorf("%d replicas: %s has %d sstable bytes", r.Replicas, p.Replica, p.TableBytes)
			}
		}
		// Every keyed shard held copies times, the global one by all.
		if want := wantCopies*(shard.Count-1) + r.Replicas; shards != want {
			t.Errorf("%d replicas: %d shards held in all, want %d", r.Replicas, shards, want)
		}
		if want := int64(wantCopies * cfg.Likes); likes != want {
			t.Errorf("%d replicas: %d likes held in all, want %d", r.Replicas, likes, want)
		}
		_, mean, _ := r.Bytes()
		if k == 0 {
			base = mean
			continue
		}
		// Within 25% of copies/replicas of the one-replica size.
		ratio, want := float64(mean)/float64(base), float64(wantCopies)/float64(r.Replicas)
		if ratio < 0.75*want || ratio > 1.25*want {
			t.Errorf("%d replicas: %d bytes per replica, %.3f of one replica's %d, want about %.3f:\n%s", r.Replicas, mean, ratio, base, want, out.String())
		}
	}
	table := out.String()
	if !regexp.MustCompile(`(?m)^ +replicas +copies +shards held +likes held +bytes per replica +min +max +per like loaded +per like held +vs 1 replica +copies/replicas$`).MatchString(table) {
		t.Errorf("no table header:\n%s", out.String())
	}
	for _, row := range []string{`1 +1 +1024 +6000 `, `3 +2 +683 +4000 `, `6 +2 +342 +2000 `} {
		if !regexp.MustCompile(`(?m)^ +` + row).MatchString(table) {
			t.Errorf("no row %q in the table:\n%s", row, table)
		}
	}
	assertDataDirsGone(t, out.String())
}

// Likes: with one copy of each shard in three replicas, likes sent to a
// holder are served there, and those sent to any replica are forwarded
// exactly when it does not hold the item's shard (about two thirds); every like counts, and the process's CPU is measured.
func TestBenchShardsLikes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two deployments")
	}
	t.Parallel()
	cfg := defaultShardsBenchConfig()
	cfg.Measure, cfg.Replicas, cfg.Copies = measureLikes, []int{1, 3}, 1
	cfg.Duration, cfg.Warmup, cfg.Concurrency, cfg.Items = 400*time.Millisecond, 100*time.Millisecond, 4, 1000
	cfg = cfg.withDefaults()
	var out strings.Builder
	rows, err := runShardsLikes(context.Background(), cfg, Env{}, hclog.NewNullLogger(), &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4:\n%s", len(rows), out.String())
	}
	for k, r := range rows {
		if want := []int{1, 1, 3, 3}[k]; r.Replicas != want || r.Route != cfg.Routes[k%2] {
			t.Errorf("row %d: %d replicas, route %s, want %d and %s", k, r.Replicas, r.Route, want, cfg.Routes[k%2])
		}
		if r.Requests == 0 || r.Errors != 0 || r.Counted != r.Requests {
			t.Errorf("row %d: %d likes, %d errors (%s), %d counted", k, r.Requests, r.Errors, r.FirstError, r.Counted)
		}
		if r.CPUPerLike() <= 0 {
			t.Errorf("row %d: CPU per like %s", k, r.CPUPerLike())
		}
		// With one copy of each shard, a like is forwarded exactly when
		// the replica it was sent to does not hold its item's shard.
		if r.Forwarded != r.Unheld {
			t.Errorf("%d replicas, %s: %d likes forwarded, %d sent to a replica not holding the item, want them equal",
				r.Replicas, r.Route, r.Forwarded, r.Unheld)
		}
		if r.Replicas == 3 && r.Route == routeRandom {
			if r.Unheld == 0 {
				t.Errorf("3 replicas, random: of %d likes none was sent to a replica not holding the item", r.Requests)
			}
		} else if r.Unheld != 0 {
			t.Errorf("%d replicas, %s: %d likes sent to a replica not holding the item, want none", r.Replicas, r.Route, r.Unheld)
		}
	}
	for _, re := range []string{
		`(?m)^ +replicas +copies +route +likes/s +p50 +p99 +forwarded +errors +CPU per like +cores busy$`,
		`(?m)^ +1 +1 +direct +\d+ +[\d.]+ms +[\d.]+ms +0\.0% +0 +[\d.]+µs +[\d.]+$`,
		`(?m)^ +3 +1 +random +\d+ +[\d.]+ms +[\d.]+ms +[\d.]+% +0 +[\d.]+µs +[\d.]+$`,
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("output does not match %s:\n%s", re, out.String())
		}
	}
	assertDataDirsGone(t, out.String())
}

// Heal: two regions of three replicas, cut and written on both sides,
// agree exactly everywhere after the heal.
func TestBenchShardsHeal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six replicas")
	}
	t.Parallel()
	code, stdout, stderr := runArgs(t, "bench", "shards", "--measure", "heal", "--regions", "us,eu",
		"--cut-for", "500ms", "--cut-writers", "2", "--items", "4", "--timeout", "2m")
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
	}
	m := regexp.MustCompile(`cut us for 500ms: (\d+) likes on its side, (\d+) on the other, (\d+) distinct`).FindStringSubmatch(stdout)
	if m == nil || m[1] == "0" || m[2] == "0" || m[3] == "0" {
		t.Errorf("want likes on both sides of the cut:\n%s", stdout)
	}
	for _, want := range []string{"every holder's own store exact", "every replica reads exact, approx false", "every /v1/convergence converged"} {
		if !regexp.MustCompile(regexp.QuoteMeta(want) + ` +[\d.]+ms\n`).MatchString(stdout) {
			t.Errorf("no time for %q:\n%s", want, stdout)
		}
	}
	assertDataDirsGone(t, stdout)
}

// assertDataDirsGone fails if a data directory the output names is left.
func assertDataDirsGone(t *testing.T, out string) {
	t.Helper()
	dirs := regexp.MustCompile(`\(data (\S+)\)`).FindAllStringSubmatch(out, -1)
	if len(dirs) == 0 {
		t.Errorf("no data dir in the output:\n%s", out)
	}
	for _, m := range dirs {
		if _, err := os.Stat(m[1]); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("data dir %s left behind: %v", m[1], err)
		}
	}
}

// Hot: one item's batched likes, whole on one replica, then split in
// three parts over three replicas of one copy (each part's shard held by
// one of them, two parts maybe by the same), where each part's batches
// go to its holder (direct) or to any replica (random): every like
// counts, and the process's CPU is measured.
func TestBenchShardsHot(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two deployments")
	}
	t.Parallel()
	cfg := defaultShardsBenchConfig()
	cfg.Measure, cfg.Replicas, cfg.Copies = measureHot, []int{1, 3}, 1
	cfg.Duration, cfg.Warmup, cfg.Concurrency, cfg.Batch = 400*time.Millisecond, 100*time.Millisecond, 4, 20
	cfg = cfg.withDefaults()
	var out strings.Builder
	rows, err := runShardsHot(context.Background(), cfg, Env{}, hclog.NewNullLogger(), &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4:\n%s", len(rows), out.String())
	}
	for k, r := range rows {
		if want := []int{1, 1, 3, 3}[k]; r.Replicas != want || r.Parts != want || r.Route != cfg.Routes[k%2] {
			t.Errorf("row %d: %d replicas, %d parts, route %s, want %d, %d and %s", k, r.Replicas, r.Parts, r.Route, want, want, cfg.Routes[k%2])
		}
		if r.Requests == 0 || r.Errors != 0 || r.Counted != r.Requests*20 {
			t.Errorf("row %d: %d batches, %d errors (%s), %d counted", k, r.Requests, r.Errors, r.FirstError, r.Counted)
		}
		if r.CPUPerLike() <= 0 {
			t.Errorf("row %d: CPU per like %s", k, r.CPUPerLike())
		}
	}
	for _, re := range []string{
		`(?m)^ +replicas +copies +parts +route +batch +likes/s +batch p50 +batch p99 +errors +CPU per like +cores busy$`,
		`(?m)^ +3 +1 +3 +direct +20 +\d+ +[\d.]+ms +[\d.]+ms +0 +[\d.]+µs +[\d.]+$`,
		`3 part\(s\) held by [23] replica\(s\)`, // the parts' shards are hashed: two may share a holder
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("output lacks %s:\n%s", re, out.String())
		}
	}
}
