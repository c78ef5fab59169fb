package httpapi

import (
	"strconv"
	"testing"

	"github.com/tally-dev/tally/region"
)

// A sub-batch is cut into requests of at most the bound, in order, every
// op in exactly one; an op past the bound alone still goes.
func TestChunksKeepOrderAndBound(t *testing.T) {
	var ops []region.Op
	for i := range 1000 {
		ops = append(ops, region.Op{Kind: region.OpIncr, Item: "k" + strconv.Itoa(i), IdemKey: "imp:0123456789abcdef01234567." + strconv.Itoa(i)})
	}
	ops = append(ops, region.Op{Kind: region.OpUniques, Item: "u", IDs: make([]string, 3000)}) // past the bound alone
	const max = 4 << 10
	runs := chunks(ops, max)
	if len(runs) < 2 {
		t.Fatalf("%d runs of %d ops under %d bytes each", len(runs), len(ops), max)
	}
	i := 0
	for _, run := range runs {
		size := 0
		for k := range run {
			if run[k].Item != ops[i].Item {
				t.Fatalf("op %d is %s, want %s: out of order", i, run[k].Item, ops[i].Item)
			}
			size += opBytes(&run[k])
			i++
		}
		if size > max && len(run) > 1 {
			t.Errorf("a run of %d ops takes %d bytes, more than %d", len(run), size, max)
		}
	}
	if last := runs[len(runs)-1]; len(last) != 1 || last[0].Kind != region.OpUniques {
		t.Errorf("the op past the bound went in a run of %d", len(last))
	}
	if i != len(ops) {
		t.Fatalf("%d ops in the runs, want %d", i, len(ops))
	}
	if got := chunks(nil, max); len(got) != 0 {
		t.Errorf("no ops: %d runs", len(got))
	}
}
