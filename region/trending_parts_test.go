package region

import (
	"slices"
	"testing"
)

// Whole keys rank among themselves; the parts of split items are kept
// for the n split items of the largest sums here, each part an entry of
// its own (the reader sums them across replicas), and take no place of a
// whole key's. Dropping the parts of a split item says so.
func TestTopNKeepsPartsBesideWholeKeys(t *testing.T) {
	items := []Ranked{{"a", 10}, {"v|0", 4}, {"v|1", 4}, {"v|2", 4}, {"b", 9}, {"c", 1}, {"w|0", 1}, {"w|1", 20}}
	got, cut := topN(slices.Clone(items), 2)
	want := []Ranked{{"a", 10}, {"b", 9}, {"w|0", 1}, {"w|1", 20}, {"v|0", 4}, {"v|1", 4}, {"v|2", 4}}
	if !slices.Equal(got, want) || cut {
		t.Fatalf("topN = %v (cut %v), want %v, not cut", got, cut, want)
	}
	got, cut = topN(slices.Clone(items), 1)
	want = []Ranked{{"a", 10}, {"w|0", 1}, {"w|1", 20}}
	if !slices.Equal(got, want) || !cut {
		t.Fatalf("topN 1 = %v (cut %v), want %v, cut", got, cut, want)
	}
	if got, cut := topN([]Ranked{{"a", 1}, {"b", 3}}, 1); !slices.Equal(got, []Ranked{{"b", 3}}) || cut {
		t.Fatalf("topN without parts = %v (cut %v)", got, cut)
	}
}
