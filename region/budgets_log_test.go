package region

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// Budgets are in the event log like everything else: grants, spends
// (keyed or not, and a cashback's), transfers, and the audit recomputes
// every own entry of a budget (main vector and inboxes) from them. One
// entry changed behind the log's back shows as a difference.
func TestAuditCoversBudgets(t *testing.T) {
	net := newBudgetNet(t, 2, func(c *Config) { c.EventLog = true })
	a, b := net.reps[0], net.reps[1]
	ctx := context.Background()
	for _, op := range []Op{
		{Kind: OpGrant, Item: "pool", By: 20},
		{Kind: OpGrant, Item: "shop", By: 10},
		{Kind: OpSpend, Item: "pool", By: 2},
		{Kind: OpSpend, Item: "pool", By: 3, IdemKey: "s1"},
		{Kind: OpCashback, Item: "pool", By: 4, IdemKey: "p1", Merchant: "shop", User: "ann"},
	} {
		if _, err := a.Apply(ctx, op); err != nil {
			t.Fatalf("%+v: %v", op, err)
		}
	}
	net.settle()
	// B asks for rights to the pool and the merchant's balance, A gives
	// (entries of A's in two inboxes of each), B spends.
	if _, err := b.Apply(ctx, Op{Kind: OpCashback, Item: "pool", By: 1, IdemKey: "p2", Merchant: "shop", User: "bob"}); err == nil {
		t.Fatal("B spent rights it had not been given")
	}
	net.settle()
	if _, err := b.Apply(ctx, Op{Kind: OpCashback, Item: "pool", By: 1, IdemKey: "p2", Merchant: "shop", User: "bob"}); err != nil {
		t.Fatal(err)
	}
	net.settle()
	// A: pool, pool~r0 (sent), pool~r1 (given), the same three of shop,
	// ann. B: pool and shop (spent), bob.
	for i, want := range []int{7, 3} {
		rep, err := net.reps[i].Admin().Audit(0, "")
		if err != nil || !rep.OK() || rep.Vectors != want {
			t.Fatalf("%s: %+v, %v; want %d vectors audited", net.reps[i].ID(), rep, err, want)
		}
	}
	var got []string
	if err := a.store.ScanLog(0, 100, func(e storage.Event) bool {
		if e.Kind == storage.Budgets {
			got = append(got, fmt.Sprintf("%s %s %s %s %d", e.Type, e.Key, e.User, e.Idem, e.By))
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	// A keeps the 9 (of shop: 4) it spent lately and gives half of the 2
	// it can spare.
	if want := []string{"grant pool   20", "grant shop   10", "spend pool   2", "spend pool  s1 3", "spend pool  p1 4", "spend shop  p1 4",
		"transfer pool r1  1", "transfer shop r1  1"}; !slices.Equal(got, want) {
		t.Fatalf("A's budget events:\n%q\nwant\n%q", got, want)
	}
	// One budget's audit covers its inboxes; an entry changed behind the
	// log's back is a difference.
	if rep, err := a.Admin().Audit(storage.Budgets, "pool"); err != nil || !rep.OK() || rep.Vectors != 3 {
		t.Fatalf("audit of pool: %+v, %v", rep, err)
	}
	batch := a.store.NewBatch()
	batch.PutVectorEntry(storage.Budgets, crdt.BudgetInboxName("pool", "r1"), "r0", crdt.PN{P: 1}, crdt.PN{P: 2})
	if err := batch.Commit(); err != nil {
		t.Fatal(err)
	}
	rep, err := a.Admin().Audit(storage.Budgets, "pool")
	if err != nil || rep.OK() || len(rep.Diffs) != 1 || rep.Diffs[0].Key != "pool~r1" || rep.Diffs[0].Logged.P != 1 || rep.Diffs[0].Stored.P != 2 {
		t.Fatalf("audit of a tampered inbox: %+v, %v", rep, err)
	}
}

// A replica recovering its own entries of a budget (after it lost its
// disk) logs the recovery readably (an inbox's name, "<key>~<replica>",
// is no id, which the log's encoding requires: it is logged as key and
// receiver), and its audit accounts for every entry.
func TestBudgetRecoveryKeepsTheLogReadable(t *testing.T) {
	dir := t.TempDir()
	a, closeA := openReplica(t, dir, "A", func(c *Config) { c.HoldWrites, c.EventLog = true, true })
	ctx := context.Background()
	peerView := []VectorMerge{
		{Kind: storage.Budgets, Item: "pool", Vec: crdt.Vector{}.Set("A", crdt.PN{P: 10, N: 3}).Set("B", crdt.PN{P: 5})},
		{Kind: storage.Budgets, Item: crdt.BudgetInboxName("pool", "A"), Vec: crdt.Vector{}.Set("A", crdt.PN{N: 4})},
		{Kind: storage.Budgets, Item: crdt.BudgetInboxName("pool", "B"), Vec: crdt.Vector{}.Set("A", crdt.PN{P: 4})},
		{Kind: storage.Counters, Item: "c", Vec: crdt.Vector{}.Set("A", crdt.PN{P: 7})},
	}
	if err := a.Merge(ctx, peerView, nil); err != nil {
		t.Fatal(err)
	}
	a.AcceptWrites()
	if rd, err := a.Budgets().Get("pool"); err != nil || rd.Remaining != 12 || rd.LocalRights != 3 {
		t.Fatalf("recovered budget %+v, %v; want 12 left, 3 of them A's", rd, err)
	}
	if _, err := a.Apply(ctx, Op{Kind: OpSpend, Item: "pool", By: 3}); err != nil {
		t.Fatal(err)
	}
	rep, err := a.Admin().Audit(0, "")
	if err != nil || !rep.OK() || rep.Vectors != 4 { // pool, pool~A, pool~B, c
		t.Fatalf("audit after recovery: %+v, %v", rep, err)
	}
	// And the store opens again: its last log chunk is read at open.
	closeA()
	if _, err := storage.Open(storage.Config{Dir: dir}); err != nil {
		t.Fatalf("reopen after recovery: %v", err)
	}
}

// Unkeyed spends of one budget in one commit fold into one event (their
// sum and count); keyed ones keep an event each. The audit still adds up.
func TestBudgetSpendsFoldPerCommit(t *testing.T) {
	r, _ := openReplica(t, t.TempDir(), "A", func(c *Config) { c.EventLog = true })
	ctx := context.Background()
	if _, err := r.Apply(ctx, Op{Kind: OpGrant, Item: "pool", By: 50}); err != nil {
		t.Fatal(err)
	}
	res, err := r.Do(ctx, []Op{
		{Kind: OpSpend, Item: "pool", By: 1}, {Kind: OpSpend, Item: "pool", By: 2},
		{Kind: OpSpend, Item: "pool", By: 4, IdemKey: "k"}, {Kind: OpSpend, Item: "pool", By: 3},
		{Kind: OpSpend, Item: "pool", By: 100}, // refused: not logged
	})
	if err != nil || res[4].Err == nil {
		t.Fatalf("spends: %+v %v", res, err)
	}
	var got []string
	if err := r.store.ScanLog(0, 100, func(e storage.Event) bool {
		got = append(got, fmt.Sprintf("%s %s %d×%d n%d", e.Type, e.Idem, e.Count, e.By, e.N))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"grant  1×50 n0", "spend  3×6 n6", "spend k 1×4 n4"}; !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	if rep, err := r.Admin().Audit(0, ""); err != nil || !rep.OK() {
		t.Fatalf("audit: %+v %v", rep, err)
	}
}
