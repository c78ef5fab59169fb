package storage

import (
	"fmt"
	"testing"

	"github.com/tally-dev/tally/crdt"
)

// Budget reads a budget's main vector and inboxes together, and neither
// takes another budget's: not one whose name extends the key and whose
// keys sort between the main vector's and the inboxes' in the same
// segment, nor another budget's inboxes.
func TestBudgetReadsMainAndInboxes(t *testing.T) {
	s := openTest(t, Config{Dir: t.TempDir()})
	defer s.Close()
	// A budget whose keys lie between g's main vector and g's inboxes.
	between := ""
	for i := 0; between == ""; i++ {
		if n := fmt.Sprintf("g%d", i); VectorSegment(n) == VectorSegment("g") {
			between = n
		}
	}
	commit(t, s, func(b *Batch) {
		b.PutVectorEntry(Budgets, "g", "A", crdt.PN{}, crdt.PN{P: 10, N: 2})
		b.PutVectorEntry(Budgets, "g", "B", crdt.PN{}, crdt.PN{P: 1})
		b.PutVectorEntry(Budgets, crdt.BudgetInboxName("g", "B"), "A", crdt.PN{}, crdt.PN{P: 3})
		b.PutVectorEntry(Budgets, crdt.BudgetInboxName("g", "A"), "A", crdt.PN{}, crdt.PN{N: 3})
		b.PutVectorEntry(Budgets, between, "A", crdt.PN{}, crdt.PN{P: 99})
		b.PutVectorEntry(Budgets, crdt.BudgetInboxName(between, "B"), "A", crdt.PN{}, crdt.PN{P: 9})
	})
	main, in, err := s.Budget("g")
	if err != nil {
		t.Fatal(err)
	}
	if len(main) != 2 || main.Get("A") != (crdt.PN{P: 10, N: 2}) || main.Get("B") != (crdt.PN{P: 1}) {
		t.Fatalf("main %v", main)
	}
	if len(in) != 2 || in["B"].Get("A").P != 3 || in["A"].Get("A").N != 3 || len(in["A"]) != 1 || len(in["B"]) != 1 {
		t.Fatalf("inboxes %v", in)
	}
	main, in, err = s.Budget(between)
	if err != nil || len(main) != 1 || main.Get("A").P != 99 || len(in) != 1 || in["B"].Get("A").P != 9 {
		t.Fatalf("%s: main %v inboxes %v (%v)", between, main, in, err)
	}
	if main, in, err = s.Budget("none"); err != nil || main != nil || in != nil {
		t.Fatalf("a budget never written: %v %v %v", main, in, err)
	}
}
