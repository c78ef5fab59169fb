package node

import (
	"strings"
	"testing"
	"time"
)

func TestWindowConfig(t *testing.T) {
	c := DefaultConfig()
	wc, err := c.WindowConfig()
	if err != nil {
		t.Fatal(err)
	}
	if l := wc.Rules[0].Levels; len(l) != 3 || l[0].Width != time.Second || l[0].Keep != 3*time.Hour ||
		l[1].Keep != 15*24*time.Hour || l[2].Width != time.Hour || l[2].Keep != 3*365*24*time.Hour {
		t.Fatalf("default levels %+v", l)
	}
	c.Windows = ""
	if wc, err = c.WindowConfig(); err != nil || len(wc.Rules[0].Levels) != 0 {
		t.Fatalf("windows off: %+v %v", wc, err)
	}
	for _, bad := range []struct{ windows, rule, kind, past, want string }{
		{windows: "1s", want: "width:keep"},
		{windows: "0s:1h", want: "bad width"},
		{windows: "1s:-1h", want: "bad keep"},
		{windows: "1s:1m", past: "5m", want: "shorter than the accepted event past"},
		{windows: "1500ms:1h", want: "whole seconds"},
		{windows: "1s:1h,1s:2h", want: "twice"},
		{windows: "1s:1h", rule: "1m:1h", kind: "hits", want: "kind"},
		{windows: "1s:1h", past: "0s", want: "event_time_past"},
	} {
		c := DefaultConfig()
		c.Windows = bad.windows
		if bad.past != "" {
			c.EventTimePast = bad.past
		}
		if bad.rule != "" {
			c.WindowRules = []WindowRuleConfig{{Prefix: "p:", Kind: bad.kind, Levels: bad.rule}}
		}
		if _, err := c.WindowConfig(); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: error %v, want it to mention %q", bad, err, bad.want)
		}
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: Validate passed", bad)
		}
	}
}
