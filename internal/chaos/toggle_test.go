package chaos

import (
	"slices"
	"testing"
	"time"
)

// stamped is a like or unlike carrying the client's time at.
func stamped(o Op, at int64) Op {
	o.At = at
	return o
}

// toggled is a toggle that answered liked.
func toggled(id int64, region, item, user string, liked bool) Op {
	o := like(id, region, item, user, OutcomeOK)
	o.Kind, o.Liked, o.Idem = OpToggle, liked, "op-1"
	return o
}

// The client's time orders a user's actions: a late pair's second
// action, stamped 30 s before the first, loses, whatever the order the
// client sent them in.
func TestModelClientTimeOrders(t *testing.T) {
	item := key{Likes: true, ID: "i"}
	u := userKey{"i", "u"}
	const tMs = 1_700_000_000_000
	ops := []Op{
		like(1, "us", "i", "u", OutcomeOK),
		stamped(unlike(2, "eu", "i", "u", OutcomeOK), tMs),
		stamped(like(3, "ap", "i", "u", OutcomeOK), tMs-30_000), // answered liked:false
	}
	mo := modelOrder{StartMs: tMs - 10_000, ClockLead: 6 * time.Second}
	ops[0].Start, ops[0].End = 0, 100*time.Millisecond
	ops[1].Start, ops[1].End = 10*time.Second, 10*time.Second+10*time.Millisecond
	m, _ := buildModelOrder(ops, mo)
	if got := m.Allowed[u]; !slices.Equal(got, []bool{false}) || m.LastOp[u] != 2 {
		t.Fatalf("allowed %v (last op %d), want [false] from op 2", got, m.LastOp[u])
	}
	f := everywhere(map[key]int64{item: 0}, map[userKey]bool{u: false})
	f.StartMs, f.ClockLead = mo.StartMs, mo.ClockLead
	if _, vs := check(ops, []key{item}, f); len(vs) != 0 {
		t.Fatalf("exact state flagged: %v", vs)
	}
	// The late like winning (a merge by HLC) is a lost unlike.
	f = everywhere(map[key]int64{item: 1}, map[userKey]bool{u: true})
	f.StartMs, f.ClockLead = mo.StartMs, mo.ClockLead
	if _, vs := check(ops, []key{item}, f); !slices.Equal(kinds(vs), []string{KindLostAck, KindValueMismatch}) {
		t.Fatalf("late like winning: %v", vs)
	}

	// An action without a client time against one with: the unstamped
	// one's time is known within its span and the clock's lead. A client
	// time inside that is either way; past it, the stamped one wins; one
	// before the unstamped one's send loses.
	for _, c := range []struct {
		at   int64
		want []bool
	}{
		{mo.StartMs + 50, []bool{true, false}},
		{mo.StartMs + 100 + 6_000 + 1, []bool{false}},
		{mo.StartMs - 1, []bool{true}},
	} {
		ops := []Op{like(1, "us", "i", "u", OutcomeOK), stamped(unlike(2, "eu", "i", "u", OutcomeOK), c.at)}
		ops[0].Start, ops[0].End = 0, 100*time.Millisecond
		m, _ := buildModelOrder(ops, mo)
		got := m.Allowed[u]
		same := len(got) == len(c.want)
		for _, s := range c.want {
			same = same && slices.Contains(got, s)
		}
		if !same {
			t.Errorf("unlike at %+d ms of the like's send: allowed %v, want %v", c.at-mo.StartMs, got, c.want)
		}
	}
}

// A toggle sets the state its answer said; its key resent to the same
// region must answer duplicate and the same state.
func TestModelToggles(t *testing.T) {
	item := key{Likes: true, ID: "i"}
	u := userKey{"i", "u"}
	ops := []Op{like(1, "us", "i", "u", OutcomeOK), toggled(2, "eu", "i", "u", false)}
	ops[1].ResendOutcome, ops[1].ResendDuplicate, ops[1].ResendLiked = OutcomeOK, true, false
	if _, vs := check(ops, []key{item}, everywhere(map[key]int64{item: 0}, map[userKey]bool{u: false})); len(vs) != 0 {
		t.Fatalf("exact state flagged: %v", vs)
	}
	if _, vs := check(ops, []key{item}, everywhere(map[key]int64{item: 1}, map[userKey]bool{u: true})); !slices.Equal(kinds(vs), []string{KindLostAck, KindValueMismatch}) {
		t.Fatalf("toggle lost: %v", vs)
	}
	// The resend flipped again: caught, whatever the final state.
	ops[1].ResendDuplicate, ops[1].ResendLiked = false, true
	_, vs := check(ops, []key{item}, everywhere(map[key]int64{item: 0}, map[userKey]bool{u: false}))
	if !slices.Equal(kinds(vs), []string{KindToggle}) || vs[0].Op != 2 {
		t.Fatalf("toggle applied twice: %v", vs)
	}
	// A toggle whose fate nobody saw leaves the user unchecked.
	lost := []Op{like(1, "us", "i", "u", OutcomeOK), toggled(2, "eu", "i", "u", false)}
	lost[1].Outcome, lost[1].BlockedRetry = OutcomeTimeout, true
	if m, _ := buildModel(lost); !m.Uncertain[u.String()] {
		t.Fatal("a toggle that may have applied, either way, is not uncertain")
	}
}

// The planner's toggles are keyed, a share resent to another region with
// the same key; its late pairs are opposite actions at two regions, one
// after the other, the second stamped lateLag earlier.
func TestPlannerTogglesAndLatePairs(t *testing.T) {
	cfg := DefaultConfig().withDefaults()
	cfg.LikeWeight, cfg.PairWeight, cfg.IncrWeight, cfg.UniqueWeight, cfg.BudgetWeight, cfg.BlockWeight = 0, 0, 0, 0, 0, 0
	cfg.ToggleWeight, cfg.LateWeight = 1, 1
	p := newPlanner(cfg, 0)
	var toggles, resent, late int
	for range 400 {
		step := p.next()
		o := step.ops[0]
		switch o.Kind {
		case OpToggle:
			toggles++
			if !o.keyed || o.sameKey || o.stamped {
				t.Fatalf("toggle %+v", o)
			}
			if len(step.ops) == 2 {
				resent++
				r := step.ops[1]
				if !step.sequential || r.Kind != OpToggle || !r.sameKey || r.Region == o.Region || r.Key != o.Key || r.User != o.User || r.RetryAfter <= 0 {
					t.Fatalf("toggle resend %+v of %+v", r, o)
				}
			}
		case OpLike, OpUnlike:
			late++
			s := step.ops[1]
			if !step.sequential || len(step.ops) != 2 || s.Kind == o.Kind || s.Region == o.Region || s.Key != o.Key || s.User != o.User ||
				!o.stamped || !s.stamped || o.lag != 0 || s.lag != lateLag || !o.Late || !s.Late {
				t.Fatalf("late pair %+v, %+v", o, s)
			}
		default:
			t.Fatalf("op %+v", o)
		}
	}
	if toggles < 150 || late < 150 || resent < toggles/5 || resent > toggles/2 {
		t.Fatalf("%d toggles (%d resent elsewhere), %d late pairs", toggles, resent, late)
	}
}
