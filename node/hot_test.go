package node

import (
	"strings"
	"testing"

	"github.com/tally-dev/tally/shard"
)

// Hot blocks become the split items every front door routes by; bad
// ones are refused naming the block.
func TestHotConfig(t *testing.T) {
	c := validConfig()
	c.Hot = []HotConfig{{Prefix: "viral:", Splits: 3}, {Prefix: "viral:big", Splits: 8}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if h := c.HotItems(); len(h) != 2 || h[1] != (shard.Split{Prefix: "viral:big", Parts: 8}) || h.Parts("viral:big1") != 8 {
		t.Fatalf("split items %+v", h)
	}
	if hc, err := ParseHot("viral:=3"); err != nil || hc != (HotConfig{Prefix: "viral:", Splits: 3}) || hc.String() != "viral:=3" {
		t.Fatalf("ParseHot: %+v %v", hc, err)
	}
	for _, tc := range []struct {
		hot  []HotConfig
		want string
	}{
		{[]HotConfig{{"viral:", 1}}, `hot item prefix "viral:": splits 1`},
		{[]HotConfig{{"viral:", 65}}, `splits 65`},
		{[]HotConfig{{"", 3}}, `hot item prefix ""`},
		{[]HotConfig{{"a|b", 3}}, `hot item prefix "a|b"`},
		{[]HotConfig{{"v", 2}, {"v", 3}}, `"v" given twice`},
	} {
		c := validConfig()
		c.Hot = tc.hot
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want it to mention %q", tc.hot, err, tc.want)
		}
	}
	for _, bad := range []string{"viral:", "viral:=x", "viral:=1"} {
		if _, err := ParseHot(bad); err == nil {
			t.Errorf("ParseHot(%q) accepted", bad)
		}
	}
}
