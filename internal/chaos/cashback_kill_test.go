package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/failpoint"
	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/shard"
)

// A cross-shard cashback's entry replica killed (kill -9, by the chaos
// build's failpoint) at each step of the purchase, then restarted: its
// recovery finishes the purchase or calls it off, exactly once. Money is
// conserved at the end (what left the pool is what left the merchants is
// what the users got), no budget is overdrawn, and a retry of each
// purchase at another replica agrees with how it ended.
func TestCashbackKilledAtEveryStep(t *testing.T) {
	// Not beside the package's other real-process runs (t.Parallel): on
	// two cores, a sharded chaos run and this one at once slow each
	// other's restarts past their bounds.
	const why = "runs a sharded region of tallyd processes and kills one at every step of a purchase"
	if testing.Short() {
		t.Skip(why)
	}
	if !fullSuite() {
		t.Skipf("%s: in the full tier (`make chaos`, or %s=full)", why, envSuite)
	}
	cfg := DefaultConfig()
	cfg.Binary = chaosBinary(t)
	cfg.Regions, cfg.Replicas, cfg.Copies = []string{"us"}, 3, 2
	cfg.RequestTimeout = 2 * time.Second
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	d, err := startDeployment(ctx, cfg, t.TempDir(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.stop()
	entry, other := d.procs[0], d.procs[1]
	base := func(p *proc) string { return "http://" + p.addr }
	do := func(p *proc, method, path, body string) (int, map[string]any, error) {
		return testkit.DoJSON(method, base(p)+path, body)
	}
	// Keys whose shards no one set of holders holds together.
	maps := []shard.Map{shardMapOf(t, entry)}
	pick := func(prefix string, avoid ...string) string { return keyApart(maps, prefix, avoid...) }
	const pool = "kpool"
	rich := pick("rich", pool)
	poor := pick("poor", pool)
	user := pick("kuser", pool, rich)
	grants := map[string]int64{pool: 1000, rich: 100, poor: 2}
	for k, by := range grants {
		if st, b, err := do(other, "POST", "/v1/budgets/"+k+"/grant", fmt.Sprintf(`{"by":%d}`, by)); err != nil || st != 200 {
			t.Fatalf("grant %s: %d %v %v", k, st, b, err)
		}
	}
	type purchase struct{ key, merchant, step string }
	var purchases []purchase
	// The paid path's steps with the rich merchant; the refused path's
	// (the poor merchant cannot pay 5) with the poor one.
	for _, s := range []string{"pool", "merchant", "user", "done"} {
		purchases = append(purchases, purchase{"paid-at-" + s, rich, s})
	}
	for _, s := range []string{"merchant", "fence", "call_off", "done"} {
		purchases = append(purchases, purchase{"refused-at-" + s, poor, s})
	}
	body := func(p purchase) string {
		return fmt.Sprintf(`{"budget":%q,"merchant":%q,"user":%q,"amount":5,"idempotency_key":%q}`, pool, p.merchant, user, p.key)
	}
	read := func(path, field string) (int64, error) {
		st, b, err := do(other, "GET", path, "")
		if err != nil || st != 200 {
			return 0, fmt.Errorf("%s: %d %v %v", path, st, b, err)
		}
		v, _ := b[field].(float64)
		return int64(v), nil
	}
	// balances waits until every replica's reads say: paid went from the
	// pool and the rich merchant to the user, the poor merchant paid
	// nothing, and nothing is overdrawn.
	balances := func(paid int64) {
		t.Helper()
		testkit.WaitFor(t, 30*time.Second, func() error {
			left := map[string]int64{}
			for k := range grants {
				v, err := read("/v1/budgets/"+k, "remaining")
				if err != nil {
					return err
				}
				if v < 0 {
					t.Fatalf("%s overdrawn: %d", k, v)
				}
				left[k] = v
			}
			credited, err := read("/v1/counters/"+user, "value")
			if err != nil {
				return err
			}
			if grants[pool]-left[pool] != paid || grants[rich]-left[rich] != paid || grants[poor] != left[poor] || credited != paid {
				return fmt.Errorf("pool paid %d, rich merchant %d, poor merchant %d, user got %d; want %d, %d, 0, %d",
					grants[pool]-left[pool], grants[rich]-left[rich], grants[poor]-left[poor], credited, paid, paid, paid)
			}
			return nil
		})
	}
	paid := int64(0)
	for _, p := range purchases {
		entry.setEnv(failpoint.EnvFailpoint + "=" + string(failpoint.CashbackStep(p.step)))
		d.terminate(entry, 10*time.Second)
		if err := d.start(entry); err != nil {
			t.Fatal(err)
		}
		if err := d.waitReady(ctx, entry); err != nil {
			t.Fatal(err)
		}
		st, b, err := do(entry, "POST", "/v1/cashback", body(p))
		if err == nil {
			t.Fatalf("%s: answered %d %v; the entry replica should have died at step %s", p.key, st, b, p.step)
		}
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		state, err := d.waitExit(wctx, entry)
		wcancel()
		if err != nil || !strings.Contains(state, "killed") {
			t.Fatalf("%s: the entry replica did not die by kill -9 at %s: %q %v", p.key, p.step, state, err)
		}
		entry.setEnv()
		if err := d.start(entry); err != nil {
			t.Fatal(err)
		}
		if err := d.waitReady(ctx, entry); err != nil {
			t.Fatal(err)
		}
		// The restarted entry's recovery finishes the purchase (its
		// journal empties, and the balances show it), before anyone
		// retries it; a retry at another replica then agrees with how it
		// ended.
		testkit.WaitFor(t, time.Minute, func() error {
			resp, err := http.Get(base(entry) + "/metrics")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if !strings.Contains(string(b), "\ntally_cashback_intents 0\n") {
				return fmt.Errorf("%s: the entry's journal is not empty yet", p.key)
			}
			return nil
		})
		if p.merchant == rich {
			paid += 5
		}
		balances(paid) // finished by the entry's recovery alone
		testkit.WaitFor(t, time.Minute, func() error {
			st, b, err := do(other, "POST", "/v1/cashback", body(p))
			switch {
			case err != nil:
				return err
			case p.merchant == rich && (st != 200 || b["duplicate"] != true):
				return fmt.Errorf("%s: retry answered %d %v, want a paid duplicate", p.key, st, b)
			case p.merchant == poor && (st != 409 || b["code"] != "called_off" && b["code"] != "budget_exhausted"):
				return fmt.Errorf("%s: retry answered %d %v, want refused", p.key, st, b)
			}
			return nil
		})
	}
	balances(int64(5 * 4)) // the four purchases of the rich merchant
}

// shardMapOf is the shard map replica p serves by (GET /v1/shards).
func shardMapOf(t *testing.T, p *proc) shard.Map {
	t.Helper()
	resp, err := http.Get("http://" + p.addr + "/v1/shards")
	if err != nil {
		t.Fatalf("GET /v1/shards of %s: %v", p.addr, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/shards of %s: %d %v", p.addr, resp.StatusCode, err)
	}
	m, err := shard.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// keyApart is the first key prefix0, prefix1, ... whose holders, in each
// of maps, are not those of any key in avoid: a purchase of such keys
// runs across shards.
func keyApart(maps []shard.Map, prefix string, avoid ...string) string {
	for i := 0; ; i++ {
		k := fmt.Sprintf("%s%d", prefix, i)
		ok := true
		for _, m := range maps {
			holders := func(k string) string { return strings.Join(m.Holders(shard.Of(k)), ",") }
			for _, a := range avoid {
				ok = ok && holders(k) != holders(a)
			}
		}
		if ok {
			return k
		}
	}
}
