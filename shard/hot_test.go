package shard

import (
	"strconv"
	"strings"
	"testing"

	"github.com/tally-dev/tally/crdt"
)

func TestHotSplitsByPrefix(t *testing.T) {
	h := Hot{{Prefix: "viral:", Parts: 3}, {Prefix: "viral:x", Parts: 5}}
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
	for item, want := range map[string]int{"viral:1": 3, "viral:x1": 5, "calm": 0, "viral": 0,
		"viral:" + strings.Repeat("a", crdt.MaxSplitIDLen-6): 3, "viral:" + strings.Repeat("a", crdt.MaxSplitIDLen-5): 0} {
		if got := h.Parts(item); got != want {
			t.Errorf("Parts(%q) = %d, want %d", item, got, want)
		}
	}
	if h.Name("calm", "u") != "calm" || len(h.Names("calm")) != 1 {
		t.Error("an item not split is its own name")
	}
	// Every user goes to one part, the same every time, and the users
	// spread over every part, each part on a shard of its own name.
	per := map[string]int{}
	for i := range 3000 {
		u := "user" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + strconv.Itoa(i)
		n := h.Name("viral:1", u)
		if n != h.Name("viral:1", u) {
			t.Fatal("a user's part changes")
		}
		item, k, ok := crdt.SplitPart(n)
		if !ok || item != "viral:1" || k != PartOf(u, 3) || Of(n) != int(Hash(n)%keyed) {
			t.Fatalf("part %q of user %q", n, u)
		}
		per[n]++
	}
	names := h.Names("viral:1")
	if len(per) != 3 || len(names) != 3 {
		t.Fatalf("users over parts %v, names %v", per, names)
	}
	for _, n := range names {
		if per[n] < 800 {
			t.Errorf("part %s took %d of 3000 users", n, per[n])
		}
	}
	for _, bad := range []Hot{{{Prefix: "", Parts: 2}}, {{Prefix: "a/b", Parts: 2}}, {{Prefix: "a", Parts: 1}},
		{{Prefix: "a", Parts: crdt.MaxParts + 1}}, {{Prefix: "a", Parts: 2}, {Prefix: "a", Parts: 3}}} {
		if bad.Validate() == nil {
			t.Errorf("%+v validated", bad)
		}
	}
}
