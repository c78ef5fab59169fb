package node

import (
	"strings"
	"testing"

	"github.com/tally-dev/tally/region"
)

// Approx rules: the flag form parses to what HCL would give, the replica
// gets them as given, and every bad rule is refused with its prefix,
// including one that would make a numbered counter approximate.
func TestApproxConfig(t *testing.T) {
	ac, err := ParseApprox("views:=0.01")
	if err != nil || ac != (ApproxConfig{Prefix: "views:", Error: 0.01}) || ac.String() != "views:=0.01" {
		t.Fatalf("parsed %+v, %v", ac, err)
	}
	if all, err := ParseApprox("=0.05"); err != nil || all.Prefix != "" || all.Error != 0.05 {
		t.Fatalf("every counter: %+v, %v", all, err)
	}
	for _, bad := range []string{"views:", "views:=", "views:=lots", "views:=0", "views:=0.0005", "views:=0.6", "views:=NaN", "a b=0.01"} {
		if _, err := ParseApprox(bad); err == nil {
			t.Errorf("ParseApprox(%q) accepted", bad)
		}
	}

	c := DefaultConfig()
	c.Derive()
	c.Approx = []ApproxConfig{{Prefix: "views:", Error: 0.01}, {Prefix: "", Error: 0.05}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := c.ApproxRules(); len(got) != 2 || got[0] != (region.ApproxRule{Prefix: "views:", Error: 0.01}) || got[1].Error != 0.05 {
		t.Fatalf("replica rules %+v", got)
	}

	for _, tc := range []struct {
		approx []ApproxConfig
		seqs   []string
		want   string
	}{
		{[]ApproxConfig{{"views:", 0.7}}, nil, `approx "views:": error 0.7`},
		{[]ApproxConfig{{"views:", 0}}, nil, `approx "views:": error 0`},
		{[]ApproxConfig{{"a/b", 0.01}}, nil, `approx "a/b"`},
		{[]ApproxConfig{{"views:", 0.01}, {"views:", 0.02}}, nil, `approx "views:" is configured twice`},
		{[]ApproxConfig{{"search:", 0.01}}, []string{"s=increments/search:*/10^k"}, "sequence s numbers increments"},
		{[]ApproxConfig{{"search:c", 0.01}}, []string{"s=increments/search:*/10^k"}, "sequence s numbers increments"},
		{[]ApproxConfig{{"", 0.01}}, []string{"s=increments/search:cats/10^k"}, "sequence s numbers increments"},
		{[]ApproxConfig{{"views:", 0.01}}, []string{"s=increments/*/10^k"}, "sequence s numbers increments"},
	} {
		c := DefaultConfig()
		c.Replica, c.NATS = "us-1", "nats://127.0.0.1:4222"
		c.Derive()
		c.Approx = tc.approx
		for _, s := range tc.seqs {
			sc, err := ParseSequence(s)
			if err != nil {
				t.Fatal(err)
			}
			c.Sequences = append(c.Sequences, sc)
		}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v %v: error %v, want it to mention %q", tc.approx, tc.seqs, err, tc.want)
		}
	}
	// Sequences of likes, and counters outside every rule, are fine.
	c = DefaultConfig()
	c.Replica, c.NATS = "us-1", "nats://127.0.0.1:4222"
	c.Derive()
	c.Approx = []ApproxConfig{{"views:", 0.01}}
	for _, s := range []string{"l=likes/*/10^k", "s=increments/search:*/10^k", "v=increments/view/10"} {
		sc, _ := ParseSequence(s)
		c.Sequences = append(c.Sequences, sc)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("non-overlapping sequences refused: %v", err)
	}
}
