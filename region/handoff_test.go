package region

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// A handoff moves every right the replica holds, and goes on moving the
// rights that reach it later: a grant there, a transfer answering an ask
// it sent before. It asks nobody for rights meanwhile. Once it is
// retired, the others spend every unit that was left.
func TestHandoffMovesRightsAndKeepsForwarding(t *testing.T) {
	ctx := context.Background()
	net := newBudgetNet(t, 3, nil)
	r0, r1 := net.reps[0], net.reps[1]
	apply := func(r *Replica, op Op) Result {
		t.Helper()
		res, err := r.Apply(ctx, op)
		if err != nil {
			t.Fatalf("%s %+v: %v", r.ID(), op, err)
		}
		return res
	}
	apply(r0, Op{Kind: OpGrant, Item: "a", By: 100})
	apply(r0, Op{Kind: OpGrant, Item: "b", By: 30})
	apply(r1, Op{Kind: OpGrant, Item: "c", By: 10})
	net.settle()

	// r0 asks r1 for rights to c; r1's answer is in flight when the
	// handoff starts.
	if _, err := r0.Apply(ctx, Op{Kind: OpSpend, Item: "c", By: 2}); !errors.Is(err, ErrRightsElsewhere) {
		t.Fatalf("spend at r0 without rights: %v", err)
	}
	net.post()
	net.deliver(0, 1, len(net.queues[0][1])) // the ask reaches r1, which gives
	if rd := net.budget(1, "c"); rd.Rights["r0"] != 5 {
		t.Fatalf("r1 gave %+v, want 5 to r0", rd.Rights)
	}

	if _, err := r0.Budgets().HandOffRights(ctx, "r0"); err == nil {
		t.Fatal("a handoff to itself was taken")
	}
	h, err := r0.Budgets().HandOffRights(ctx, "r2")
	if err != nil || h.To != "r2" || h.Budgets != 2 || h.Moved != 130 || h.Held != 0 {
		t.Fatalf("handoff: %+v %v, want 130 rights of 2 budgets moved", h, err)
	}
	net.post()
	net.deliver(1, 0, len(net.queues[1][0])) // r1's transfer reaches r0 ...
	if rd := net.budget(0, "c"); rd.LocalRights != 0 || rd.Rights["r2"] != 5 {
		t.Fatalf("r0 after the transfer arrived: %+v, want its 5 moved on to r2", rd)
	}
	if res := apply(r0, Op{Kind: OpGrant, Item: "a", By: 7}); res.Value != 107 || res.Rights != 0 {
		t.Fatalf("grant at r0 during the handoff: %+v", res)
	}
	if rd := net.budget(0, "a"); rd.LocalRights != 0 || rd.Rights["r2"] != 107 {
		t.Fatalf("r0 after a grant: %+v, want the 7 moved on to r2", rd)
	}
	noAsks := func() {
		t.Helper()
		net.post()
		for _, c := range net.queues[0][1] {
			if len(c.Asks) > 0 {
				t.Fatalf("r0 asked for rights during its handoff: %+v", c.Asks)
			}
		}
	}
	noAsks()
	if _, err := r0.Apply(ctx, Op{Kind: OpSpend, Item: "a", By: 1}); !errors.Is(err, ErrRightsElsewhere) {
		t.Fatalf("spend at r0 during the handoff: %v", err)
	}
	noAsks()
	if st, err := r0.Budgets().HandoffStatus(); err != nil || st.To != "r2" || st.Held != 0 || st.Budgets != 0 {
		t.Fatalf("status: %+v %v", st, err)
	}
	net.settle()

	// Retire r0: r1 and r2 spend every unit, 107 + 30 + 10.
	net.gone[0] = true
	spent := map[string]int64{}
	for range 50 {
		for _, r := range net.reps[1:] {
			for _, key := range []string{"a", "b", "c"} {
				for {
					if _, err := r.Apply(ctx, Op{Kind: OpSpend, Item: key, By: 1}); err != nil {
						break
					}
					spent[key]++
				}
			}
		}
		net.settle()
	}
	if spent["a"] != 107 || spent["b"] != 30 || spent["c"] != 10 {
		t.Fatalf("with r0 retired the others spent %v, want a:107 b:30 c:10", spent)
	}

	// Cancelled, r0 keeps what it is granted.
	if err := r0.Budgets().CancelHandoff(ctx); err != nil {
		t.Fatal(err)
	}
	if res := apply(r0, Op{Kind: OpGrant, Item: "d", By: 4}); res.Rights != 4 {
		t.Fatalf("grant after the handoff was cancelled: %+v, want 4 rights kept", res)
	}
}

// The control of the handoff runs of TestBudgetInvariantUnderRandomDelivery:
// a handoff that is one pass, not a mode, strands what arrives after it,
// and the check catches that.
func TestHandoffControlOnePassStrandsRights(t *testing.T) {
	onePass := func(r *Replica) {
		if _, err := r.Budgets().HandOffRights(context.Background(), "r1"); err != nil {
			t.Fatal(err)
		}
		if err := r.Budgets().CancelHandoff(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for seed := range uint64(12) {
		if v := budgetRun(t, seed, 250, nil, int(seed*17%200), onePass); v != "" {
			t.Logf("seed %d: %s", seed, v)
			return
		}
	}
	t.Fatal("a one-pass handoff stranded nothing in 12 schedules: the check cannot fail")
}

// A handoff is recorded in the store: a replica restarted during one
// turns it on again, but only once it accepts writes (its own entries may
// be behind until recovery ends), and a cancelled one stays cancelled.
func TestHandoffResumesAfterARestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	r0, closeR0 := openReplica(t, dir, "r0", nil)
	if _, err := r0.Apply(ctx, Op{Kind: OpGrant, Item: "a", By: 10}); err != nil {
		t.Fatal(err)
	}
	if h, err := r0.Budgets().HandOffRights(ctx, "r1"); err != nil || h.Moved != 10 {
		t.Fatalf("handoff: %+v %v", h, err)
	}
	closeR0()

	// Restarted holding writes, as a node does until recovery ends: the
	// handoff is pending, not on.
	r0, closeR0 = openReplica(t, dir, "r0", func(c *Config) { c.HoldWrites = true })
	if st, err := r0.Budgets().HandoffStatus(); err != nil || st.To != "r1" || r0.handoffTo() != "" {
		t.Fatalf("before writes are accepted: status %+v (%v), mode %q; want r1 pending, not on", st, err, r0.handoffTo())
	}
	r0.AcceptWrites()
	waitHandoff(t, r0, "r1")
	res, err := r0.Apply(ctx, Op{Kind: OpGrant, Item: "a", By: 5})
	if err != nil || res.Rights != 0 {
		t.Fatalf("grant after the restart: %+v %v, want its rights moved on", res, err)
	}
	if rd, err := r0.Budgets().Get("a"); err != nil || rd.LocalRights != 0 || rd.Rights["r1"] != 15 {
		t.Fatalf("after the restart: %+v %v, want all 15 with r1", rd, err)
	}

	// Cancelled, then restarted: the replica keeps what it is granted.
	if err := r0.Budgets().CancelHandoff(ctx); err != nil {
		t.Fatal(err)
	}
	closeR0()
	r0, _ = openReplica(t, dir, "r0", nil)
	if st, err := r0.Budgets().HandoffStatus(); err != nil || st.To != "" {
		t.Fatalf("a cancelled handoff after a restart: %+v %v", st, err)
	}
	if res, err := r0.Apply(ctx, Op{Kind: OpGrant, Item: "a", By: 4}); err != nil || res.Rights != 4 {
		t.Fatalf("grant after a cancelled handoff and a restart: %+v %v, want 4 kept", res, err)
	}
}

// waitHandoff waits until r's handoff to `to` is on.
func waitHandoff(t *testing.T, r *Replica, to string) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, func() error {
		if got := r.handoffTo(); got != to {
			return fmt.Errorf("the handoff to %s was not resumed (handing off to %q)", to, got)
		}
		return nil
	})
}
