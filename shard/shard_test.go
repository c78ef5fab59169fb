package shard

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/quick"

	"github.com/tally-dev/tally/crdt"
)

// A key's slots, budget inboxes and spends live on the key's shard; the
// family totals and the block flags on Global; nothing else does.
func TestOfKeepsAKeysNamesTogether(t *testing.T) {
	for _, key := range []string{"post1", "video:launch", "a", "user@x.y"} {
		s := Of(key)
		if s < 0 || s >= Global {
			t.Fatalf("Of(%q) = %d, want 0..%d", key, s, Global-1)
		}
		for _, name := range []string{
			key + "#60.1200.60", crdt.BudgetInboxName(key, "eu"), "~" + key,
		} {
			if got := Of(name); got != s {
				t.Errorf("Of(%q) = %d, want %d (the shard of %q)", name, got, s, key)
			}
		}
	}
	for _, name := range []string{"#60.1200.60", "", FlagItem} {
		if got := Of(name); got != Global {
			t.Errorf("Of(%q) = %d, want Global %d", name, got, Global)
		}
	}
}

// The shard function is fixed: replicas of different builds must agree.
func TestOfIsFixed(t *testing.T) {
	for name, want := range map[string]int{"post1": 121, "video:launch": 227, "views:p": 113} {
		if got := Of(name); got != want {
			t.Errorf("Of(%q) = %d, want %d: changing the shard function strands every stored key", name, got, want)
		}
	}
}

func TestOfSpreadsKeys(t *testing.T) {
	var n [Count]int
	const keys = 200_000
	for i := range keys {
		n[Of(fmt.Sprintf("item-%d", i))]++
	}
	if n[Global] != 0 {
		t.Fatalf("%d keys hashed to Global", n[Global])
	}
	mean := float64(keys) / keyed
	for s, c := range n[:Global] {
		if float64(c) < mean/2 || float64(c) > mean*2 {
			t.Fatalf("shard %d has %d keys, mean %.0f", s, c, mean)
		}
	}
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("us-%d", i+1)
	}
	return out
}

// Every keyed shard has exactly min(copies, replicas) holders, every
// replica holds Global, and the map depends only on the set of replicas.
func TestAssignProperties(t *testing.T) {
	prop := func(nr, nc uint8, seed uint64) bool {
		n, copies := int(nr%9)+1, int(nc%4)+1
		rs := ids(n)
		m, err := Assign("us", rs, copies)
		if err != nil {
			t.Log(err)
			return false
		}
		if err := m.Validate(); err != nil {
			t.Log(err)
			return false
		}
		want := min(copies, n)
		for s := range keyed {
			if got := len(m.Holders(s)); got != want {
				t.Logf("shard %d has %d holders, want %d", s, got, want)
				return false
			}
		}
		if got := len(m.Holders(Global)); got != n {
			t.Logf("Global has %d holders, want %d", got, n)
			return false
		}
		shuffled := slices.Clone(rs)
		rand.New(rand.NewPCG(seed, 1)).Shuffle(n, func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		m2, err := Assign("us", shuffled, copies)
		return err == nil && m.Equal(m2)
	}
	if err := quick.Check(prop, nil); err != nil {
		t.Fatal(err)
	}
}

// Adding a replica moves only shards to it: every other replica keeps or
// loses shards, never gains one. This is what lets a joining replica take
// its shards without a reshuffle.
func TestAssignAddingAReplicaOnlyMovesShardsToIt(t *testing.T) {
	for n := 1; n <= 8; n++ {
		for copies := 1; copies <= 3; copies++ {
			before, _ := Assign("us", ids(n), copies)
			after, _ := Assign("us", ids(n+1), copies)
			for _, r := range ids(n) {
				b, a := before.Held(r), after.Held(r)
				if gained := a.And(complement(b)); gained.Len() != 0 {
					t.Fatalf("n=%d copies=%d: %s gained %v", n, copies, r, gained.Ranges())
				}
			}
		}
	}
}

func complement(s Set) Set {
	for i := range s {
		s[i] = ^s[i]
	}
	return s
}

// The shards spread evenly: with 3 replicas and 2 copies each holds about
// 2/3 of them.
func TestAssignBalances(t *testing.T) {
	for _, c := range []struct{ n, copies int }{{3, 2}, {6, 2}, {9, 3}} {
		m, _ := Assign("us", ids(c.n), c.copies)
		mean := float64(keyed*c.copies) / float64(c.n)
		for _, r := range ids(c.n) {
			held := m.Held(r)
			got := float64(held.Len() - 1) // less Global
			if got < mean*0.8 || got > mean*1.2 {
				t.Errorf("n=%d copies=%d: %s holds %.0f shards, mean %.0f", c.n, c.copies, r, got, mean)
			}
		}
	}
}

func TestMapJSONRoundTrip(t *testing.T) {
	for n := 1; n <= 6; n++ {
		m, err := Assign("eu", ids(n), 2)
		if err != nil {
			t.Fatal(err)
		}
		b, err := m.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("decode %s: %v", b, err)
		}
		if !got.Equal(m) {
			t.Fatalf("round trip of %d replicas changed the map: %s", n, b)
		}
	}
	single := Single("ap", "ap")
	b, _ := single.MarshalJSON()
	if want := `{"region":"ap","shards":1024,"copies":1,"replicas":[{"replica":"ap","shards":["0-1023"],"count":1024}]}`; string(b) != want {
		t.Fatalf("single map = %s, want %s", b, want)
	}
}

// A map's revision (where the shard map bucket stored it) survives its
// JSON, and Equal compares assignments, not revisions.
func TestMapRevisionRoundTrip(t *testing.T) {
	m, err := Assign("eu", ids(3), 2)
	if err != nil {
		t.Fatal(err)
	}
	m.Revision = 7
	b, _ := m.MarshalJSON()
	if !bytes.Contains(b, []byte(`"revision":7,`)) {
		t.Fatalf("map at revision 7 = %s, no revision", b)
	}
	got, err := Decode(b)
	if err != nil || got.Revision != 7 {
		t.Fatalf("Decode(%s) = revision %d, %v; want 7", b, got.Revision, err)
	}
	got.Revision = 8
	if !got.Equal(m) {
		t.Fatal("maps of one assignment at revisions 7 and 8 are not Equal")
	}
}

func TestDecodeRefuses(t *testing.T) {
	for name, in := range map[string]string{
		"no holder":     `{"region":"ap","shards":1024,"copies":1,"replicas":[{"replica":"ap","shards":["0-1022"]}]}`,
		"no global":     `{"region":"ap","shards":1024,"copies":1,"replicas":[{"replica":"a","shards":["0-1023"]},{"replica":"b","shards":["0-5"]}]}`,
		"other count":   `{"region":"ap","shards":4096,"copies":1,"replicas":[{"replica":"ap","shards":["0-1023"]}]}`,
		"bad run":       `{"region":"ap","shards":1024,"copies":1,"replicas":[{"replica":"ap","shards":["9-3"]}]}`,
		"out of range":  `{"region":"ap","shards":1024,"copies":1,"replicas":[{"replica":"ap","shards":["0-1024"]}]}`,
		"leading zero":  `{"region":"ap","shards":1024,"copies":1,"replicas":[{"replica":"ap","shards":["0-1023","01"]}]}`,
		"twice":         `{"region":"ap","shards":1024,"copies":1,"replicas":[{"replica":"ap","shards":["0-1023"]},{"replica":"ap","shards":["0-1023"]}]}`,
		"bad replica":   `{"region":"ap","shards":1024,"copies":1,"replicas":[{"replica":"a/b","shards":["0-1023"]}]}`,
		"unknown field": `{"region":"ap","shards":1024,"copies":1,"replicas":[],"x":1}`,
		"trailing":      `{"region":"ap","shards":1024,"copies":1,"replicas":[{"replica":"ap","shards":["0-1023"]}]} {}`,
		"no copies":     `{"region":"ap","shards":1024,"copies":0,"replicas":[{"replica":"ap","shards":["0-1023"]}]}`,
	} {
		if _, err := Decode([]byte(in)); err == nil {
			t.Errorf("%s: Decode(%s) accepted it", name, in)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for n := 1; n <= 3; n++ {
		m, _ := Assign("us", ids(n), 2)
		b, _ := m.MarshalJSON()
		f.Add(b)
	}
	f.Add([]byte(`{"region":"ap","shards":1024,"copies":1,"replicas":[{"replica":"ap","shards":["0-1023"]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		out, err := m.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		again, err := Decode(out)
		if err != nil || !again.Equal(m) {
			t.Fatalf("a decoded map does not survive its own encoding: %s → %s (%v)", b, out, err)
		}
	})
}

// Minus keeps exactly the shards of the first set that the second lacks,
// for random sets.
func TestSetMinus(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for range 50 {
		var a, b Set
		for s := range Count {
			if rng.IntN(2) == 0 {
				a.Add(s)
			}
			if rng.IntN(3) == 0 {
				b.Add(s)
			}
		}
		d := a.Minus(b)
		for s := range Count {
			if d.Has(s) != (a.Has(s) && !b.Has(s)) {
				t.Fatalf("shard %d: in a %v, in b %v, in a minus b %v", s, a.Has(s), b.Has(s), d.Has(s))
			}
		}
	}
}

// Preferred is every holder of a shard, once, starting at the one its
// number picks; over the shards each holder comes first about equally.
func TestPreferred(t *testing.T) {
	m, err := Assign("us", []string{"us-1", "us-2", "us-3", "us-4"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	first := map[string]int{}
	for s := range Count {
		p, h := m.Preferred(s), m.Holders(s)
		if len(p) != len(h) || p[0] != h[s%len(h)] {
			t.Fatalf("shard %d: preferred %v of holders %v", s, p, h)
		}
		seen := map[string]bool{}
		for _, r := range p {
			if seen[r] || !slices.Contains(h, r) {
				t.Fatalf("shard %d: preferred %v of holders %v", s, p, h)
			}
			seen[r] = true
		}
		first[p[0]]++
	}
	for r, n := range first {
		if n < Count/8 {
			t.Errorf("%s comes first for %d of %d shards", r, n, Count)
		}
	}
}

// SameHolders: one shard always; shards of one holder set yes, of two
// sets no; none, no.
func TestSameHolders(t *testing.T) {
	m, err := Assign("us", []string{"us-1", "us-2", "us-3"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	same, other := -1, -1
	for s := 1; s < Count && (same < 0 || other < 0); s++ {
		if slices.Equal(m.Holders(s), m.Holders(0)) {
			same = s
		} else {
			other = s
		}
	}
	if !m.SameHolders(0) || !m.SameHolders(0, 0) || !m.SameHolders(0, same) || m.SameHolders(0, same, other) || m.SameHolders() {
		t.Fatalf("SameHolders of 0, %d (same holders) and %d (others): wrong", same, other)
	}
}
