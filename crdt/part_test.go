package crdt

import "testing"

func TestPartNames(t *testing.T) {
	for k := range MaxParts {
		name := PartName("viral:1", k)
		item, got, ok := SplitPart(name)
		if !ok || item != "viral:1" || got != k {
			t.Fatalf("SplitPart(%q) = %q, %d, %v", name, item, got, ok)
		}
		if ValidID(name) {
			t.Fatalf("part name %q is a valid id: a user's item could collide with it", name)
		}
		if !ValidItemName(name) || ItemOf(name) != "viral:1" || BaseKey(name) != name {
			t.Fatalf("part name %q: valid %v, item %q, base key %q", name, ValidItemName(name), ItemOf(name), BaseKey(name))
		}
	}
	for _, bad := range []string{"x|", "|1", "x|01", "x|64", "x|-1", "x|1|2", "x|a", "a/b|1", "x|+1"} {
		if _, _, ok := SplitPart(bad); ok || ValidItemName(bad) {
			t.Errorf("%q parsed as a part name", bad)
		}
	}
	if ItemOf("plain") != "plain" || !ValidItemName("plain") {
		t.Error("a plain id is not its own item")
	}
	if s, ok := ParseSlot(Slot{Key: PartName("v", 2), Width: 60, Start: 120, Keep: 60}.Name()); !ok || s.Key != "v|2" {
		t.Errorf("a part's slot does not parse: %+v %v", s, ok)
	}
}
