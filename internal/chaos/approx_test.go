package chaos

import (
	"strings"
	"testing"
)

func approxIncr(id int64, by int64, out Outcome, counted ...int64) Op {
	return Op{ID: id, Kind: OpIncr, Region: "us", Key: "apx-0", By: by, Outcome: out, Attempts: 1, Counted: counted}
}

// approxEverywhere is every region reading v of apx-0, approx:true.
func approxEverywhere(v int64) approxState {
	st := approxState{Regions: regions3, Reads: map[string]map[string]reading{}}
	for _, r := range regions3 {
		st.Reads[r] = map[string]reading{"apx-0": {Value: v, Approx: true}}
	}
	return st
}

// The model knows the value exactly when every answer was seen, however
// far the counts are from the increments, and within bounds when one was
// lost or a key applied in two regions.
func TestApproxModelBoundsByWhatTheAnswersCounted(t *testing.T) {
	ops := []Op{
		approxIncr(1, 3, OutcomeOK, 8),
		approxIncr(2, 2, OutcomeOK, 0),
		approxIncr(3, -1, OutcomeOK, -8),
		approxIncr(4, 5, OutcomeFailed),            // not applied
		approxIncr(5, 2, OutcomeOK, 0, 8),          // applied in two regions: either stays
		{ID: 6, Kind: OpIncr, Key: "ctr-0", By: 4}, // an exact counter: not this model's
	}
	m := buildApproxModel(ops)["apx-0"]
	if m.Lo != 0 || m.Hi != 8 || m.Want != 6 || m.Increments != 4 || m.Unseen != 0 || m.MaxStep != 8 || m.Uncertain {
		t.Fatalf("model %+v", *m)
	}
	lost := approxIncr(7, 4, OutcomeTimeout)
	lost.Resolved, lost.CountUnseen = ResolvedDuplicate, true
	m = buildApproxModel(append(ops, lost))["apx-0"]
	if step := approxStepBound(m.Magnitude); m.Lo != 0 || m.Hi != 8+4+step || m.Unseen != 1 {
		t.Fatalf("with a lost answer: model %+v, step bound %d", *m, step)
	}
	down := approxIncr(8, -3, OutcomeTimeout)
	down.Resolved, down.CountUnseen, down.Counted = ResolvedApplied, true, []int64{0}
	m = buildApproxModel(append(ops, down))["apx-0"]
	if step := approxStepBound(m.Magnitude); m.Lo != -3-step || m.Hi != 8 {
		t.Fatalf("with a lost answer of a decrement: model %+v, step bound %d", *m, step)
	}
	unresolved := approxIncr(9, 1, OutcomeTimeout)
	if m := buildApproxModel(append(ops, unresolved))["apx-0"]; !m.Uncertain {
		t.Fatalf("an unresolved increment leaves the model certain: %+v", *m)
	}
}

func TestApproxStepBound(t *testing.T) {
	for _, c := range []struct{ mag, want int64 }{{0, 1}, {10, 2}, {100, 8}, {1000, 64}, {1 << 20, 1 << 16}} {
		if got := approxStepBound(c.mag); got != c.want {
			t.Errorf("approxStepBound(%d) = %d, want %d", c.mag, got, c.want)
		}
	}
}

func TestCheckApprox(t *testing.T) {
	ids := []string{"apx-0"}
	var ops []Op
	var sum, want int64
	for i := range 200 {
		by, counted := int64(1+i%3), int64(0)
		if i%4 == 0 {
			counted = 8
		}
		sum, want = sum+counted, want+by
		ops = append(ops, approxIncr(int64(i+1), by, OutcomeOK, counted))
	}
	m := buildApproxModel(ops)
	if vs, n := checkApprox(m, approxEverywhere(sum), ids); len(vs) != 0 || n.Reads != 3 || n.Increments != 200 || n.MaxStep != 8 {
		t.Fatalf("the sum of the counts fails: %v %+v", vs, n)
	}
	for _, c := range []struct {
		name   string
		mutate func(*approxState)
		kind   string
	}{
		{"a count lost everywhere", func(st *approxState) {
			for _, r := range regions3 {
				st.Reads[r]["apx-0"] = reading{Value: sum - 8, Approx: true}
			}
		}, KindValueMismatch},
		{"regions disagree", func(st *approxState) { st.Reads["eu"]["apx-0"] = reading{Value: sum + 8, Approx: true} }, KindDisagreement},
		{"exact read", func(st *approxState) { st.Reads["ap"]["apx-0"] = reading{Value: sum} }, KindApproxCounter},
		{"unreconciled", func(st *approxState) {
			st.Reads["ap"]["apx-0"] = reading{Value: sum, Approx: true, Unreconciled: 1}
		}, KindApprox},
		{"unread", func(st *approxState) {
			delete(st.Reads, "us")
			st.Errs = append(st.Errs, Violation{Kind: KindApproxCounter, Region: "us"})
		}, KindApproxCounter},
	} {
		st := approxEverywhere(sum)
		c.mutate(&st)
		vs, _ := checkApprox(m, st, ids)
		if !hasKind(vs, c.kind) {
			t.Errorf("%s: no %s violation: %v", c.name, c.kind, vs)
		}
	}
	// Far from the true sum, though what the answers said: the estimate
	// is off by more than its bound allows (a biased coin).
	far := []Op{approxIncr(1, 1, OutcomeOK, 1<<20)}
	vs, _ := checkApprox(buildApproxModel(far), approxEverywhere(1<<20), ids)
	if len(vs) != len(regions3) || !hasKind(vs, KindApproxCounter) || !strings.Contains(vs[0].Detail, "standard deviations") {
		t.Fatalf("a biased estimate: %v", vs)
	}
	// An unresolved increment: only agreement is checked.
	unresolved := append(ops, approxIncr(999, 1, OutcomeTimeout))
	if vs, _ := checkApprox(buildApproxModel(unresolved), approxEverywhere(sum+1000), ids); len(vs) != 0 {
		t.Fatalf("uncertain counter checked against the model: %v", vs)
	}
}

func hasKind(vs []Violation, kind string) bool {
	for _, v := range vs {
		if v.Kind == kind {
			return true
		}
	}
	return false
}
