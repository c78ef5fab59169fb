package main

import (
	"strings"
	"testing"
)

func TestChaosUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"chaos", "--faults", "partition,quakes"}, `fault "quakes"`},
		{[]string{"chaos", "--duration", "1s"}, "duration 1s: want at least 5s"},
		{[]string{"chaos", "--regions", "us"}, "want at least 2"},
		{[]string{"chaos", "--bug", "typo"}, `bug "typo"`},
		{[]string{"chaos", "--binary", "/nonexistent/tallyd"}, "/nonexistent/tallyd"},
		// The test binary is no chaos build.
		{[]string{"chaos", "--bug", "no-reconcile"}, "needs a chaos build"},
		{[]string{"chaos", "extra"}, "unexpected argument"},
		{[]string{"chaos", "--milestones", "every:zero"}, `milestones "every:zero"`},
		// A sharded run from the command line: the flags reach the
		// config, and "all" faults are the sharded ones (no clock or
		// forge fault is refused), so the duration is what fails here.
		{[]string{"chaos", "--replicas", "3", "--copies", "4"}, "copies 4: want 1 to 3"},
		{[]string{"chaos", "--replicas", "12"}, "replicas 12: want 1 to 9"},
		{[]string{"chaos", "--replicas", "3", "--hot", "item-00=3", "--duration", "1s"}, "tallyd: chaos: duration 1s: want at least 5s\n"},
		{[]string{"chaos", "--replicas", "3", "--faults", "clock"}, `fault "clock": a sharded run injects some of`},
		// The harness plays assign-overwrites: no chaos build needed,
		// but a sharded run with moves.
		{[]string{"chaos", "--bug", "assign-overwrites"}, "only a sharded run with moves"},
		{[]string{"chaos", "--replicas", "3", "--faults", "kill", "--bug", "assign-overwrites"}, "only a sharded run with moves"},
	} {
		code, stdout, stderr := runArgs(t, c.args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, stdout, stderr, c.want)
		}
	}
	code, stdout, _ := runArgs(t, "help", "chaos")
	if code != 0 || !strings.Contains(stdout, "--seed") && !strings.Contains(stdout, "-seed") {
		t.Errorf("help chaos: exit %d, %q", code, stdout)
	}
}
