package purchase_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/purchase"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/shard"
	"github.com/tally-dev/tally/storage"
)

// A region of three replicas, copies 1, on real replicas and Pebble
// directories; the router sends each operation to its shard's holder in
// process, and can lose answers or crash the way the network and kill -9
// do. The clock that spaces a purchase's attempts is the test's.
type world struct {
	t       *testing.T
	m       shard.Map
	reps    map[string]*region.Replica
	journal *storage.Store
	now     time.Time
	mu      sync.Mutex
	// fault, if set, is asked before and after each operation is applied:
	// an error before means nothing applied; after, applied but no answer.
	fault func(op region.Op, applied bool) error
	// pool, merchant and user are keys on shards of three different holders.
	pool, merchant, user string
}

const timeout = 5 * time.Second

func newWorld(t *testing.T) *world { return newRegionWorld(t, "us", nil) }

// newRegionWorld is newWorld for region name, its replicas' commits
// handed to onCommit (nil: kept to themselves).
func newRegionWorld(t *testing.T, name string, onCommit func(replica string, c region.Changes)) *world {
	t.Helper()
	ids := []string{name + "-1", name + "-2", name + "-3"}
	m, err := shard.Assign(name, ids, 1)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, m: m, reps: map[string]*region.Replica{}, now: time.UnixMilli(1_800_000_000_000)}
	for _, id := range ids {
		st, err := storage.Open(storage.Config{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		held := m.Held(id)
		cfg := region.Config{Region: name, Replica: id, Store: st, Seed: 1, Holds: held.Has}
		if onCommit != nil {
			cfg.OnCommit = func(c region.Changes) { onCommit(id, c) }
		}
		rep, err := region.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rep.Close() })
		w.reps[id] = rep
	}
	st, err := storage.Open(storage.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	w.journal = st
	holder := func(k string) string { return m.Holders(shard.Of(k))[0] }
	w.pool = "pool"
	for i := 0; w.merchant == "" || w.user == ""; i++ {
		k := fmt.Sprintf("k%d", i)
		switch {
		case w.merchant == "" && holder(k) != holder(w.pool):
			w.merchant = k
		case w.merchant != "" && holder(k) != holder(w.pool) && holder(k) != holder(w.merchant):
			w.user = k
		}
	}
	return w
}

func (w *world) Apply(ctx context.Context, s int, ops []region.Op, _ bool) ([]region.Result, error) {
	for _, op := range ops {
		if w.fault != nil {
			if err := w.fault(op, false); err != nil {
				return nil, err
			}
		}
	}
	res, err := w.reps[w.m.Holders(s)[0]].Do(ctx, ops)
	if err != nil {
		return nil, err
	}
	for _, op := range ops {
		if w.fault != nil {
			if err := w.fault(op, true); err != nil {
				return nil, err
			}
		}
	}
	return res, nil
}

func (w *world) clock() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.now
}

func (w *world) advance(d time.Duration) {
	w.mu.Lock()
	w.now = w.now.Add(d)
	w.mu.Unlock()
}

// coordinator is a replica's coordinator, as started afresh (after a
// restart, on the same journal).
func (w *world) coordinator(at func(string, purchase.Step) error) *purchase.Coordinator {
	c, err := purchase.New(purchase.Config{Router: w, Journal: w.journal, Map: func() shard.Map { return w.m },
		Timeout: timeout, Now: w.clock, AtStep: at})
	if err != nil {
		w.t.Fatal(err)
	}
	return c
}

func (w *world) do(op region.Op) region.Result {
	w.t.Helper()
	res, err := w.reps[w.m.Holders(shard.Of(op.Item))[0]].Do(context.Background(), []region.Op{op})
	if err != nil || res[0].Err != nil {
		w.t.Fatalf("%v: %v %v", op, err, res[0].Err)
	}
	return res[0]
}

func (w *world) grant(key string, by int64) {
	w.do(region.Op{Kind: region.OpGrant, Item: key, By: by})
}

func (w *world) remaining(key string) int64 {
	w.t.Helper()
	b, err := w.reps[w.m.Holders(shard.Of(key))[0]].Budgets().Get(key)
	if err != nil {
		w.t.Fatal(err)
	}
	return b.Remaining
}

func (w *world) counter(key string) int64 {
	w.t.Helper()
	r, err := w.reps[w.m.Holders(shard.Of(key))[0]].Counters().Get(key)
	if err != nil {
		w.t.Fatal(err)
	}
	return r.Value
}

func (w *world) cashback(idem string, by int64) region.Op {
	return region.Op{Kind: region.OpCashback, Item: w.pool, Merchant: w.merchant, User: w.user, By: by, IdemKey: idem}
}

// conserved checks that money is neither lost nor made: what left the
// pool is what left the merchant is what the user got, and the journal
// is empty.
func (w *world) conserved(pool, merchant int64) {
	w.t.Helper()
	spentPool, spentMerchant, credited := pool-w.remaining(w.pool), merchant-w.remaining(w.merchant), w.counter(w.user)
	if spentPool != credited || spentMerchant != credited {
		w.t.Fatalf("pool paid %d, merchant paid %d, user got %d", spentPool, spentMerchant, credited)
	}
	if w.remaining(w.merchant) < 0 || w.remaining(w.pool) < 0 {
		w.t.Fatalf("overdrawn: pool %d, merchant %d", w.remaining(w.pool), w.remaining(w.merchant))
	}
	left := 0
	if err := w.journal.Intents(func(string, []byte) bool { left++; return true }); err != nil {
		w.t.Fatal(err)
	}
	if left != 0 {
		w.t.Fatalf("%d intents left in the journal", left)
	}
}

// Cashbacks across three holders: each is paid once; one past the
// merchant's balance is refused and called off, the pool's spend given
// back, and a retry of it stays refused while a retry of a paid one is a
// duplicate.
func TestCashbackAcrossShards(t *testing.T) {
	w := newWorld(t)
	w.grant(w.pool, 100)
	w.grant(w.merchant, 3)
	c := w.coordinator(nil)
	for i := range 3 {
		res, err := c.Cashback(context.Background(), w.cashback(fmt.Sprintf("buy-%d", i), 1))
		if err != nil || res.Duplicate || res.UserValue != int64(i+1) || res.Merchant != int64(2-i) {
			t.Fatalf("cashback %d: %+v %v", i, res, err)
		}
	}
	res, err := c.Cashback(context.Background(), w.cashback("buy-0", 1))
	if err != nil || !res.Duplicate {
		t.Fatalf("retry of a paid purchase: %+v %v", res, err)
	}
	res, err = c.Cashback(context.Background(), w.cashback("buy-3", 1))
	if !errors.Is(err, region.ErrBudgetExhausted) || res.Refused != w.merchant {
		t.Fatalf("past the merchant's balance: %+v %v", res, err)
	}
	w.conserved(100, 3)
	w.grant(w.merchant, 5)
	if _, err = c.Cashback(context.Background(), w.cashback("buy-3", 1)); !errors.Is(err, region.ErrFenced) {
		t.Fatalf("retry of a called-off purchase once the merchant can pay: %v", err)
	}
	w.conserved(100, 8)
	if res, err = c.Cashback(context.Background(), w.cashback("buy-4", 1)); err != nil || res.UserValue != 4 {
		t.Fatalf("a new purchase: %+v %v", res, err)
	}
	res, err = c.Cashback(context.Background(), w.cashback("buy-4", 2))
	if !errors.Is(err, region.ErrIdempotencyMismatch) {
		t.Fatalf("the key of a paid purchase with another amount: %+v %v", res, err)
	}
	w.conserved(100, 8)
	if _, err = c.Cashback(context.Background(), w.cashback("buy-5", 200)); !errors.Is(err, region.ErrBudgetExhausted) {
		t.Fatalf("past the pool: %v", err)
	}
	w.conserved(100, 8)
}

var errCrash = errors.New("crashed")

// A crash at every step, the process restarted on the same journal: the
// restarted replica's recovery finishes the purchase (or calls it off)
// exactly once, and the client's retry with the same key agrees with it.
func TestCrashAtEveryStep(t *testing.T) {
	for _, refused := range []bool{false, true} {
		steps := []purchase.Step{purchase.StepJournaled, purchase.StepPool, purchase.StepMerchant, purchase.StepUser, purchase.StepDone}
		if refused {
			steps = []purchase.Step{purchase.StepJournaled, purchase.StepPool, purchase.StepMerchant, purchase.StepFence, purchase.StepCallOff, purchase.StepDone}
		}
		for _, at := range steps {
			t.Run(fmt.Sprintf("refused=%v/%s", refused, at), func(t *testing.T) {
				w := newWorld(t)
				w.grant(w.pool, 100)
				merchant := int64(10)
				if refused {
					merchant = 3 // less than the purchase's 5
				}
				w.grant(w.merchant, merchant)
				reached := false
				crashing := w.coordinator(func(_ string, s purchase.Step) error {
					if s == at {
						reached = true
						return errCrash
					}
					return nil
				})
				if _, err := crashing.Cashback(context.Background(), w.cashback("buy", 5)); !errors.Is(err, errCrash) || !reached {
					t.Fatalf("the run did not stop at %s: %v", at, err)
				}
				// Restarted: recovery waits until no attempt of the last
				// life can apply, then finishes it.
				c := w.coordinator(nil)
				if n, err := c.Recover(context.Background()); n != 0 || err != nil {
					t.Fatalf("recovered %d before the last life's attempts expired: %v", n, err)
				}
				w.advance(timeout)
				if n, err := c.Recover(context.Background()); n != 1 || err != nil {
					t.Fatalf("recovered %d: %v", n, err)
				}
				w.conserved(100, merchant)
				want := int64(5)
				if refused {
					want = 0
				}
				if got := w.counter(w.user); got != want {
					t.Fatalf("user got %d, want %d", got, want)
				}
				res, err := c.Cashback(context.Background(), w.cashback("buy", 5))
				if refused && !errors.Is(err, region.ErrFenced) && !errors.Is(err, region.ErrBudgetExhausted) {
					t.Fatalf("retry of the refused purchase: %+v %v", res, err)
				}
				if !refused && (err != nil || !res.Duplicate) {
					t.Fatalf("retry of the paid purchase: %+v %v", res, err)
				}
				w.conserved(100, merchant)
			})
		}
	}
}

// Answers lost at random, before or after an operation applied, and
// crashes at random steps, over many purchases, some past the merchant's
// balance, retried by clients and finished by recovery: in the end every
// purchase is paid once or not at all, and no balance is overdrawn.
func TestLostAnswersAndCrashes(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			w := newWorld(t)
			rng := rand.New(rand.NewPCG(seed, 7))
			w.grant(w.pool, 1000)
			w.grant(w.merchant, 40)
			w.fault = func(op region.Op, applied bool) error {
				if rng.IntN(6) == 0 {
					if applied {
						return fmt.Errorf("%w: answer lost", context.DeadlineExceeded)
					}
					return errors.New("no holder up")
				}
				return nil
			}
			crash := func(string, purchase.Step) error {
				if rng.IntN(12) == 0 {
					return errCrash
				}
				return nil
			}
			c := w.coordinator(crash)
			for i := range 60 {
				for try := 0; try < 3; try++ {
					_, err := c.Cashback(context.Background(), w.cashback(fmt.Sprintf("buy-%d", i%50), 1))
					if err == nil || !errors.Is(err, purchase.ErrUnfinished) && !errors.Is(err, purchase.ErrInProgress) && !errors.Is(err, errCrash) {
						break
					}
					if errors.Is(err, errCrash) {
						c = w.coordinator(crash) // restarted
					}
					w.advance(timeout)
				}
			}
			w.fault = nil
			c = w.coordinator(nil)
			w.advance(timeout)
			if _, err := c.Recover(context.Background()); err != nil {
				t.Fatal(err)
			}
			w.conserved(1000, 40)
			if paid := w.counter(w.user); paid == 0 || paid > 40 {
				t.Fatalf("paid %d of at most 40", paid)
			}
		})
	}
}

// One purchase key run in two regions cut apart, refused by the merchant
// in one (called off) and paid in the other: once the regions hear of
// each other, the purchase is called off in both, the pool and the
// merchant paid nothing and the user credited nothing, whichever region
// ran first. (Before fences won over applications, the undo of the
// called-off run gave back a pool spend the paying run kept: the users
// were credited more than the pool paid.)
func TestCalledOffInOneRegionPaidInAnother(t *testing.T) {
	for _, usFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("us_first=%v", usFirst), func(t *testing.T) {
			type commit struct {
				from string
				c    region.Changes
			}
			var mu sync.Mutex
			var pending []commit
			hook := func(from string, c region.Changes) {
				mu.Lock()
				pending = append(pending, commit{from, c})
				mu.Unlock()
			}
			us, eu := newRegionWorld(t, "us", hook), newRegionWorld(t, "eu", hook)
			for _, w := range []*world{us, eu} {
				w.grant(w.pool, 100)
			}
			us.grant(us.merchant, 3) // less than the purchase's 5: refused in us
			eu.grant(eu.merchant, 10)
			run := func(w *world, want error) {
				t.Helper()
				c := w.coordinator(nil)
				res, err := c.Cashback(context.Background(), w.cashback("buy", 5))
				if want == nil && (err != nil || res.UserValue != 5) {
					t.Fatalf("%s: %+v %v", w.m.Region, res, err)
				}
				if want != nil && !errors.Is(err, want) {
					t.Fatalf("%s: %+v %v, want %v", w.m.Region, res, err, want)
				}
			}
			if usFirst {
				run(us, region.ErrBudgetExhausted)
				run(eu, nil)
			} else {
				run(eu, nil)
				run(us, region.ErrBudgetExhausted)
			}
			// The regions hear of each other: every commit of a replica
			// is merged at the holder of its key in the other region,
			// until the reconciliations it starts have all spread.
			for round := 0; ; round++ {
				mu.Lock()
				batch := pending
				pending = nil
				mu.Unlock()
				if len(batch) == 0 {
					break
				}
				if round > 20 {
					t.Fatal("merges did not settle")
				}
				for _, cm := range batch {
					to := us
					if strings.HasPrefix(cm.from, "us-") {
						to = eu
					}
					for _, v := range cm.c.Vectors {
						rep := to.reps[to.m.Holders(shard.Of(v.Item))[0]]
						if err := rep.Merge(context.Background(), []region.VectorMerge{{Kind: v.Kind, Item: v.Item, Vec: crdt.Vector{}.Set(cm.from, v.Own)}}, nil); err != nil {
							t.Fatal(err)
						}
					}
					for _, r := range cm.c.Records {
						rep := to.reps[to.m.Holders(shard.Of(r.Item))[0]]
						if err := rep.Merge(context.Background(), nil, []region.RecordMerge{{Item: r.Item, User: r.User, Rec: r.Rec}}); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			for _, w := range []*world{us, eu} {
				if pool, merchant, user := w.remaining(w.pool), w.remaining(w.merchant), w.counter(w.user); pool != 200 || merchant != 13 || user != 0 {
					t.Errorf("%s sees the pool at %d (want 200), the merchant at %d (want 13), the user at %d (want 0)",
						w.m.Region, pool, merchant, user)
				}
			}
		})
	}
}
