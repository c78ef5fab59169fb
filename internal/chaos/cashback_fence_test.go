package chaos

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/failpoint"
	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/shard"
)

// One purchase key sent to two regions cut off from each other: called
// off in one (its merchant cannot pay there), then paid in the other.
// After the heal, the fence of the call-off beats the later payment
// wherever the records merge, and every replica of both regions reads
// the purchase called off: nothing left the pool or the merchant, the
// user got nothing, and a retry anywhere answers called_off.
func TestCashbackCalledOffInOneRegionPaidInAnother(t *testing.T) {
	s := cashbackCalledOffAndPaid(t, "")
	testkit.WaitFor(t, 90*time.Second, func() error { return s.everywhere(fenceEnd.calledOff) })
	// Once every balance says called off: a retry, at any replica,
	// answers so too (and, if a fence were still on its way, would only
	// fence again: it cannot undo the call-off).
	testkit.WaitFor(t, 30*time.Second, func() error {
		for _, p := range s.d.procs {
			st, b, err := s.do(p, "POST", "/v1/cashback", s.body)
			if err != nil {
				return err
			}
			if st != 409 || b["code"] != "called_off" {
				return fmt.Errorf("a retry at %s answered %d %v, want 409 called_off", p.replica, st, b)
			}
		}
		return nil
	})
}

// The negative control of TestCashbackCalledOffInOneRegionPaidInAnother:
// with the chaos build's bug fences-lose (a merged fence is ordered by
// its stamp alone, like any application), the payment, stamped after the
// fences, wins wherever the records merge, and the purchase ends paid in
// every replica of both regions: the test's check fails at every one,
// every run. No retry is sent here: with the bug, a retry that meets a
// fence not yet overwritten fences again, stamped after the payment, and
// the end would depend on timing.
func TestCashbackCalledOffInOneRegionPaidInAnotherFencesLose(t *testing.T) {
	s := cashbackCalledOffAndPaid(t, string(failpoint.FencesLose))
	testkit.WaitFor(t, 90*time.Second, func() error { return s.everywhere(fenceEnd.paid) })
	for _, p := range s.d.procs {
		e, err := s.balances(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.calledOff(); err == nil {
			t.Fatalf("bug %s went unnoticed at %s: the purchase reads called off", failpoint.FencesLose, p.replica)
		} else {
			t.Logf("bug %s caught at %s, as it must be: %v", failpoint.FencesLose, p.replica, err)
		}
	}
}

// fenceEnd is what a replica reads of the purchase of
// cashbackCalledOffAndPaid: what left the pool and the merchant, and
// what the user got.
type fenceEnd struct{ poolSpent, merchantSpent, credited int64 }

// calledOff says what is wrong with e if it is not the purchase called
// off: nothing moved.
func (e fenceEnd) calledOff() error {
	if e != (fenceEnd{}) {
		return fmt.Errorf("the pool spent %d, the merchant %d, the user was credited %d; want nothing moved (called off)",
			e.poolSpent, e.merchantSpent, e.credited)
	}
	return nil
}

// paid says what is wrong with e if it is not the purchase paid once.
func (e fenceEnd) paid() error {
	if want := (fenceEnd{fenceAmount, fenceAmount, fenceAmount}); e != want {
		return fmt.Errorf("the pool spent %d, the merchant %d, the user was credited %d; want %d each (paid)",
			e.poolSpent, e.merchantSpent, e.credited, fenceAmount)
	}
	return nil
}

// fenceAmount is the purchase's amount.
const fenceAmount = 5

// fenceScenario is a run of cashbackCalledOffAndPaid, healed.
type fenceScenario struct {
	d        *deployment
	body     string // the purchase's request
	do       func(p *proc, method, path, body string) (int, map[string]any, error)
	balances func(p *proc) (fenceEnd, error)
}

// everywhere reports the first replica, of both regions, whose reads
// are not what check wants.
func (s *fenceScenario) everywhere(check func(fenceEnd) error) error {
	for _, p := range s.d.procs {
		e, err := s.balances(p)
		if err != nil {
			return err
		}
		if err := check(e); err != nil {
			return fmt.Errorf("%s: %w", p.replica, err)
		}
	}
	return nil
}

// cashbackCalledOffAndPaid runs the scenario of
// TestCashbackCalledOffInOneRegionPaidInAnother up to the heal, with the
// chaos build's bug (TALLY_CHAOS_BUG) if not "": two sharded regions,
// the purchase's three keys on different holders in both, the link
// between them cut; the pool granted in both, the merchant only in
// "us"; the purchase sent to "eu" (refused by the merchant: called off),
// then to "us" (paid); the link healed. The caller checks how it ends.
func cashbackCalledOffAndPaid(t *testing.T, bug string) *fenceScenario {
	// Not beside the package's other real-process runs, for the reason
	// TestCashbackKilledAtEveryStep gives.
	const why = "runs two sharded regions of tallyd processes, cut off from each other"
	if testing.Short() {
		t.Skip(why)
	}
	if !fullSuite() {
		t.Skipf("%s: in the full tier (`make chaos`, or %s=full)", why, envSuite)
	}
	cfg := DefaultConfig()
	cfg.Binary = chaosBinary(t)
	const paying, refusing = "us", "eu"
	cfg.Regions, cfg.Replicas, cfg.Copies = []string{paying, refusing}, 3, 2
	cfg.RequestTimeout = 2 * time.Second
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	var regionEnv map[string][]string
	if bug != "" {
		regionEnv = map[string][]string{}
		for _, r := range cfg.Regions {
			regionEnv[r] = []string{failpoint.EnvBug + "=" + bug}
		}
	}
	d, err := startDeployment(ctx, cfg, t.TempDir(), "", regionEnv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.stop)
	base := func(p *proc) string { return "http://" + p.addr }
	do := func(p *proc, method, path, body string) (int, map[string]any, error) {
		return testkit.DoJSON(method, base(p)+path, body)
	}
	// Keys no two of which one set of holders holds together, in either
	// region: the purchase runs across shards in both.
	var maps []shard.Map
	for _, r := range cfg.Regions {
		maps = append(maps, shardMapOf(t, d.proc(r)))
	}
	pick := func(prefix string, avoid ...string) string { return keyApart(maps, prefix, avoid...) }
	const pool = "fpool"
	merchant := pick("fmerchant", pool)
	user := pick("fuser", pool, merchant)
	// Cut before anything is granted: the refusing region never hears of
	// the merchant's grant, so its merchant refuses at once.
	if err := d.net.SetLink(paying, refusing, false); err != nil {
		t.Fatal(err)
	}
	const poolGrant, merchantGrant = 100, 50
	grant := func(r, k string, by int64) {
		t.Helper()
		if st, b, err := do(d.proc(r), "POST", "/v1/budgets/"+k+"/grant", fmt.Sprintf(`{"by":%d}`, by)); err != nil || st != 200 {
			t.Fatalf("grant %s in %s: %d %v %v", k, r, st, b, err)
		}
	}
	grant(paying, pool, poolGrant)
	grant(refusing, pool, poolGrant)
	grant(paying, merchant, merchantGrant)
	// Every replica (both holders of each key among them) has the grants
	// its region was sent before the purchase: a holder that had not yet
	// would refuse the pool's spend, and nothing would be called off.
	testkit.WaitFor(t, 30*time.Second, func() error {
		for _, p := range d.procs {
			want := map[string]int64{pool: poolGrant, merchant: 0}
			if p.region == paying {
				want[merchant] = merchantGrant
			}
			for k, v := range want {
				st, b, err := do(p, "GET", "/v1/budgets/"+k, "")
				got, _ := b["remaining"].(float64)
				if v == 0 && st == 404 {
					continue
				}
				if err != nil || st != 200 || int64(got) != v {
					return fmt.Errorf("%s at %s: %d %v %v, want %d left", k, p.replica, st, b, err, v)
				}
			}
		}
		return nil
	})
	const idem = "fenced-purchase"
	body := fmt.Sprintf(`{"budget":%q,"merchant":%q,"user":%q,"amount":%d,"idempotency_key":%q}`, pool, merchant, user, fenceAmount, idem)
	// Refused and called off where the merchant cannot pay, then, later
	// (so stamped after the fences), paid where it can.
	st, b, err := do(d.proc(refusing), "POST", "/v1/cashback", body)
	if err != nil || st != 409 || b["key"] != merchant {
		t.Fatalf("cashback in %s (cut off): %d %v %v; want 409, the merchant refusing", refusing, st, b, err)
	}
	t.Logf("cashback in %s (cut off): %d %v", refusing, st, b)
	// The payment is stamped after the fences (a later millisecond of
	// the one clock every process reads), which is what the control's
	// bug orders by.
	for answered := time.Now().UnixMilli(); time.Now().UnixMilli() <= answered; {
		time.Sleep(time.Millisecond)
	}
	st, b, err = do(d.proc(paying), "POST", "/v1/cashback", body)
	if err != nil || st != 200 {
		t.Fatalf("cashback in %s (cut off): %d %v %v; want 200 (paid)", paying, st, b, err)
	}
	t.Logf("cashback in %s (cut off): %d %v", paying, st, b)
	if err := d.net.SetLink(paying, refusing, true); err != nil {
		t.Fatal(err)
	}
	read := func(p *proc, path, field string) (int64, error) {
		st, b, err := do(p, "GET", path, "")
		if err != nil || st != 200 {
			return 0, fmt.Errorf("%s at %s: %d %v %v", path, p.replica, st, b, err)
		}
		v, _ := b[field].(float64)
		return int64(v), nil
	}
	balances := func(p *proc) (fenceEnd, error) {
		var e fenceEnd
		left, err := read(p, "/v1/budgets/"+pool, "remaining")
		if err != nil {
			return e, err
		}
		mleft, err := read(p, "/v1/budgets/"+merchant, "remaining")
		if err != nil {
			return e, err
		}
		if e.credited, err = read(p, "/v1/counters/"+user, "value"); err != nil {
			return e, err
		}
		e.poolSpent, e.merchantSpent = 2*poolGrant-left, merchantGrant-mleft
		return e, nil
	}
	return &fenceScenario{d: d, body: body, do: do, balances: balances}
}
