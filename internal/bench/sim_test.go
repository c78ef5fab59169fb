package bench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/shard"
)

func TestParseSim(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--regions", "1"}, "--regions 1: want 2..99"},
		{[]string{"--replicas", "2", "--copies", "3"}, "--copies 3: want 1..--replicas (2)"},
		{[]string{"--items", "0"}, "--items 0"},
		{[]string{"--vector-writers", "1,x"}, `--vector-writers: "x" is not an integer`},
		{[]string{"--cut-rate", "0"}, "--cut-rate 0"},
		{[]string{"--ae-interval", "1ms"}, "--ae-interval 1ms"},
	} {
		code, stdout, stderr := runArgs(t, append([]string{"bench", "sim"}, c.args...)...)
		if code != 2 || stdout != "" || !strings.HasPrefix(stderr, "tallyd: bench sim: ") || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, stdout, stderr, c.want)
		}
	}
	cfg, err := parseSim(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Regions != 10 || cfg.Replicas != 6 || cfg.Copies != 2 || cfg.Items != 1_000_000 || cfg.Likes != 1_000_000 || cfg.CutFor != time.Minute {
		t.Errorf("defaults %+v, want 10 regions × 6 replicas, copies 2, a million items and likes, a 60s cut", cfg)
	}
}

// A small simulation: every like is counted exactly at every holder of
// its item's shard in every region, after the load and after a cut with
// writes on both sides is healed (runSim fails otherwise: every item is
// checked); the replicas hold less each as there are more of them at the
// same copies; one item's vector grows with its writers.
func TestSim(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two simulations of six and twelve replicas")
	}
	t.Parallel()
	run := func(replicas int) simResult {
		t.Helper()
		cfg := defaultSimConfig()
		cfg.Regions, cfg.Replicas, cfg.Items, cfg.Likes = 2, replicas, 200, 400
		cfg.CutFor, cfg.CutRate, cfg.Idle, cfg.Check = 500*time.Millisecond, 100, 200*time.Millisecond, 0
		cfg.VectorWriters, cfg.Dir, cfg.Timeout = []int{1, 2, 6}, t.TempDir(), 2*time.Minute
		var out strings.Builder
		res, err := runSim(context.Background(), cfg, &out)
		if err != nil {
			t.Fatalf("%d replicas: %v\n%s", replicas, err, out.String())
		}
		return res
	}
	three, six := run(3), run(6)

	for _, r := range []simResult{three, six} {
		if r.Load.Checked != 200 || r.Cut.Checked != r.Cut.Touched || r.Cut.CutLikes == 0 || r.Cut.RestLikes == 0 {
			t.Errorf("%d replicas: %d items checked after the load, %d of %d touched after the heal, %d and %d likes a side of the cut",
				r.Replicas, r.Load.Checked, r.Cut.Checked, r.Cut.Touched, r.Cut.CutLikes, r.Cut.RestLikes)
		}
		if len(r.Stored.PerReplica) != 2*r.Replicas {
			t.Errorf("%d replicas: %d measured", r.Replicas, len(r.Stored.PerReplica))
		}
		var held int64
		for _, p := range r.Stored.PerReplica {
			held += p.Likes
		}
		// Every like is held by the copies of its shard in each region.
		if want := int64(r.Likes * r.Regions * r.Copies); held != want {
			t.Errorf("%d replicas: %d likes held in all, want %d", r.Replicas, held, want)
		}
		w := r.Load.Wire
		if w.Published == 0 || w.Delivered <= w.Published || r.Load.Tail.Digests == 0 {
			t.Errorf("%d replicas: wire during the load %+v, until converged %+v: want deltas delivered to several replicas, then digests compared", r.Replicas, w, r.Load.Tail)
		}
		if r.Cut.ConvergedSeconds <= 0 || r.Cut.ExactSeconds < r.Cut.ConvergedSeconds {
			t.Errorf("%d replicas: heal converged in %.3fs, exact in %.3fs", r.Replicas, r.Cut.ConvergedSeconds, r.Cut.ExactSeconds)
		}
		// The last region goes to three copies: every shard it held twice
		// gains a holder (the global shard, held by all, none), which
		// pulls it; the checked items of those shards read the same there.
		if m := r.Move; m == nil || m.CopiesTo != 3 || m.ShardCopies != shard.Count-1 || m.StoredBytes <= 0 || m.Wire.Pages <= 0 ||
			m.Checked == 0 || m.SecondsPerGB <= 0 {
			t.Errorf("%d replicas: move %+v: want %d shard copies moved, stored bytes gained, pages pulled, items checked", r.Replicas, m, shard.Count-1)
		}
		// Idle, a replica's digest exchanges name the shared shards and
		// get "equal": a small part of every digest to every peer.
		if im := r.Idle.Model; im.Peers != 2*r.Replicas-1 || im.Idle <= 0 || im.Idle*10 > im.Before || im.Full <= im.Idle {
			t.Errorf("%d replicas: digest model %+v", r.Replicas, im)
		}
	}
	if six.Stored.Median >= three.Stored.Median {
		t.Errorf("bytes per replica: %d with 6 replicas a region, not below %d with 3 (copies 2)", six.Stored.Median, three.Stored.Median)
	}
	if p := project(six, 100); p.BytesPerReplica >= float64(six.Stored.Median) {
		t.Errorf("projection to 100 replicas a region: %.0f bytes each, not below the %d measured at 6", p.BytesPerReplica, six.Stored.Median)
	}
	// At 100 replicas a region each shares few shards with each peer:
	// idle, its digest exchanges weigh less per peer than at 6.
	if p := project(six, 100); p.Model.Peers != 199 || p.Model.Shared >= six.Idle.Model.Shared ||
		float64(p.Model.Idle)/199 >= float64(six.Idle.Model.Idle)/float64(six.Idle.Model.Peers) {
		t.Errorf("projection to 100 replicas a region: digest model %+v, at 6 %+v", p.Model, six.Idle.Model)
	}
	v := three.Vectors
	if len(v) != 3 || v[0].Writers != 1 || v[2].Writers != 6 {
		t.Fatalf("vectors %+v, want 1, 2 and 6 writers", v)
	}
	for i := 1; i < len(v); i++ {
		if v[i].StoredBytes <= v[i-1].StoredBytes || v[i].PageBytes != v[0].PageBytes*v[i].Writers {
			t.Errorf("vector of %d writers: %.0f bytes stored, %d on a page; of %d: %.0f and %d", v[i].Writers, v[i].StoredBytes, v[i].PageBytes,
				v[i-1].Writers, v[i-1].StoredBytes, v[i-1].PageBytes)
		}
	}
}

// The command prints the tables, or with --json the result as JSON.
func TestBenchSimCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a simulation")
	}
	t.Parallel()
	args := []string{"bench", "sim", "--regions", "2", "--replicas", "2", "--items", "50", "--cut-for", "300ms",
		"--cut-rate", "50", "--idle", "100ms", "--vector-writers", "1,3", "--dir", t.TempDir()}
	code, stdout, stderr := runArgs(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
	}
	for _, want := range []string{"stored: live sstable bytes per replica", "fast per like", "heal until converged",
		"one item's vector by its number of writers", "projection to 100 replicas per region (200 in all)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("no %q in:\n%s", want, stdout)
		}
	}
	code, stdout, stderr = runArgs(t, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("--json: exit %d: %s\n%s", code, stderr, stdout)
	}
	var res simResult
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || res.Regions != 2 || res.Stored.Median == 0 || len(res.Vectors) != 2 {
		t.Errorf("--json: %v, %+v:\n%s", err, res, stdout)
	}
	// --print prints a saved result's tables, running nothing.
	saved := filepath.Join(t.TempDir(), "sim.json")
	if err := os.WriteFile(saved, []byte(stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	code, printed, stderr := runArgs(t, "bench", "sim", "--print", saved)
	if code != 0 || !strings.Contains(printed, "2 regions × 2 replicas = 4 replicas, copies 2, 50 likes over 50 items") {
		t.Errorf("--print: exit %d, %s\n%s", code, stderr, printed)
	}
}

// The idle fast path per replica, computed: at 6 replicas a region (copies
// 2) every replica shares a keyed shard with every peer and hears every
// heartbeat and no summary, as before; at 100 a replica follows its region
// and the few sharing a shard with it, hears the other nine regions'
// summaries, and its bytes are a small part of every heartbeat to every
// replica.
func TestBeatModel(t *testing.T) {
	for _, c := range []struct{ replicas, peers int }{{6, 59}, {100, 999}} {
		b := simProjectBeats(10, c.replicas, 2)
		if b.Peers != c.peers || b.OwnRegion != c.replicas-1 || b.BeatBytes <= 0 {
			t.Fatalf("%d replicas a region: %+v", c.replicas, b)
		}
		t.Logf("%d replicas a region: %+v", c.replicas, b)
	}
	six, hundred := simProjectBeats(10, 6, 2), simProjectBeats(10, 100, 2)
	if six.OwnRegion+six.Sharing != six.Peers || six.Summaries != 0 || six.BytesPerSec != six.EveryBeat {
		t.Errorf("6 replicas a region: %+v, want every peer followed, as before", six)
	}
	if hundred.OwnRegion+hundred.Sharing >= hundred.Peers/2 || hundred.Summaries != 9 || hundred.SummaryB <= 0 || hundred.BytesPerSec*2 >= hundred.EveryBeat {
		t.Errorf("100 replicas a region: %+v, want most peers heard of by summary only", hundred)
	}
}
