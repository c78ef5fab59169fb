package shard

import (
	"strings"
	"testing"
)

// A move from two copies to three over the same replicas: the join map
// keeps every holder serving what it served and names what each takes,
// the switch map serves the target; each survives the bucket's encoding.
// Back to two copies, each replica keeps what it gave up as a passive
// copy, which serves again when the shards come back.
func TestPlanMove(t *testing.T) {
	reps := []string{"us-1", "us-2", "us-3"}
	cur, err := Assign("us", reps, 2)
	if err != nil {
		t.Fatal(err)
	}
	target, err := Assign("us", reps, 3)
	if err != nil {
		t.Fatal(err)
	}
	mv, err := PlanMove(cur, target)
	if err != nil {
		t.Fatal(err)
	}
	if mv.Moved != keyed { // every keyed shard gains its third holder
		t.Fatalf("moved %d shard copies, want %d", mv.Moved, keyed)
	}
	for _, m := range []Map{mv.Join, mv.Switch} {
		b, err := m.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		back, err := Decode(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if !back.Equal(m) {
			t.Fatalf("the map changed through its encoding: %s", b)
		}
	}
	if !mv.Join.Moving() || mv.Switch.Moving() || !mv.Switch.Equal(target) { // nothing leaves: 2 to 3 copies
		t.Fatalf("moving: join %v switch %v; the switch is the target: %v", mv.Join.Moving(), mv.Switch.Moving(), mv.Switch.Equal(target))
	}
	for _, r := range reps {
		if mv.Join.Held(r) != cur.Held(r) || mv.Switch.Held(r) != target.Held(r) {
			t.Fatalf("%s: the phases do not serve cur, then target", r)
		}
		if got, want := mv.Join.Keeps(r), target.Held(r); got != want {
			t.Fatalf("%s joining keeps %d shards, want %d", r, got.Len(), want.Len())
		}
	}

	// Back from three copies to two: the switch map names what each
	// gives up, and the view keeps it there.
	back, err := PlanMove(target, cur)
	if err != nil {
		t.Fatal(err)
	}
	if back.Join.Moving() || back.Switch.Moving() || back.Switch.Equal(cur) {
		t.Fatalf("3 to 2 copies: join moving %v, switch moving %v, no passive copies %v", back.Join.Moving(), back.Switch.Moving(), back.Switch.Equal(cur))
	}
	for _, r := range reps {
		left := back.Switch.Leaving(r)
		still := left.And(cur.Held(r))
		if left.Len() == 0 || still.Len() != 0 {
			t.Fatalf("%s leaves %d shards, %d of them still held", r, left.Len(), still.Len())
		}
		for s := range Count {
			if left.Has(s) && !(Maps{back.Switch}).Holds(r, s) {
				t.Fatalf("%s does not keep shard %d it is leaving", r, s)
			}
		}
	}

	// Up to three copies again: the passive copies become served ones.
	again, err := PlanMove(back.Switch, target)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Switch.Equal(target) {
		t.Fatalf("back to three copies, passive copies remain")
	}

	// What a move refuses.
	if _, err := PlanMove(mv.Join, cur); err == nil || !strings.Contains(err.Error(), "already moving") {
		t.Errorf("a move from a moving map: %v", err)
	}
	other, _ := Assign("us", []string{"us-1", "us-2"}, 2)
	if _, err := PlanMove(cur, other); err == nil || !strings.Contains(err.Error(), "same region and replicas") {
		t.Errorf("a move to other replicas: %v", err)
	}
	bad := mv.Join
	bad.joining = append([]Set(nil), bad.joining...)
	bad.joining[0] = bad.joining[0].Or(bad.held[0])
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "joining shards it serves") {
		t.Errorf("a replica joining what it serves: %v", err)
	}
}
