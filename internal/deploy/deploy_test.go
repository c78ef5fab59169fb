package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/internal/deploy"
	"github.com/tally-dev/tally/node"
)

// startDeployment starts regions us, eu and ap on free ports and a temp
// dir with the given milestone rule, and closes them when the test ends.
func startDeployment(t *testing.T, milestones string) *deploy.Deployment {
	t.Helper()
	cfg := deploy.DefaultConfig()
	cfg.Milestones = milestones
	return startConfig(t, cfg)
}

// startsRegions marks a test that starts a deployment of its own:
// skipped with -short. These tests run one after another (but see
// startsThreeRegions and startsShardedRegions). Side by side
// (each deployment has its own ports, data directory and NATS servers, so
// none sees another's) they took a third less time alone, but in CI,
// beside the other packages' tests on two cores, the sharded ones timed
// out waiting for a move to settle and for a split item's trending
// (TestReplicaJoinsAndDrainsWhileServing, TestHotItemSplitOverShards;
// both pass alone) when they ran beside each other: they still run one
// at a time (manyReplicas).
func startsRegions(t *testing.T, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip(why)
	}
}

// startsThreeRegions is startsRegions for a test of three unsharded
// regions of one replica each that puts no load of its own on them: such
// a deployment mostly waits (on heartbeats, anti-entropy rounds and the
// test's polls), about 5 s of CPU under -race for 25 s of wall, so these
// tests run two at a time (t.Parallel, -parallel is GOMAXPROCS). Go runs
// them after the package's other tests, so they never run beside a test
// under load, which stay one at a time; a sharded deployment
// (startsShardedRegions) may run beside one of them.
func startsThreeRegions(t *testing.T, why string) {
	t.Helper()
	startsRegions(t, why)
	t.Parallel()
}

// startsSmallRegions is startsRegions for a test of at most four
// replicas (one or two regions) that puts no load of its own on them: it
// runs with the parallel tests (t.Parallel), so these short tests fill
// the slot the sharded tests (startsShardedRegions, one at a time) leave,
// beside the three-region tests, instead of running before them all.
func startsSmallRegions(t *testing.T, why string) {
	t.Helper()
	startsRegions(t, why)
	t.Parallel()
}

// manyReplicas is held by a test of a sharded deployment (six to nine
// replicas) while it runs: such a deployment keeps a core busy under
// -race, and two at once (or three, on a machine others use too) slowed
// each other two to four times and failed on timeouts. One of them runs
// at a time, beside the tests of three replicas.
var manyReplicas sync.Mutex

// startsShardedRegions is startsRegions for a test of a sharded
// deployment: it runs with the parallel tests (t.Parallel), after the
// package's other tests, and waits for manyReplicas, which it holds until
// its deployment has closed. So the sharded tests run one after another,
// as before, but beside the three-region tests, which mostly wait, rather
// than before them: the package's wall time is no longer their sum and
// the others'.
func startsShardedRegions(t *testing.T, why string) {
	t.Helper()
	startsRegions(t, why)
	t.Parallel()
	manyReplicas.Lock()
	t.Cleanup(manyReplicas.Unlock)
}

// startConfig starts cfg's deployment in a temp dir, and closes it when the
// test ends. The replicas keep their default anti-entropy interval and
// peer timeout. Shorter ones (digests compared every 250 ms, peers stale
// after 2 s, as in the chaos suite) were tried: the sharded tests ran
// slower with them, not faster (nine replicas comparing 1023 shards'
// digests four times a second, beside the other tests), and on a loaded
// machine reads went approx and gathers partial with a heartbeat 2 s
// late, which these tests' exact reads do not allow. What only sets a
// pace is the tests' own: heartbeats every testHeartbeat (a starting
// replica listens two of them for live peers before it accepts writes,
// and a peer heard more often is stale less, not more) and a shard move
// reading its progress every testMovePoll.
// testHeartbeat and testMovePoll are the tests' pace (startConfig):
// production's are 1s and 500ms.
const (
	testHeartbeat = 250 * time.Millisecond
	testMovePoll  = 100 * time.Millisecond
)

// testMoveRequestTimeout is the request_timeout of the tests that move
// shards (production's is 10s): a replica that left shards reports them
// released only once they compare equal with their holders after the
// switch plus a request timeout (by when any write it accepted before
// has committed or failed), so every move with a leaving replica waited
// 10 s. A write still has 3 s for its durable commit, as in node's
// tests.
const testMoveRequestTimeout = 3 * time.Second

// withMoveRequestTimeout is cfg with testMoveRequestTimeout.
func withMoveRequestTimeout(cfg deploy.Config) deploy.Config {
	adjust := cfg.Node
	cfg.Node = func(c *node.Config) {
		c.RequestTimeout = testMoveRequestTimeout.String()
		if adjust != nil {
			adjust(c)
		}
	}
	return cfg
}

// withTestPace is cfg at the tests' pace (testHeartbeat, testMovePoll).
func withTestPace(cfg deploy.Config) deploy.Config {
	cfg.MovePoll = testMovePoll
	adjust := cfg.Node
	cfg.Node = func(c *node.Config) {
		c.HeartbeatInterval = testHeartbeat
		if adjust != nil {
			adjust(c)
		}
	}
	return cfg
}

func startConfig(t *testing.T, cfg deploy.Config) *deploy.Deployment {
	t.Helper()
	cfg.DataDir = t.TempDir()
	d, err := deploy.Start(context.Background(), withTestPace(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return d
}

// `make run`'s deployment, in process: three regions, likes everywhere, a
// cut link with writes on both sides, a heal, exact convergence.
func TestDeploymentConvergesThroughCutAndHeal(t *testing.T) {
	startsThreeRegions(t, "starts three regions")
	urls := startReadyDeployment(t)
	like := func(u, user string) {
		t.Helper()
		if st, b, err := testkit.DoJSON("PUT", u+"/v1/likes/post1/"+user, ""); err != nil || st != 200 {
			t.Fatalf("like %s at %s: %d %v %v", user, u, st, b, err)
		}
	}
	countsAre := func(want float64) func() error {
		return func() error {
			for _, u := range urls {
				_, b, err := testkit.DoJSON("GET", u+"/v1/likes/post1", "")
				if err != nil {
					return err
				}
				if b["count"] != want || b["approx"] != false {
					return fmt.Errorf("%s: %v, want count %v", u, b, want)
				}
				if st, _ := b["staleness_ms"].(map[string]any); len(st) != 2 {
					return fmt.Errorf("%s: staleness of 2 peers expected: %v", u, b)
				}
			}
			return nil
		}
	}
	for i, u := range urls {
		for n := range 20 {
			like(u, fmt.Sprintf("r%d-u%d", i, n))
		}
	}
	testkit.WaitFor(t, 10*time.Second, countsAre(60))

	// Cut us-eu; both sides keep answering locally.
	if st, b, err := testkit.DoJSON("PUT", urls[0]+"/v1/admin/links/us/eu", `{"up":false}`); err != nil || st != 200 || b["up"] != false {
		t.Fatalf("cut: %d %v %v", st, b, err)
	}
	for n := range 10 {
		like(urls[0], fmt.Sprintf("cut-us-%d", n))
		like(urls[1], fmt.Sprintf("cut-eu-%d", n))
		like(urls[0], fmt.Sprintf("both-%d", n))
		like(urls[1], fmt.Sprintf("both-%d", n))
	}
	if st, _, err := testkit.DoJSON("PUT", urls[1]+"/v1/admin/links/eu/us", `{"up":true}`); err != nil || st != 200 {
		t.Fatalf("heal: %d %v", st, err)
	}
	testkit.WaitFor(t, 20*time.Second, countsAre(60+10+10+10))
	testkit.WaitFor(t, 10*time.Second, func() error {
		for _, u := range urls {
			_, b, err := testkit.DoJSON("GET", u+"/v1/convergence", "")
			if err != nil {
				return err
			}
			if b["converged"] != true {
				return fmt.Errorf("%s not converged: %v", u, b)
			}
		}
		return nil
	})
}

// startReadyDeployment starts `make run`'s deployment and waits until
// every region is ready.
func startReadyDeployment(t *testing.T) []string {
	t.Helper()
	urls := startDeployment(t, deploy.DefaultConfig().Milestones).URLs()
	waitReady(t, urls)
	return urls
}

// waitReady waits until every replica at urls answers /readyz with 200.
func waitReady(t *testing.T, urls []string) {
	t.Helper()
	for _, u := range urls {
		testkit.WaitFor(t, 60*time.Second, func() error {
			if st, _, err := testkit.DoJSON("GET", u+"/readyz", ""); err != nil || st != 200 {
				return fmt.Errorf("%s not ready: %d %v", u, st, err)
			}
			return nil
		})
	}
}

// An increment with an idempotency key sent to us, retried at eu while
// us-eu is cut, and retried at ap after the heal counts once everywhere;
// so does a resent batch of keyed grants (POST /v1/events): the region
// that applied it a second time takes its grant back after the heal.
func TestKeyedIncrementOnceThroughCutAndHeal(t *testing.T) {
	startsThreeRegions(t, "starts three regions")
	urls := startReadyDeployment(t)
	us, eu, ap := urls[0], urls[1], urls[2]
	incr := func(u string, wantDup bool) {
		t.Helper()
		st, b, err := testkit.DoJSON("POST", u+"/v1/counters/revenue/incr", `{"by":10,"idempotency_key":"order-7"}`)
		if err != nil || st != 200 || b["duplicate"] != wantDup {
			t.Fatalf("incr at %s: %d %v %v; want duplicate %v", u, st, b, err, wantDup)
		}
	}
	if st, b, err := testkit.DoJSON("PUT", us+"/v1/admin/links/us/eu", `{"up":false}`); err != nil || st != 200 || b["up"] != false {
		t.Fatalf("cut: %d %v %v", st, b, err)
	}
	incr(us, false)
	incr(eu, false) // eu has not heard of us's application: it applies it too
	// A batch of keyed grants, resent: at us a duplicate, at eu (cut
	// off) applied again.
	grants(t, us, false)
	grants(t, us, true)
	grants(t, eu, false)
	if st, _, err := testkit.DoJSON("PUT", eu+"/v1/admin/links/eu/us", `{"up":true}`); err != nil || st != 200 {
		t.Fatalf("heal: %d %v", st, err)
	}
	once := func() error {
		for _, u := range urls {
			_, b, err := testkit.DoJSON("GET", u+"/v1/counters/revenue", "")
			if err != nil {
				return err
			}
			if b["value"] != float64(10) || b["approx"] != false {
				return fmt.Errorf("%s: %v, want value 10, exact", u, b)
			}
			if _, b, err = testkit.DoJSON("GET", u+"/v1/budgets/fund", ""); err != nil || b["remaining"] != float64(150) {
				return fmt.Errorf("%s: budget %v %v, want 150 remaining: the batch granted once", u, b, err)
			}
		}
		return nil
	}
	testkit.WaitFor(t, 20*time.Second, once)
	incr(ap, true)
	grants(t, ap, true)
	grants(t, eu, true)
	testkit.WaitFor(t, 5*time.Second, once)
}

// grants posts one batch of two keyed grants of budget fund (100 and 50)
// to u's POST /v1/events and checks each result's duplicate is wantDup.
func grants(t *testing.T, u string, wantDup bool) {
	t.Helper()
	const batch = `[{"type":"grant","key":"fund","by":100,"idempotency_key":"fund-1"},` +
		`{"type":"grant","key":"fund","by":50,"idempotency_key":"fund-2"}]`
	st, b, err := testkit.DoJSON("POST", u+"/v1/events", batch)
	if err != nil || st != 200 || b["applied"] != float64(2) {
		t.Fatalf("grants at %s: %d %v %v", u, st, b, err)
	}
	for i, r := range b["results"].([]any) {
		if dup, _ := r.(map[string]any)["duplicate"].(bool); dup != wantDup {
			t.Fatalf("grants at %s, event %d: %v, want duplicate %v", u, i, r, wantDup)
		}
	}
}

// TestMilestonesFireOnce is issue #5's "done when" as a test: likes pour
// into all three regions of a deployment at once, and every region's
// /v1/milestones shows the same events, each milestone exactly once.
func TestMilestonesFireOnce(t *testing.T) {
	startsThreeRegions(t, "starts three regions")
	run := struct{ urls []string }{startDeployment(t, "every:25").URLs()}
	const perRegion = 60 // 180 counted likes: at least milestones 25..175
	for _, u := range run.urls {
		testkit.WaitFor(t, 30*time.Second, func() error {
			if st, _, err := testkit.DoJSON("GET", u+"/readyz", ""); err != nil || st != 200 {
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
				code, _, err := testkit.DoJSON("PUT", fmt.Sprintf("%s/v1/likes/post%d/u%d-%d", u, i%3, r, i), "")
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
	// When the likes stop, every lease closes within the bound (an idle
	// replica gives its block back), every number becomes final, and each
	// like has its rank: one per counted like, and every milestone up to
	// that many fires, once, without another like.
	numbered := 0.0
	testkit.WaitFor(t, 30*time.Second, func() error {
		_, st, err := testkit.DoJSON("GET", run.urls[0]+"/v1/sequences/likes", "")
		if err != nil {
			return err
		}
		leases, _ := st["leases"].([]any)
		closed, _ := st["closed"].([]any)
		if len(leases) != 0 || len(closed) != 0 {
			return fmt.Errorf("leases %v, blocks whose ranks are not taken %v", leases, closed)
		}
		numbered, _ = st["numbered"].(float64)
		return nil
	})
	if numbered != float64(3*perRegion) {
		t.Fatalf("%v likes numbered with every number final: want one per counted like, %d", numbered, 3*perRegion)
	}
	var want []float64
	for m := 25.0; m <= numbered; m += 25 {
		want = append(want, m)
	}
	var first string
	for _, u := range run.urls {
		testkit.WaitFor(t, 30*time.Second, func() error {
			_, out, err := testkit.DoJSON("GET", u+"/v1/milestones", "")
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

// A per-item sequence and a numbered counter, with the global likes
// sequence off: likes of one item and the units of increments under a
// prefix are numbered across three regions, and each sequence's
// milestones fire once, on every region, up to exactly what was counted
// and not one beyond.
func TestSequencesFireOnce(t *testing.T) {
	startsThreeRegions(t, "starts three regions")
	cfg := deploy.DefaultConfig()
	cfg.Milestones = ""
	cfg.Sequences = []node.SequenceConfig{
		{Name: "launch", Counts: node.CountsLikes, Match: "video:launch", Milestones: "every:20"},
		{Name: "searches", Counts: node.CountsIncrements, Match: "search:*", Milestones: "every:50"},
	}
	urls := startConfig(t, cfg).URLs()
	for _, u := range urls {
		testkit.WaitFor(t, 30*time.Second, func() error {
			if st, _, err := testkit.DoJSON("GET", u+"/readyz", ""); err != nil || st != 200 {
				return fmt.Errorf("%s not ready: %d %v", u, st, err)
			}
			return nil
		})
	}
	const likesPerRegion = 30 // 90 likes of video:launch: milestones 20..80
	units := 0                // the sum of positive increments under search:
	var wg sync.WaitGroup
	errs := make(chan error, len(urls))
	for r, u := range urls {
		var ops []string
		for i := range likesPerRegion {
			ops = append(ops, fmt.Sprintf("PUT /v1/likes/video:launch/u%d-%d", r, i), fmt.Sprintf("PUT /v1/likes/video:other/u%d-%d", r, i))
		}
		for i := range 12 {
			by := 1 + (i+r)%4
			units += by
			ops = append(ops, fmt.Sprintf(`POST /v1/counters/search:q%d/incr {"by":%d}`, i%5, by),
				`POST /v1/counters/search:q0/incr {"by":-3}`, `POST /v1/counters/views:x/incr {"by":40}`)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, op := range ops {
				method, rest, _ := strings.Cut(op, " ")
				path, body, _ := strings.Cut(rest, " ")
				if code, _, err := testkit.DoJSON(method, u+path, body); err != nil || code != 200 {
					errs <- fmt.Errorf("%s at %s: %d %v", op, u, code, err)
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
	for seq, want := range map[string]int{"launch": 3 * likesPerRegion, "searches": units} {
		testkit.WaitFor(t, 30*time.Second, func() error {
			_, st, err := testkit.DoJSON("GET", urls[0]+"/v1/sequences/"+seq, "")
			if err != nil {
				return err
			}
			leases, _ := st["leases"].([]any)
			closed, _ := st["closed"].([]any)
			if n, _ := st["numbered"].(float64); len(leases) != 0 || len(closed) != 0 || int(n) != want {
				return fmt.Errorf("%s: numbered %v of %d, leases %v, blocks whose ranks are not taken %v", seq, st["numbered"], want, leases, closed)
			}
			return nil
		})
	}
	if code, _, _ := testkit.DoJSON("GET", urls[0]+"/v1/sequences/likes", ""); code != 404 {
		t.Fatalf("the likes sequence is off, yet /v1/sequences/likes answers %d", code)
	}
	want := map[string][]float64{}
	for m := 20; m <= 3*likesPerRegion; m += 20 {
		want["launch"] = append(want["launch"], float64(m))
	}
	for m := 50; m <= units; m += 50 {
		want["searches"] = append(want["searches"], float64(m))
	}
	var first string
	for _, u := range urls {
		testkit.WaitFor(t, 30*time.Second, func() error {
			_, out, err := testkit.DoJSON("GET", u+"/v1/milestones", "")
			if err != nil {
				return err
			}
			got := map[string][]float64{}
			var desc string
			for _, m := range out["milestones"].([]any) {
				ev := m.(map[string]any)
				seq, item := ev["sequence"].(string), ev["item"].(string)
				got[seq] = append(got[seq], ev["number"].(float64))
				switch {
				case seq == "launch" && (item != "video:launch" || ev["user"] == nil):
					return fmt.Errorf("launch milestone of %v", ev)
				case seq == "searches" && (!strings.HasPrefix(item, "search:") || ev["user"] != nil):
					return fmt.Errorf("searches milestone of %v", ev)
				}
				desc += fmt.Sprintf("%s:%v:%v/%v@%v ", seq, ev["number"], item, ev["user"], ev["region"])
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("%s: milestones %v, want %v", u, got, want)
			}
			if first == "" {
				first = desc
			} else if desc != first {
				return fmt.Errorf("regions disagree:\n%s\n%s", first, desc)
			}
			return nil
		})
	}
	t.Logf("%d units of search increments; milestones: %s", units, first)
}

// TestWindowsAgreeThroughCutAndHeal is issue #15's "done when" as a test:
// hits on a key from all three regions show in last=60s everywhere; with
// eu cut off, both sides keep writing (likes too, with a concurrent double
// like of one user); after the heal every region's window, series and
// trending list (over 10 minutes and over the week) agree exactly.
func TestWindowsAgreeThroughCutAndHeal(t *testing.T) {
	startsThreeRegions(t, "starts three regions")
	urls := startReadyDeployment(t)
	us, eu, ap := urls[0], urls[1], urls[2]
	post := func(u, path, body string) {
		t.Helper()
		if st, b, err := testkit.DoJSON("POST", u+path, body); err != nil || st != 200 {
			t.Fatalf("POST %s%s: %d %v %v", u, path, st, b, err)
		}
	}
	for i, u := range urls {
		for range i + 1 {
			post(u, "/v1/counters/hits/incr", "")
		}
	}
	value := func(u, path string) (float64, map[string]any, error) {
		_, b, err := testkit.DoJSON("GET", u+path, "")
		if err != nil {
			return 0, nil, err
		}
		v, _ := b["value"].(float64)
		return v, b, nil
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		for _, u := range urls {
			if v, b, err := value(u, "/v1/counters/hits/window?last=60s"); err != nil || v != 6 {
				return fmt.Errorf("%s: last=60s %v %v, want 6", u, b, err)
			}
		}
		return nil
	})

	cut := func(up bool) { t.Helper(); setEULinks(t, eu, up) }
	cut(false)
	for i := range 20 {
		post(us, "/v1/counters/hits/incr", `{"by":2}`)
		post(eu, "/v1/counters/hits/incr", `{"by":3}`)
		post(ap, "/v1/likes", fmt.Sprintf(`{"videoId":"v%d","userId":"u%d"}`, i%4, i))
		post(eu, "/v1/likes", fmt.Sprintf(`{"videoId":"v%d","userId":"w%d"}`, i%3, i))
	}
	// The same user likes v0 on both sides of the cut: the heal reconciles.
	post(us, "/v1/likes", `{"videoId":"v0","userId":"both"}`)
	post(eu, "/v1/likes", `{"videoId":"v0","userId":"both"}`)
	cut(true)

	// Every region: the same window, series and trending answers, exact.
	wantHits := float64(6 + 20*2 + 20*3)
	get := func(u, path string) (map[string]any, error) {
		st, b, err := testkit.DoJSON("GET", u+path, "")
		if err == nil && st != 200 {
			err = fmt.Errorf("GET %s%s: %d %v", u, path, st, b)
		}
		return b, err
	}
	var from, to string
	testkit.WaitFor(t, 30*time.Second, func() error {
		b, err := get(us, "/v1/counters/hits/window?last=10m")
		if err != nil {
			return err
		}
		if b["value"] != wantHits || b["approx"] != false {
			return fmt.Errorf("us: hits last=10m %v, want %v exact", b, wantHits)
		}
		from, to = b["from"].(string), b["to"].(string)
		return nil
	})
	paths := []string{
		"/v1/counters/hits/window?from=" + from + "&to=" + to,
		"/v1/series?kind=counters&key=hits&key=*&from=" + from + "&to=" + to + "&step=1s&by=region",
		"/v1/series?kind=likes&key=v0&key=v1&key=v2&key=v3&key=*&from=" + from + "&to=" + to + "&step=1m",
		"/v1/trending?window=10m&n=10",
		"/v1/trending?window=10m&n=10&region=eu",
		"/v1/trending?window=10m&n=10&kind=counters",
		"/v1/trending?window=7d&n=10",
	}
	strip := func(b map[string]any) string {
		delete(b, "approx")
		delete(b, "final")
		delete(b, "replicas") // per-replica sums agree too, but the region map is enough
		out, _ := json.Marshal(b)
		return string(out)
	}
	testkit.WaitFor(t, 30*time.Second, func() error {
		for _, p := range paths {
			first := ""
			for _, u := range urls {
				b, err := get(u, p)
				if err != nil {
					return err
				}
				if b["approx"] != false {
					return fmt.Errorf("%s%s approx", u, p)
				}
				if s := strip(b); first == "" {
					first = s
				} else if s != first {
					return fmt.Errorf("%s%s differs:\n %s\nvs\n %s", u, p, s, first)
				}
			}
		}
		return nil
	})
	// And the answers are the exact ones: v0 has 5 likes from ap, 7 from
	// eu and "both" once.
	for _, w := range []string{"10m", "7d"} {
		b, _ := get(ap, "/v1/trending?window="+w+"&n=10")
		items, _ := b["items"].([]any)
		if len(items) == 0 || items[0].(map[string]any)["item"] != "v0" || items[0].(map[string]any)["count"] != float64(5+7+1) {
			t.Fatalf("trending window=%s: %v, want v0 first with 13", w, b)
		}
	}
	if v, b, err := value(eu, "/v1/likes/v0/window?last=10m"); err != nil || v != 13 {
		t.Fatalf("eu v0 window: %v %v, want 13", b, err)
	}
}

// The unique-count scenario of the tour (docs/tour.md): overlapping viewers added
// in three regions, eu cut off while both sides add more, then the heal.
// Every region then reports the same estimate (the same sketches), within
// the stated error of the true distinct count, all-time, for the last day
// and for the union of two keys.
func TestUniquesAgreeThroughCutAndHeal(t *testing.T) {
	startsThreeRegions(t, "starts three regions")
	urls := startReadyDeployment(t)
	eu := urls[1]
	distinct := map[string]bool{}
	add := func(u, key string, from, to int) {
		t.Helper()
		var ids []string
		for i := from; i < to; i++ {
			id := fmt.Sprintf("viewer%d", i)
			ids = append(ids, fmt.Sprintf("%q", id))
			if key == "video:1" {
				distinct[id] = true
			}
		}
		body := `{"ids":[` + strings.Join(ids, ",") + `]}`
		if st, b, err := testkit.DoJSON("POST", u+"/v1/uniques/"+key, body); err != nil || st != 200 {
			t.Fatalf("POST %s: %d %v %v", u, st, b, err)
		}
	}
	// Overlapping ranges: viewers 0..3999 at us, 2000..5999 at eu,
	// 4000..7999 at ap.
	for i, u := range urls {
		add(u, "video:1", i*2000, i*2000+4000)
	}
	cut := func(up bool) { t.Helper(); setEULinks(t, eu, up) }
	cut(false)
	add(eu, "video:1", 7000, 12000)       // eu alone: half new, half seen at ap
	add(urls[0], "video:1", 11000, 15000) // us: some of eu's new ones too
	add(urls[2], "video:2", 0, 3000)      // another key, for the union
	cut(true)

	want := float64(len(distinct)) // 15000
	paths := []string{"/v1/uniques/video:1", "/v1/uniques/video:1?last=24h", "/v1/uniques?keys=video:1,video:2"}
	testkit.WaitFor(t, 30*time.Second, func() error {
		for _, p := range paths {
			var first any
			for _, u := range urls {
				st, b, err := testkit.DoJSON("GET", u+p, "")
				if err != nil || st != 200 {
					return fmt.Errorf("GET %s%s: %d %v %v", u, p, st, b, err)
				}
				est, _ := b["estimate"].(float64)
				if regions, _ := b["regions"].([]any); len(regions) != 3 {
					return fmt.Errorf("%s%s: sketches of %v, want all three regions", u, p, b["regions"])
				}
				if first == nil {
					first = est
				} else if est != first {
					return fmt.Errorf("%s%s: estimate %v, another region says %v", u, p, est, first)
				}
				if p != paths[2] && (est < want*(1-4*0.008125) || est > want*(1+4*0.008125)) {
					// Not yet converged, or wrong: the wait says which.
					return fmt.Errorf("%s%s: estimate %v for %v distinct viewers", u, p, est, want)
				}
			}
		}
		return nil
	})
}

// The budget scenario of the tour (docs/tour.md): 1,000 granted in us, spent from
// all three regions, with eu cut off for a while in the middle. Exactly
// 1,000 spends succeed in all, no region ever shows a negative remaining,
// and every refused spend says why: rights_elsewhere while the budget has
// units held by other regions, budget_exhausted once it has none.
func TestBudgetExactlyGrantedThroughCutAndHeal(t *testing.T) {
	// Not in parallel with the other deployments (yet): run beside them on
	// a loaded 2-core machine, it failed twice in two runs of the package,
	// the remaining stuck above 0 for 30 s after the heal (us-1 holding 91
	// of the 179 left, its view approx), while it passed every time alone
	// or beside one other test. Until that is understood it runs before
	// the parallel tests, as it always did.
	if testing.Short() {
		t.Skip("starts three regions")
	}
	urls := startReadyDeployment(t)
	us, eu := urls[0], urls[1]
	const granted = 1000
	if st, b, err := testkit.DoJSON("POST", us+"/v1/budgets/gift-cards/grant", `{"by":1000}`); err != nil || st != 200 {
		t.Fatalf("grant: %d %v %v", st, b, err)
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		for _, u := range urls {
			if st, b, err := testkit.DoJSON("GET", u+"/v1/budgets/gift-cards", ""); err != nil || st != 200 || b["remaining"] != float64(granted) {
				return fmt.Errorf("%s: %d %v %v", u, st, b, err)
			}
		}
		return nil
	})

	var mu sync.Mutex
	spent := map[string]int{}
	refused := map[string]int{} // by code
	var negative []string
	spend := func(u string) (done bool) {
		st, b, err := testkit.DoJSON("POST", u+"/v1/budgets/gift-cards/spend", `{"by":1}`)
		if err != nil {
			t.Error(err)
			return true
		}
		mu.Lock()
		defer mu.Unlock()
		switch code, _ := b["code"].(string); {
		case st == 200:
			spent[u]++
		case st == 409 && (code == "rights_elsewhere" || code == "budget_exhausted"):
			refused[code]++
			if msg, _ := b["error"].(string); msg == "" {
				t.Errorf("409 without a reason: %v", b)
			}
			return code == "budget_exhausted"
		default:
			t.Errorf("spend at %s: %d %v", u, st, b)
			return true
		}
		if rem, _ := b["remaining"].(float64); rem < 0 {
			negative = append(negative, fmt.Sprintf("%s: %v", u, b))
		}
		return false
	}
	// Spenders at every region, until told to stop or the budget is gone
	// as their region sees it; a sampler reads every region meanwhile.
	run := func(stop <-chan struct{}) *sync.WaitGroup {
		var wg sync.WaitGroup
		for _, u := range urls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if spend(u) {
						return
					}
					time.Sleep(2 * time.Millisecond)
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				for _, u := range urls {
					if _, b, err := testkit.DoJSON("GET", u+"/v1/budgets/gift-cards", ""); err == nil {
						if rem, _ := b["remaining"].(float64); rem < 0 {
							mu.Lock()
							negative = append(negative, fmt.Sprintf("read %s: %v", u, b))
							mu.Unlock()
						}
					}
				}
			}
		}()
		return &wg
	}
	cut := func(up bool) { t.Helper(); setEULinks(t, eu, up) }
	phase := func(d time.Duration) {
		stop := make(chan struct{})
		wg := run(stop)
		time.Sleep(d)
		close(stop)
		wg.Wait()
	}
	phase(300 * time.Millisecond) // all connected: rights spread to where spends are
	cut(false)
	phase(700 * time.Millisecond) // eu alone spends only what it holds
	mu.Lock()
	t.Logf("after the cut: spent %v, refused %v", spent, refused)
	mu.Unlock()
	cut(true)
	// After the heal, spend until every region sees the budget exhausted
	// (a spender stops at its region's first budget_exhausted: a region's
	// view of the remaining can only be behind, so that means none left).
	stop := make(chan struct{})
	wg := run(stop)
	// The spenders stop before the deployment closes, also when the
	// wait fails.
	halt := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer func() {
		halt()
		if t.Failed() {
			mu.Lock()
			t.Logf("at the end: spent %v, refused %v", spent, refused)
			mu.Unlock()
		}
	}()
	testkit.WaitFor(t, 30*time.Second, func() error {
		for _, u := range urls {
			if st, b, err := testkit.DoJSON("GET", u+"/v1/budgets/gift-cards", ""); err != nil || st != 200 || b["remaining"] != float64(0) {
				return fmt.Errorf("%s: %d %v %v", u, st, b, err)
			}
		}
		return nil
	})
	halt()
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, n := range spent {
		total += n
	}
	t.Logf("spent %v = %d, refused %v", spent, total, refused)
	if total != granted {
		t.Fatalf("%d spends succeeded, want exactly %d", total, granted)
	}
	if len(negative) > 0 {
		t.Fatalf("negative remaining seen: %v", negative)
	}
	if refused["budget_exhausted"] == 0 {
		t.Fatalf("no spend was refused as exhausted: %v", refused)
	}
}

// The block scenario of the tour (docs/tour.md), over HTTP, with the block issued
// in a region cut off from the others: erin's likes leave every region's
// counts once the cut heals, also the one eu took meanwhile, her new likes
// are refused everywhere (403 user_blocked), and an unblock in another
// region brings every like back.
func TestBlockThroughCutAndHeal(t *testing.T) {
	startsThreeRegions(t, "starts three regions")
	urls := startReadyDeployment(t)
	us, eu, ap := urls[0], urls[1], urls[2]
	do := func(method, url string, want int) map[string]any {
		t.Helper()
		st, b, err := testkit.DoJSON(method, url, "")
		if err != nil || st != want {
			t.Fatalf("%s %s: %d %v %v, want %d", method, url, st, b, err, want)
		}
		return b
	}
	counts := func(want map[string]float64) {
		t.Helper()
		testkit.WaitFor(t, 20*time.Second, func() error {
			for _, u := range urls {
				for item, n := range want {
					_, b, err := testkit.DoJSON("GET", u+"/v1/likes/"+item, "")
					if err != nil {
						return err
					}
					if b["count"] != n || b["approx"] != false {
						return fmt.Errorf("%s %s: %v, want count %v, exact", u, item, b, n)
					}
				}
			}
			return nil
		})
	}
	do("PUT", us+"/v1/likes/post3/erin", 200)
	do("PUT", ap+"/v1/likes/post3/frank", 200)
	do("PUT", eu+"/v1/likes/post4/erin", 200)
	counts(map[string]float64{"post3": 2, "post4": 1})

	for _, other := range []string{"eu", "ap"} {
		if st, _, err := testkit.DoJSON("PUT", us+"/v1/admin/links/us/"+other, `{"up":false}`); err != nil || st != 200 {
			t.Fatalf("cut us-%s: %d %v", other, st, err)
		}
	}
	b := do("PUT", us+"/v1/blocks/erin", 200)
	if b["blocked"] != true || b["replica"] != "us-1" || b["hlc"] == nil {
		t.Fatalf("block: %v", b)
	}
	if b := do("PUT", us+"/v1/likes/post5/erin", 403); b["code"] != "user_blocked" {
		t.Fatalf("refusal: %v", b)
	}
	do("PUT", eu+"/v1/likes/post5/erin", 200) // eu has not heard of the block
	for _, other := range []string{"eu", "ap"} {
		if st, _, err := testkit.DoJSON("PUT", us+"/v1/admin/links/us/"+other, `{"up":true}`); err != nil || st != 200 {
			t.Fatalf("heal us-%s: %d %v", other, st, err)
		}
	}
	counts(map[string]float64{"post3": 1, "post4": 0, "post5": 0})
	for _, u := range urls {
		if b := do("GET", u+"/v1/blocks/erin", 200); b["blocked"] != true || b["hlc"] == nil {
			t.Fatalf("%s: flag %v", u, b)
		}
		do("PUT", u+"/v1/likes/post6/erin", 403)
	}
	if b := do("DELETE", eu+"/v1/blocks/erin", 200); b["blocked"] != false || b["replica"] != "eu-1" {
		t.Fatalf("unblock: %v", b)
	}
	counts(map[string]float64{"post3": 2, "post4": 1, "post5": 1})
}

// Handing a region's budget rights off before retiring it, over HTTP: the
// target must be a peer, the rights move, a later grant there moves on
// too, and the region that got them pays the others' spends.
func TestBudgetHandoffOverHTTP(t *testing.T) {
	startsThreeRegions(t, "starts three regions")
	urls := startReadyDeployment(t)
	us, ap := urls[0], urls[2]
	do := func(method, url, body string, want int) map[string]any {
		t.Helper()
		st, b, err := testkit.DoJSON(method, url, body)
		if err != nil || st != want {
			t.Fatalf("%s %s %s: %d %v %v, want %d", method, url, body, st, b, err, want)
		}
		return b
	}
	do("POST", us+"/v1/budgets/gift-cards/grant", `{"by":100}`, 200)
	if b := do("PUT", us+"/v1/admin/budgets/handoff", `{"to":"mars-1"}`, 409); b["code"] != "unknown_replica" {
		t.Fatalf("handoff to a stranger: %v", b)
	}
	do("PUT", us+"/v1/admin/budgets/handoff", `{"to":"us-1"}`, 400)
	do("PUT", us+"/v1/admin/budgets/handoff", `{}`, 400)
	if b := do("PUT", us+"/v1/admin/budgets/handoff", `{"to":"eu-1"}`, 200); b["moved"] != float64(100) || b["held"] != float64(0) {
		t.Fatalf("handoff: %v", b)
	}
	do("POST", us+"/v1/budgets/gift-cards/grant", `{"by":5}`, 200)
	if b := do("GET", us+"/v1/admin/budgets/handoff", "", 200); b["to"] != "eu-1" || b["held"] != float64(0) {
		t.Fatalf("handoff status: %v", b)
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		b := do("GET", ap+"/v1/budgets/gift-cards", "", 200)
		if r, _ := b["rights"].(map[string]any); b["remaining"] != float64(105) || r["eu-1"] != float64(105) {
			return fmt.Errorf("ap sees %v", b)
		}
		return nil
	})
	// ap asks, and eu (not us) pays.
	testkit.WaitFor(t, 10*time.Second, func() error {
		if st, b, err := testkit.DoJSON("POST", ap+"/v1/budgets/gift-cards/spend", `{"by":1}`); err != nil || st != 200 {
			return fmt.Errorf("spend at ap: %d %v %v", st, b, err)
		}
		return nil
	})
	if b := do("DELETE", us+"/v1/admin/budgets/handoff", "", 200); b["to"] != "" {
		t.Fatalf("cancelled handoff: %v", b)
	}
	if b := do("POST", us+"/v1/budgets/gift-cards/grant", `{"by":3}`, 200); b["rights"] != float64(3) {
		t.Fatalf("grant after the cancel: %v", b)
	}
}

// setEULinks cuts (up false) or heals eu's links to us and ap, through
// the admin route of eu's replica at eu.
func setEULinks(t *testing.T, eu string, up bool) {
	t.Helper()
	for _, other := range []string{"us", "ap"} {
		body := fmt.Sprintf(`{"up":%v}`, up)
		if st, b, err := testkit.DoJSON("PUT", eu+"/v1/admin/links/eu/"+other, body); err != nil || st != 200 {
			t.Fatalf("link eu-%s up=%v: %d %v %v", other, up, st, b, err)
		}
	}
}
