package main

import (
	"strings"
	"testing"
)

// tallyd dispatches bench and its help to internal/bench.
func TestBenchHelp(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"help", "bench"}, "replication"},
		{[]string{"bench", "-h"}, "likes"},
		{[]string{"bench", "likes", "-h"}, "-concurrency"},
		{[]string{"bench", "events", "-h"}, "-mem-every"},
		{[]string{"bench", "events", "-h"}, "-windows"},
		{[]string{"bench", "replication", "-h"}, "-samples"},
		{[]string{"bench", "-h"}, "budget"},
		{[]string{"bench", "budget", "-h"}, "-exhaust"},
		{[]string{"bench", "-h"}, "shards"},
		{[]string{"bench", "shards", "-h"}, "-measure"},
		{[]string{"bench", "-h"}, "sim"},
		{[]string{"bench", "sim", "-h"}, "-vector-writers"},
	} {
		code, stdout, _ := runArgs(t, c.args...)
		if code != 0 || !strings.Contains(stdout, c.want) {
			t.Errorf("%q: exit %d, stdout %q lacks %q", c.args, code, stdout, c.want)
		}
	}
}
