package deploy_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// The cashback of the product's design ("the overall balance of all
// accounts remains constant"), through a cut: a merchant's balance of 150
// is paid out as cashbacks of 1 from all three regions, with eu cut off
// for a while. Exactly 150 are paid, no region ever reads the merchant
// below zero, a cashback past what a region holds of the balance is
// refused with the budget's code naming the merchant, and after the heal
// every region reads the merchant at 0 and the users at 150: the sum of
// all accounts is what was granted to the merchant. A purchase retried at
// another region after the heal is a duplicate.
func TestCashbackMerchantFloorThroughCutAndHeal(t *testing.T) {
	startsThreeRegions(t, "starts three regions")
	urls := startReadyDeployment(t)
	us, eu := urls[0], urls[1]
	const balance = 150
	for _, g := range []string{`/v1/budgets/pool/grant {"by":1000}`, fmt.Sprintf(`/v1/budgets/shop/grant {"by":%d}`, balance)} {
		var path, body string
		fmt.Sscanf(g, "%s %s", &path, &body)
		if st, b, err := testkit.DoJSON("POST", us+path, body); err != nil || st != 200 {
			t.Fatalf("grant %s: %d %v %v", path, st, b, err)
		}
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		for _, u := range urls {
			if st, b, err := testkit.DoJSON("GET", u+"/v1/budgets/shop", ""); err != nil || st != 200 || b["remaining"] != float64(balance) {
				return fmt.Errorf("%s: %d %v %v", u, st, b, err)
			}
		}
		return nil
	})

	var mu sync.Mutex
	paid := map[string]string{}   // purchase key -> region URL that paid it
	bodies := map[string]string{} // purchase key -> its request
	refused := map[string]int{}   // by code and key
	var bad []string
	n := 0
	cashback := func(u string) (exhausted bool) {
		mu.Lock()
		n++
		i := n
		mu.Unlock()
		key := fmt.Sprintf("purchase-%d", i)
		body := fmt.Sprintf(`{"budget":"pool","merchant":"shop","user":"u%d","amount":1,"idempotency_key":%q}`, i%3, key)
		st, b, err := testkit.DoJSON("POST", u+"/v1/cashback", body)
		if err != nil {
			t.Error(err)
			return true
		}
		mu.Lock()
		defer mu.Unlock()
		code, _ := b["code"].(string)
		switch {
		case st == 200:
			paid[key], bodies[key] = u, body
			if m, _ := b["merchant"].(map[string]any); m["value"].(float64) < 0 {
				bad = append(bad, fmt.Sprintf("%s: %v", u, b))
			}
		case st == 409 && (code == "rights_elsewhere" || code == "budget_exhausted"):
			refused[code+"/"+fmt.Sprint(b["key"])]++
			if b["key"] != "shop" && code == "budget_exhausted" {
				bad = append(bad, fmt.Sprintf("the pool, which has plenty, refused as exhausted: %v", b))
			}
			return code == "budget_exhausted"
		default:
			t.Errorf("cashback at %s: %d %v", u, st, b)
			return true
		}
		return false
	}
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
					case <-time.After(5 * time.Millisecond):
					}
					if cashback(u) {
						return
					}
				}
			}()
		}
		wg.Add(1)
		go func() { // the merchant read in every region, meanwhile
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				for _, u := range urls {
					if _, b, err := testkit.DoJSON("GET", u+"/v1/budgets/shop", ""); err == nil {
						if rem, _ := b["remaining"].(float64); rem < 0 || b["local_rights"].(float64) < 0 {
							mu.Lock()
							bad = append(bad, fmt.Sprintf("read %s: %v", u, b))
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
	phase(100 * time.Millisecond) // all connected: the merchant's rights spread
	cut(false)
	phase(400 * time.Millisecond) // eu alone pays only what it holds
	mu.Lock()
	t.Logf("after the cut: %d paid, refused %v", len(paid), refused)
	mu.Unlock()
	cut(true)
	stop := make(chan struct{})
	wg := run(stop)
	testkit.WaitFor(t, 30*time.Second, func() error {
		for _, u := range urls {
			if st, b, err := testkit.DoJSON("GET", u+"/v1/budgets/shop", ""); err != nil || st != 200 || b["remaining"] != float64(0) {
				return fmt.Errorf("%s: %d %v %v", u, st, b, err)
			}
		}
		return nil
	})
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	t.Logf("paid %d, refused %v", len(paid), refused)
	if len(paid) != balance {
		t.Fatalf("%d cashbacks paid from a merchant's balance of %d", len(paid), balance)
	}
	if len(bad) > 0 {
		t.Fatalf("overdrawn or misnamed: %v", bad)
	}
	if refused["budget_exhausted/shop"] == 0 {
		t.Fatalf("no cashback refused for the merchant's balance: %v", refused)
	}
	// Every region: the merchant at 0 with nobody holding negative rights,
	// the users credited the whole balance, the pool spent as much.
	testkit.WaitFor(t, 10*time.Second, func() error {
		for _, u := range urls {
			var users float64
			for i := range 3 {
				_, b, err := testkit.DoJSON("GET", fmt.Sprintf("%s/v1/counters/u%d", u, i), "")
				if err != nil {
					return err
				}
				v, _ := b["value"].(float64)
				users += v
			}
			_, m, err := testkit.DoJSON("GET", u+"/v1/budgets/shop", "")
			if err != nil {
				return err
			}
			_, p, err := testkit.DoJSON("GET", u+"/v1/budgets/pool", "")
			if err != nil {
				return err
			}
			if users+m["remaining"].(float64) != balance || p["remaining"] != float64(1000-balance) || m["spent"] != float64(balance) {
				return fmt.Errorf("%s: users %v, merchant %v, pool %v", u, users, m, p)
			}
		}
		return nil
	})
	// A paid purchase retried at another region is a duplicate and
	// changes nothing.
	for key, u := range paid {
		other := us
		if u == us {
			other = eu
		}
		if st, b, err := testkit.DoJSON("POST", other+"/v1/cashback", bodies[key]); err != nil || st != 200 || b["duplicate"] != true {
			t.Fatalf("retry of %s at %s: %d %v %v", key, other, st, b, err)
		}
		if _, m, err := testkit.DoJSON("GET", other+"/v1/budgets/shop", ""); err != nil || m["remaining"] != float64(0) || m["spent"] != float64(balance) {
			t.Fatalf("merchant after a retry: %v %v", m, err)
		}
		break
	}
}
