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
	if _, err := PlanMove(cur, other); err == nil || !strings.Contains(err.Error(), "drops replica us-3") {
		t.Errorf("a move to fewer replicas: %v", err)
	}
	bad := mv.Join
	bad.joining = append([]Set(nil), bad.joining...)
	bad.joining[0] = bad.joining[0].Or(bad.held[0])
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "joining shards it serves") {
		t.Errorf("a replica joining what it serves: %v", err)
	}
}

// A replica added to a region joins holding Global alone and takes its
// keyed shards in the join map; the switch map is the target over every
// replica. A target that drops a replica is refused.
func TestPlanMoveAddsAReplica(t *testing.T) {
	cur, err := Assign("us", []string{"us-1", "us-2", "us-3"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	target, err := Assign("us", []string{"us-1", "us-2", "us-3", "us-4"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	mv, err := PlanMove(cur, target)
	if err != nil {
		t.Fatal(err)
	}
	if got := mv.Join.Held("us-4"); got.Len() != 1 || !got.Has(Global) {
		t.Fatalf("the new replica serves %d shards in the join map, want Global alone", got.Len())
	}
	want := target.Held("us-4")
	if got := mv.Join.Joining("us-4").Or(mv.Join.Held("us-4")); got != want {
		t.Fatalf("the new replica keeps %d shards in the join map, want its %d", got.Len(), want.Len())
	}
	if !shardsEqual(mv.Switch, target) {
		t.Fatal("the switch map does not serve the target")
	}
	if mv.Moved != want.Len()-1 {
		t.Fatalf("moved %d shard copies, want the new replica's %d", mv.Moved, want.Len()-1)
	}
	if err := mv.Join.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := PlanMove(target, cur); err == nil || !strings.Contains(err.Error(), "drops replica us-4") {
		t.Fatalf("a target without us-4: %v, want refused", err)
	}
}

func shardsEqual(a, b Map) bool {
	for _, r := range b.Replicas() {
		if a.Held(r) != b.Held(r) {
			return false
		}
	}
	return true
}

// Steps of at most limit shard copies each reach the target, every one a
// valid map gaining no more than limit copies.
func TestStepBoundsAMove(t *testing.T) {
	cur, err := Assign("us", []string{"us-1", "us-2", "us-3"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	target, err := Assign("us", []string{"us-1", "us-2", "us-3", "us-4"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	const limit = 100
	steps := 0
	for !shardsEqual(cur, target) || len(cur.Replicas()) != len(target.Replicas()) {
		next, err := Step(cur, target, limit)
		if err != nil {
			t.Fatal(err)
		}
		mv, err := PlanMove(cur, next)
		if err != nil {
			t.Fatal(err)
		}
		if mv.Moved > limit || mv.Moved == 0 {
			t.Fatalf("step %d moves %d shard copies, want 1..%d", steps, mv.Moved, limit)
		}
		cur = next
		if steps++; steps > 20 {
			t.Fatal("the steps do not reach the target")
		}
	}
	h := target.Held("us-4")
	if want := (h.Len() - 1 + limit - 1) / limit; steps != want {
		t.Fatalf("%d steps, want %d", steps, want)
	}
	if got, err := Step(cur, target, limit); err != nil || !got.Equal(target) {
		t.Fatalf("a step from the target: %v", err)
	}
}
