package region

import (
	"context"
	"testing"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// Budgets are not in the event log (nor are their refunds), so the audit
// leaves their vectors out; a cashback's balances are counters, logged and
// audited like any.
func TestAuditLeavesBudgetsOut(t *testing.T) {
	net := newBudgetNet(t, 2, func(c *Config) { c.EventLog = true })
	a, b := net.reps[0], net.reps[1]
	ctx := context.Background()
	for _, op := range []Op{
		{Kind: OpGrant, Item: "pool", By: 20},
		{Kind: OpSpend, Item: "pool", By: 2},
		{Kind: OpSpend, Item: "pool", By: 3, IdemKey: "s1"},
		{Kind: OpCashback, Item: "pool", By: 4, IdemKey: "p1", Merchant: "shop", User: "ann"},
	} {
		if _, err := a.Apply(ctx, op); err != nil {
			t.Fatalf("%+v: %v", op, err)
		}
	}
	net.settle()
	// B asks for rights, A gives (entries of A's in two inboxes), B spends.
	if _, err := b.Apply(ctx, Op{Kind: OpCashback, Item: "pool", By: 1, IdemKey: "p2", Merchant: "shop", User: "bob"}); err == nil {
		t.Fatal("B spent rights it had not been given")
	}
	net.settle()
	if _, err := b.Apply(ctx, Op{Kind: OpCashback, Item: "pool", By: 1, IdemKey: "p2", Merchant: "shop", User: "bob"}); err != nil {
		t.Fatal(err)
	}
	net.settle()
	for _, r := range net.reps {
		rep, err := r.Audit(0, "")
		if err != nil || !rep.OK() || rep.Vectors != 2 { // shop, and ann or bob
			t.Fatalf("%s: %+v, %v", r.ID(), rep, err)
		}
	}
}

// A replica recovering its own entries of a budget (after it lost its
// disk) writes nothing unreadable to its event log: the inbox vectors'
// names ("<key>~<replica>") are not ids, which the log's encoding
// requires, and budgets are not logged anyway.
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
	if rd, err := a.Budget("pool"); err != nil || rd.Remaining != 12 || rd.LocalRights != 3 {
		t.Fatalf("recovered budget %+v, %v; want 12 left, 3 of them A's", rd, err)
	}
	if _, err := a.Apply(ctx, Op{Kind: OpSpend, Item: "pool", By: 3}); err != nil {
		t.Fatal(err)
	}
	rep, err := a.Audit(0, "")
	if err != nil || !rep.OK() || rep.Vectors != 1 {
		t.Fatalf("audit after recovery: %+v, %v", rep, err)
	}
	// And the store opens again: its last log chunk is read at open.
	closeA()
	if _, err := storage.Open(storage.Config{Dir: dir}); err != nil {
		t.Fatalf("reopen after recovery: %v", err)
	}
}
