package region

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/storage"
)

// budgetNet is a few replicas on real stores whose commits are delivered
// by hand, in any order the test picks, with the asks for rights answered
// as replication answers them. Its stores skip the WAL fsync
// (DurabilityNone): no replica of the net crashes, and the simulations
// commit one op at a time, where an fsync each was most of their time.
type budgetNet struct {
	t     *testing.T
	reps  []*Replica
	boxes []*mailbox
	// queues[i][j]: changes from i not yet delivered to j.
	queues [][][]Changes
	// gone: replicas retired from the network; nothing is posted to or
	// from them any more.
	gone map[int]bool
}

func newBudgetNet(t *testing.T, n int, mut func(*Config)) *budgetNet {
	net := &budgetNet{t: t, queues: make([][][]Changes, n), gone: make(map[int]bool)}
	clock := &stepClock{}
	for i := range n {
		box := &mailbox{}
		r, _ := openReplicaStore(t, storage.Config{Dir: t.TempDir(), Durability: storage.DurabilityNone}, fmt.Sprintf("r%d", i), func(c *Config) {
			c.OnCommit, c.Now = box.onCommit, clock.now
			if mut != nil {
				mut(c)
			}
		})
		net.reps, net.boxes = append(net.reps, r), append(net.boxes, box)
		net.queues[i] = make([][]Changes, n)
	}
	return net
}

// post moves every replica's new commits into its queues to the others.
func (n *budgetNet) post() {
	for i, box := range n.boxes {
		if n.gone[i] {
			continue
		}
		for _, c := range box.take() {
			for j := range n.reps {
				if j != i && !n.gone[j] {
					n.queues[i][j] = append(n.queues[i][j], c)
				}
			}
		}
	}
}

// deliver hands the first k queued commits from i to j, as deltas: own
// vector entries, changed records, then the asks.
func (n *budgetNet) deliver(i, j, k int) {
	n.t.Helper()
	q := n.queues[i][j]
	k = min(k, len(q))
	from, to := n.reps[i], n.reps[j]
	for _, c := range q[:k] {
		var vecs []VectorMerge
		for _, v := range c.Vectors {
			vecs = append(vecs, VectorMerge{Kind: v.Kind, Item: v.Item, Vec: crdt.Vector{}.Set(from.ID(), v.Own)})
		}
		var recs []RecordMerge
		for _, r := range c.Records {
			recs = append(recs, RecordMerge{Item: r.Item, User: r.User, Rec: cloneRecord(r.Rec)})
		}
		if err := to.Merge(context.Background(), vecs, recs); err != nil {
			n.t.Fatal(err)
		}
		var gives []RightsGive
		for _, a := range c.Asks {
			gives = append(gives, RightsGive{Key: a.Key, To: from.ID(), Want: a.Want})
		}
		if err := to.Budgets().GiveRights(context.Background(), gives); err != nil {
			n.t.Fatal(err)
		}
	}
	n.queues[i][j] = q[k:]
}

// settle delivers everything until nothing is left to deliver.
func (n *budgetNet) settle() {
	for range 50 {
		n.post()
		left := false
		for i := range n.reps {
			for j := range n.reps {
				if len(n.queues[i][j]) > 0 {
					left = true
					n.deliver(i, j, len(n.queues[i][j]))
				}
			}
		}
		if !left {
			return
		}
	}
	n.t.Fatal("replicas did not settle")
}

func (n *budgetNet) budget(i int, key string) BudgetRead {
	n.t.Helper()
	rd, err := n.reps[i].Budgets().Get(key)
	if err != nil {
		n.t.Fatal(err)
	}
	return rd
}

// Rights start where the grant is; a region without them is refused with
// ErrRightsElsewhere and asks; the holder gives; the retry is covered.
func TestBudgetRightsMoveToDemand(t *testing.T) {
	ctx := context.Background()
	net := newBudgetNet(t, 2, nil)
	a, b := net.reps[0], net.reps[1]
	if res, err := a.Apply(ctx, Op{Kind: OpGrant, Item: "gift", By: 100}); err != nil || res.Value != 100 || res.Rights != 100 {
		t.Fatalf("grant: %+v %v", res, err)
	}
	net.settle()
	res, err := b.Apply(ctx, Op{Kind: OpSpend, Item: "gift", By: 10})
	if !errors.Is(err, ErrRightsElsewhere) || res.Value != 100 || res.Rights != 0 {
		t.Fatalf("spend without rights: %+v %v, want ErrRightsElsewhere with 100 left", res, err)
	}
	net.settle() // B's ask reaches A, A gives, the transfer reaches B
	if rd := net.budget(1, "gift"); rd.LocalRights != 50 || rd.Rights["r0"] != 50 || rd.Remaining != 100 {
		t.Fatalf("after the ask B sees %+v, want 50 rights each", rd)
	}
	if res, err := b.Apply(ctx, Op{Kind: OpSpend, Item: "gift", By: 10}); err != nil || res.Value != 90 || res.Rights != 40 {
		t.Fatalf("retry: %+v %v", res, err)
	}
	if _, err := b.Apply(ctx, Op{Kind: OpSpend, Item: "gift", By: 95}); !errors.Is(err, ErrBudgetExhausted) {
		t.Fatalf("spend of 95 with 90 left: %v, want ErrBudgetExhausted", err)
	}
	net.settle()
	for i := range 2 {
		if rd := net.budget(i, "gift"); rd.Remaining != 90 || rd.Granted != 100 || rd.Spent != 10 {
			t.Fatalf("replica %d: %+v", i, rd)
		}
	}
}

func TestBudgetOpsValidate(t *testing.T) {
	ctx := context.Background()
	r, _ := openReplica(t, t.TempDir(), "A", nil)
	for _, op := range []Op{
		{Kind: OpGrant, Item: "g", By: 0},
		{Kind: OpGrant, Item: "g", By: -5},
		{Kind: OpGrant, Item: "g", By: 5, IdemKey: "bad key"},
		{Kind: OpSpend, Item: "g", By: MaxBy + 1},
		{Kind: OpSpend, Item: "g~x", By: 1},
		{Kind: OpSpend, Item: "g", By: 1, IdemKey: "bad key"},
		{Kind: OpCashback, Item: "g", By: 1, Merchant: "m", User: "u"},
		{Kind: OpCashback, Item: "g", By: 1, Merchant: "m", User: "m", IdemKey: "k"},
		{Kind: OpCashback, Item: "g", By: 1, Merchant: "", User: "u", IdemKey: "k"},
	} {
		if _, err := r.Apply(ctx, op); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", op, err)
		}
	}
}

// A keyed spend counts once at one replica, answers duplicates with the
// current state, and refuses the key with another amount.
func TestBudgetKeyedSpend(t *testing.T) {
	ctx := context.Background()
	r, _ := openReplica(t, t.TempDir(), "A", nil)
	if _, err := r.Apply(ctx, Op{Kind: OpGrant, Item: "g", By: 10}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		res, err := r.Apply(ctx, Op{Kind: OpSpend, Item: "g", By: 4, IdemKey: "order-1"})
		if err != nil || res.Value != 6 || res.Duplicate != (i > 0) {
			t.Fatalf("attempt %d: %+v %v", i, res, err)
		}
	}
	if _, err := r.Apply(ctx, Op{Kind: OpSpend, Item: "g", By: 5, IdemKey: "order-1"}); !errors.Is(err, ErrIdempotencyMismatch) {
		t.Fatalf("reuse with another amount: %v", err)
	}
	// The budget's keys and a counter's of the same names are apart.
	if res, err := r.Apply(ctx, Op{Kind: OpIncr, Item: "g", By: 4, IdemKey: "order-1"}); err != nil || res.Duplicate || res.Value != 4 {
		t.Fatalf("counter g with the same key: %+v %v", res, err)
	}
}

// A keyed grant counts once: a retry at the same replica, or at another
// once the grant has reached it, is a duplicate that grants nothing, and
// the key with another amount is refused. Replicas that applied the key
// before hearing of each other both grant at first; once they have, the
// loser takes its grant back, so the budget is granted once everywhere,
// and the loser's rights pay for it. A loser that spent some of the
// duplicate before it heard takes back only what it still holds: a
// reconciliation never spends rights, so the budget is never overspent.
func TestBudgetKeyedGrant(t *testing.T) {
	ctx := context.Background()
	grant := func(r *Replica, key string, by int64) Result {
		t.Helper()
		res, err := r.Apply(ctx, Op{Kind: OpGrant, Item: key, By: by, IdemKey: "campaign-7"})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	net := newBudgetNet(t, 3, nil)
	a, b := net.reps[0], net.reps[1]
	for i := range 3 {
		if res := grant(a, "g", 100); res.Value != 100 || res.Duplicate != (i > 0) {
			t.Fatalf("attempt %d at r0: %+v", i, res)
		}
	}
	if _, err := a.Apply(ctx, Op{Kind: OpGrant, Item: "g", By: 99, IdemKey: "campaign-7"}); !errors.Is(err, ErrIdempotencyMismatch) {
		t.Fatalf("the key with another amount: %v", err)
	}
	net.settle()
	if res := grant(b, "g", 100); !res.Duplicate || res.Value != 100 {
		t.Fatalf("a retry at r1 after the grant reached it: %+v", res)
	}
	net.settle()
	for i := range net.reps {
		if rd := net.budget(i, "g"); rd.Remaining != 100 || rd.Granted != 100 {
			t.Fatalf("replica %d: %+v, want 100 granted once", i, rd)
		}
	}

	// Concurrent: r0 and r1 apply the key before hearing of each other.
	grant(a, "h", 50)
	grant(b, "h", 50)
	if rd := net.budget(1, "h"); rd.Remaining != 50 {
		t.Fatalf("r1 before hearing of r0: %+v", rd)
	}
	net.settle()
	for i := range net.reps {
		if rd := net.budget(i, "h"); rd.Remaining != 50 || rd.Unreconciled != 0 {
			t.Fatalf("replica %d after the concurrent grants settle: %+v, want 50 remaining, nothing unreconciled", i, rd)
		}
	}

	// Concurrent, and both spend 40 of their grant before hearing: the
	// loser can take back only the 10 it still holds.
	grant(a, "k", 50)
	grant(b, "k", 50)
	for _, r := range []*Replica{a, b} {
		if _, err := r.Apply(ctx, Op{Kind: OpSpend, Item: "k", By: 40}); err != nil {
			t.Fatal(err)
		}
	}
	net.settle()
	for i := range net.reps {
		// A taken-back grant counts in Spent, as a refunded spend counts
		// in Granted: both are sums of the entries.
		rd := net.budget(i, "k")
		if rd.Remaining != 10 || rd.LocalRights < 0 || rd.Spent != 90 {
			t.Fatalf("replica %d: %+v, want 10 remaining (80 spent, the loser's last 10 taken back)", i, rd)
		}
	}
}

// Cashback is all or nothing: a refused one changes no balance, a done one
// spends the amount from the pool and from the merchant's budget and adds
// it to the user, a retry is a duplicate. The merchant's balance is never
// overdrawn: a cashback past it is refused with the budget's code, naming
// the merchant.
func TestCashbackAtomic(t *testing.T) {
	ctx := context.Background()
	r, _ := openReplica(t, t.TempDir(), "A", nil)
	cb := func(key string, amount int64) (Result, error) {
		return r.Apply(ctx, Op{Kind: OpCashback, Item: "pool", Merchant: "shop", User: "ann", By: amount, IdemKey: key})
	}
	if _, err := cb("p1", 5); !errors.Is(err, ErrBudgetExhausted) {
		t.Fatalf("cashback from an empty pool: %v", err)
	}
	if _, err := r.Apply(ctx, Op{Kind: OpGrant, Item: "pool", By: 8}); err != nil {
		t.Fatal(err)
	}
	// The merchant's balance holds 1: a cashback of 5 would take it to −4.
	if _, err := r.Apply(ctx, Op{Kind: OpGrant, Item: "shop", By: 1}); err != nil {
		t.Fatal(err)
	}
	if res, err := cb("p1", 5); !errors.Is(err, ErrBudgetExhausted) || res.Refused != "shop" || res.Value != 1 || res.Merchant != 1 {
		t.Fatalf("cashback past the merchant's balance: %+v %v", res, err)
	}
	if _, err := r.Apply(ctx, Op{Kind: OpGrant, Item: "shop", By: 5}); err != nil {
		t.Fatal(err)
	}
	res, err := cb("p1", 5)
	if err != nil || res.Value != 3 || res.Merchant != 1 || res.UserValue != 5 {
		t.Fatalf("cashback: %+v %v", res, err)
	}
	if res, err := cb("p1", 5); err != nil || !res.Duplicate || res.UserValue != 5 {
		t.Fatalf("retry: %+v %v", res, err)
	}
	if res, err := cb("p2", 5); !errors.Is(err, ErrBudgetExhausted) || res.Refused != "" {
		t.Fatalf("cashback past the pool: %+v %v", res, err)
	}
	if res, err := cb("p2", 2); !errors.Is(err, ErrBudgetExhausted) || res.Refused != "shop" {
		t.Fatalf("cashback past the merchant: %+v %v", res, err)
	}
	if rd, err := r.Counters().Get("ann"); err != nil || rd.Value != 5 {
		t.Fatalf("counter ann = %d (%v), want 5", rd.Value, err)
	}
	if rd, err := r.Budgets().Get("shop"); err != nil || rd.Remaining != 1 || rd.Granted != 6 || rd.Spent != 5 {
		t.Fatalf("merchant %+v (%v), want 1 left of 6", rd, err)
	}
	// A key used on a balance alone is not a purchase.
	if _, err := r.Apply(ctx, Op{Kind: OpIncr, Item: "ann", By: 1, IdemKey: "p3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cb("p3", 1); !errors.Is(err, ErrIdempotencyMismatch) {
		t.Fatalf("cashback on a key used by an increment: %v", err)
	}
	if rd, _ := r.Budgets().Get("pool"); rd.Remaining != 3 {
		t.Fatalf("pool %+v after refusals", rd)
	}
	if _, err := r.Apply(ctx, Op{Kind: OpCashback, Item: "pool", Merchant: "pool", User: "ann", By: 1, IdemKey: "p4"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("cashback whose merchant is its pool: %v", err)
	}
}

// Property: under random grants, spends (keyed ones retried at several
// replicas), cashbacks and deliveries in random order and timing, with
// rights asked for and given as replication does, no replica ever sees a
// negative remaining or holds negative rights, and once everything is
// delivered all agree that exactly the acknowledged spends were spent
// (each key once) and the balances add up: the merchant's budget, spent by
// cashbacks only, never below zero, and its remaining plus the user's
// credits what was granted to it. In the handoff runs, replica
// r0 hands its rights off at a random step and is retired at the end:
// it must hold nothing, and the others must spend exactly what is left.
func TestBudgetInvariantUnderRandomDelivery(t *testing.T) {
	seeds := 12
	if testing.Short() {
		seeds = 3
	}
	for _, handoff := range []bool{false, true} {
		for seed := range uint64(seeds) {
			t.Run(fmt.Sprintf("handoff=%v/%d", handoff, seed), func(t *testing.T) {
				at := -1
				if handoff {
					at = int(seed * 17 % 200)
				}
				if v := budgetRun(t, seed, 250, nil, at); v != "" {
					t.Fatal(v)
				}
			})
		}
	}
}

// budgetRun runs one random schedule and returns the first violation of
// the invariants ("" if none). mut adjusts every replica's Config. With
// handoffAt ≥ 0, replica r0 hands its rights off to r1 at that step (by
// handOff) and is retired after the schedule: then the others must be
// able to spend everything that is left.
func budgetRun(t *testing.T, seed uint64, steps int, mut func(*Config), handoffAt int, handOff ...func(*Replica)) string {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 7))
	net := newBudgetNet(t, 3, mut)
	var granted, spent, cashed int64
	keyed := make(map[string]int64) // acknowledged keyed spends and cashbacks: key -> amount
	amountOf := func(k int) int64 { return 1 + int64(k%3) }
	var merchantGranted int64 // to the merchant's budget "m"
	check := func(step int) string {
		for i := range net.reps {
			for _, k := range []string{"b", "m"} {
				rd := net.budget(i, k)
				if rd.Remaining < 0 || rd.LocalRights < 0 {
					return fmt.Sprintf("step %d: replica %d sees %s remaining %d, holds %d", step, i, k, rd.Remaining, rd.LocalRights)
				}
			}
		}
		return ""
	}
	for step := range steps {
		if step == handoffAt {
			if len(handOff) > 0 {
				handOff[0](net.reps[0])
			} else if _, err := net.reps[0].Budgets().HandOffRights(ctx, "r1"); err != nil {
				t.Fatal(err)
			}
		}
		i := rng.IntN(len(net.reps))
		r := net.reps[i]
		switch op := rng.IntN(12); {
		case op == 0:
			n := int64(1 + rng.IntN(10))
			item := "b"
			if rng.IntN(3) == 0 {
				item = "m" // the merchant's balance
			}
			if _, err := r.Apply(ctx, Op{Kind: OpGrant, Item: item, By: n}); err != nil {
				t.Fatal(err)
			}
			if item == "m" {
				merchantGranted += n
			} else {
				granted += n
			}
		case op <= 3:
			n := int64(1 + rng.IntN(3))
			_, err := r.Apply(ctx, Op{Kind: OpSpend, Item: "b", By: n})
			if err == nil {
				spent += n
			} else if !errors.Is(err, ErrBudgetExhausted) && !errors.Is(err, ErrRightsElsewhere) {
				t.Fatal(err)
			}
		case op <= 5:
			k := rng.IntN(20)
			key, n := fmt.Sprintf("k%d", k), amountOf(k)
			var err error
			if op == 4 {
				_, err = r.Apply(ctx, Op{Kind: OpSpend, Item: "b", By: n, IdemKey: key})
			} else {
				key = "c" + key
				_, err = r.Apply(ctx, Op{Kind: OpCashback, Item: "b", By: n, IdemKey: key, Merchant: "m", User: "u"})
			}
			if err == nil {
				keyed[key] = n
			} else if !errors.Is(err, ErrBudgetExhausted) && !errors.Is(err, ErrRightsElsewhere) {
				t.Fatal(err)
			}
		default:
			net.post()
			j := rng.IntN(len(net.reps))
			if j != i {
				net.deliver(i, j, rng.IntN(4))
			}
		}
		if v := check(step); v != "" {
			return v
		}
	}
	net.settle()
	for key, n := range keyed {
		spent += n
		if key[0] == 'c' {
			cashed += n
		}
	}
	if spent > granted {
		return fmt.Sprintf("acknowledged %d spent of %d granted", spent, granted)
	}
	for i := range net.reps {
		rd := net.budget(i, "b")
		if rd.Remaining != granted-spent || rd.Unreconciled != 0 {
			return fmt.Sprintf("replica %d: %+v, want remaining %d = %d granted − %d spent", i, rd, granted-spent, granted, spent)
		}
		var held int64
		for _, n := range rd.Rights {
			if n < 0 {
				return fmt.Sprintf("replica %d: rights %v", i, rd.Rights)
			}
			held += n
		}
		if held != rd.Remaining {
			return fmt.Sprintf("replica %d: rights %v add up to %d, remaining %d", i, rd.Rights, held, rd.Remaining)
		}
		m := net.budget(i, "m")
		u, _ := net.reps[i].Counters().Get("u")
		if m.Remaining+u.Value != merchantGranted || u.Value != cashed || m.Unreconciled != 0 {
			return fmt.Sprintf("replica %d: merchant %+v + user %d, want user %d and a sum of %d granted to the merchant",
				i, m, u.Value, cashed, merchantGranted)
		}
	}
	if handoffAt >= 0 {
		return drainWithout(t, net, 0, granted-spent)
	}
	return ""
}

// drainWithout retires replica gone and spends, at the others, until the
// budget "b" is exhausted everywhere: every one of the left units must be
// spendable, none stranded with the retired replica.
func drainWithout(t *testing.T, net *budgetNet, gone int, left int64) string {
	ctx := context.Background()
	if rd := net.budget(gone, "b"); rd.LocalRights != 0 {
		return fmt.Sprintf("replica %d is retired holding %d rights (%+v)", gone, rd.LocalRights, rd)
	}
	net.gone[gone] = true
	for j := range net.reps {
		net.queues[gone][j], net.queues[j][gone] = nil, nil
	}
	var drained int64
	for range 100 {
		for i, r := range net.reps {
			if i == gone {
				continue
			}
			for {
				_, err := r.Apply(ctx, Op{Kind: OpSpend, Item: "b", By: 1})
				if err != nil {
					if !errors.Is(err, ErrBudgetExhausted) && !errors.Is(err, ErrRightsElsewhere) {
						t.Fatal(err)
					}
					break
				}
				drained++
			}
		}
		net.settle()
		if drained >= left {
			break
		}
	}
	if drained != left {
		return fmt.Sprintf("with replica %d retired, the others spent %d of the %d left", gone, drained, left)
	}
	return ""
}

// The inbox vectors of a budget are read back with one scan and never
// mixed up with another budget's.
func TestBudgetInboxesScan(t *testing.T) {
	r, _ := openReplica(t, t.TempDir(), "A", nil)
	_ = r
	st := r.store
	b := st.NewBatch()
	b.PutVectorEntry(storage.Budgets, crdt.BudgetInboxName("g", "B"), "A", crdt.PN{}, crdt.PN{P: 3})
	b.PutVectorEntry(storage.Budgets, crdt.BudgetInboxName("g", "A"), "A", crdt.PN{}, crdt.PN{N: 3})
	b.PutVectorEntry(storage.Budgets, crdt.BudgetInboxName("g2", "B"), "A", crdt.PN{}, crdt.PN{P: 9})
	b.PutVectorEntry(storage.Budgets, "g", "A", crdt.PN{}, crdt.PN{P: 10})
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	in, err := st.BudgetInboxes("g")
	if err != nil {
		t.Fatal(err)
	}
	if len(in) != 2 || in["B"].Get("A").P != 3 || in["A"].Get("A").N != 3 {
		t.Fatalf("inboxes %v", in)
	}
}

// A read of a budget sees one committed state: never a commit's inboxes
// with the main vector from before it. A grant during a handoff raises
// the main vector's P and, in the same commit, this replica's sent (the
// grant moved on), so a read that mixes the two shows its own rights at
// minus the grant: "spent or gave rights it did not hold" (a chaos run
// sampled us-1 at -5 during a handoff). Here the writer is held just
// after such a commit is durable, before it has put the new main vector
// in the vector cache (which the read took the main vector from, and the
// inboxes from the store): the test holds a read lock on the cache shard
// of a counter the same batch touched first, which lets the writer load
// the counter but not publish it (vectors are published in first-touch
// order), and reads the budget in that window.
func TestBudgetReadIsOneCommittedState(t *testing.T) {
	ctx := context.Background()
	net := newBudgetNet(t, 2, nil)
	r := net.reps[0]
	if _, err := r.Apply(ctx, Op{Kind: OpGrant, Item: "bud", By: 10}); err != nil {
		t.Fatal(err)
	}
	if h, err := r.Budgets().HandOffRights(ctx, "r1"); err != nil || h.Moved != 10 {
		t.Fatalf("handoff: %+v %v, want 10 moved", h, err)
	}
	main := vkey{storage.Budgets, "bud"}
	if _, ok := r.cache.get(main); !ok {
		t.Fatal("the budget's main vector is not cached: the test would not reach the window it is about")
	}
	// A counter whose cache shard is not the budget's.
	var counter vkey
	for i := 0; counter.item == ""; i++ {
		if k := (vkey{storage.Counters, fmt.Sprintf("c%d", i)}); r.cache.shard(k) != r.cache.shard(main) {
			counter = k
		}
	}
	sh := r.cache.shard(counter)
	sh.mu.RLock()
	held := true
	defer func() {
		if held {
			sh.mu.RUnlock()
		}
	}()
	done := make(chan error, 1)
	go func() {
		res, err := r.Do(ctx, []Op{{Kind: OpIncr, Item: counter.item, By: 1}, {Kind: OpGrant, Item: "bud", By: 5}})
		if err == nil && res[1].Err != nil {
			err = res[1].Err
		}
		done <- err
	}()
	// The grant and its move to r1 are durable once the store shows them;
	// the writer then waits for the shard to publish the batch.
	testkit.WaitFor(t, 10*time.Second, func() error {
		v, err := r.store.Vector(storage.Budgets, "bud")
		if err != nil || v.Get("r0").P != 15 {
			return fmt.Errorf("the grant is not in the store: %v %v", v, err)
		}
		return nil
	})
	rd, err := r.Budgets().Get("bud")
	if err != nil {
		t.Fatal(err)
	}
	sh.mu.RUnlock()
	held = false
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if rd.LocalRights != 0 || rd.Rights["r1"] != 15 || rd.Granted != 15 || rd.Remaining != 15 {
		t.Fatalf("read between the commit and its publication: %+v, want 0 rights here and all 15 with r1", rd)
	}
	if rd := net.budget(0, "bud"); rd.LocalRights != 0 || rd.Rights["r1"] != 15 {
		t.Fatalf("read after the commit: %+v", rd)
	}
}
