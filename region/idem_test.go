package region

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// A keyed increment is a duplicate until its key expires by the rule
// (TTL after its stamp), then applies again; the sweep deletes exactly the
// expired keys.
func TestExpireIdempotency(t *testing.T) {
	clock := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
	r, _ := openReplica(t, t.TempDir(), "a", func(c *Config) {
		c.Now, c.IdempotencyTTL, c.IdempotencySweep = clock.Now, 30*time.Minute, 1000*time.Hour
	})
	ctx := context.Background()
	incr := func(idem string, wantValue int64, wantDup bool) {
		t.Helper()
		res, err := r.Counters().Incr(ctx, "views", 1, idem)
		if err != nil || res.Value != wantValue || res.Duplicate != wantDup {
			t.Fatalf("incr %s: %+v, %v; want value %d, duplicate %v", idem, res, err, wantValue, wantDup)
		}
	}
	for i := range 2500 { // more than one sweep page
		incr(fmt.Sprintf("old-%d", i), int64(i+1), false)
	}
	incr("old-7", 2500, true) // a duplicate answers the current value
	clock.Advance(time.Hour)
	incr("new", 2501, false)

	n, err := r.Admin().ExpireIdempotency(ctx, clock.Now())
	if err != nil || n != 2500 {
		t.Fatalf("expired %d, %v; want 2500", n, err)
	}
	if got := testutil.ToFloat64(r.metrics.idemExpired); got != 2500 {
		t.Errorf("metric: %v", got)
	}
	incr("old-7", 2502, false) // forgotten: applies again
	incr("new", 2502, true)    // within the TTL: still a duplicate
	if n, err := r.Admin().ExpireIdempotency(ctx, clock.Now()); err != nil || n != 0 {
		t.Errorf("second sweep expired %d, %v; want 0 (old-7 was stored anew)", n, err)
	}
}

// Expiry is a rule of the key's stamp and the clock, not of the sweep: a
// retry after the TTL applies again before any sweep, and the writer
// checks each key the sweep hands it again.
func TestKeyExpiresByRule(t *testing.T) {
	clock := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
	r, _ := openReplica(t, t.TempDir(), "a", func(c *Config) {
		c.Now, c.IdempotencyTTL, c.IdempotencySweep = clock.Now, time.Hour, 1000*time.Hour
	})
	ctx := context.Background()
	if _, err := r.Counters().Incr(ctx, "views", 1, "k"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(59 * time.Minute)
	if res, err := r.Counters().Incr(ctx, "views", 1, "k"); err != nil || !res.Duplicate {
		t.Fatalf("within the TTL: %+v, %v", res, err)
	}
	clock.Advance(2 * time.Minute)
	if res, err := r.Counters().Incr(ctx, "views", 1, "k"); err != nil || res.Duplicate || res.Value != 2 {
		t.Fatalf("after the TTL, before any sweep: %+v, %v", res, err)
	}
	if n, err := r.Admin().ExpireIdempotency(ctx, clock.Now()); err != nil || n != 0 {
		t.Fatalf("sweep deleted %d fresh keys, %v", n, err)
	}

	// Within one batch: expire, then the increment, then expire again.
	clock.Advance(2 * time.Hour)
	tx := r.newTxn(0)
	defer tx.close()
	first := &request{expire: []rkey{keyedKey("views", "k")}}
	tx.apply(first)
	retry := &request{ops: []Op{{Kind: OpIncr, Item: "views", By: 1, IdemKey: "k"}}, res: make([]Result, 1)}
	tx.apply(retry)
	again := &request{expire: []rkey{keyedKey("views", "k")}}
	tx.apply(again)
	if first.expired != 1 || retry.res[0].Duplicate || again.expired != 0 {
		t.Fatalf("one batch: expired %d, retry %+v, expired again %d", first.expired, retry.res[0], again.expired)
	}
}

// With a TTL the replica's own sweeper forgets old keys, and Close stops it.
func TestIdempotencySweeper(t *testing.T) {
	clock := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
	r, closeFn := openReplica(t, t.TempDir(), "a", func(c *Config) {
		c.Now, c.IdempotencyTTL, c.IdempotencySweep = clock.Now, time.Hour, 10*time.Millisecond
	})
	ctx := context.Background()
	if _, err := r.Counters().Incr(ctx, "views", 1, "k"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // sweeps run; k is not old enough
	if res, err := r.Counters().Incr(ctx, "views", 1, "k"); err != nil || !res.Duplicate {
		t.Fatalf("k forgotten within its TTL: %+v, %v", res, err)
	}
	clock.Advance(2 * time.Hour)
	testkit.WaitFor(t, 10*time.Second, func() error {
		if testutil.ToFloat64(r.metrics.idemExpired) < 1 {
			return errors.New("the sweeper did not expire k")
		}
		return nil
	})
	if res, err := r.Counters().Incr(ctx, "views", 1, "k"); err != nil || res.Duplicate || res.Value != 2 {
		t.Fatalf("after the sweep: %+v, %v", res, err)
	}
	closeFn() // returns only once the sweeper has stopped (the WaitGroup)
}

func TestIdempotencyConfig(t *testing.T) {
	c := Config{IdempotencyTTL: 24 * time.Hour}
	c.ensureDefaults()
	if c.IdempotencySweep != time.Minute {
		t.Errorf("sweep for 24h: %v", c.IdempotencySweep)
	}
	c = Config{IdempotencyTTL: 2 * time.Second}
	c.ensureDefaults()
	if c.IdempotencySweep != time.Second {
		t.Errorf("sweep for 2s: %v", c.IdempotencySweep)
	}
	c = Config{Region: "r", Replica: "a", IdempotencyTTL: -time.Second}
	c.ensureDefaults()
	if err := c.Validate(); err == nil {
		t.Error("negative TTL accepted")
	}
}
