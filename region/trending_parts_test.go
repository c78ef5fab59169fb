package region

import (
	"slices"
	"testing"
)

// The parts of a split item rank as the item, by their sum, and stay
// together: the reader sums them.
func TestTopNRanksPartsAsTheirItem(t *testing.T) {
	items := []Ranked{{"a", 10}, {"v|0", 4}, {"v|1", 4}, {"v|2", 4}, {"b", 9}, {"w|0", 1}, {"w|1", 20}}
	got := topN(items, 2)
	want := []Ranked{{"w|0", 1}, {"w|1", 20}, {"v|0", 4}, {"v|1", 4}, {"v|2", 4}}
	if !slices.Equal(got, want) {
		t.Fatalf("topN = %v, want %v", got, want)
	}
	if got := topN([]Ranked{{"a", 1}, {"b", 3}}, 1); !slices.Equal(got, []Ranked{{"b", 3}}) {
		t.Fatalf("topN without parts = %v", got)
	}
}
