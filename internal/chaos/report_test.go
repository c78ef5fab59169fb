package chaos

import (
	"bytes"
	"strings"
	"testing"
)

// The report's build line names the deliberate bug a run had, and says
// which the harness played: with assign-overwrites a normal build ran no
// bug itself, but the run had one, so the line never says "no bugs".
func TestReportNamesTheBug(t *testing.T) {
	for _, c := range []struct {
		build     bool
		bug, want string
	}{
		{false, "", "normal build (no message faults, no bugs);"},
		{true, BugDropUnsynced, "chaos build, DELIBERATE BUG " + BugDropUnsynced + ";"},
		{true, BugAssignOverwrites, "chaos build, DELIBERATE BUG " + BugAssignOverwrites + " (played by the harness);"},
		{false, BugAssignOverwrites, "normal build (no message faults), DELIBERATE BUG " + BugAssignOverwrites + " (played by the harness);"},
	} {
		r := &Report{Config: ReportConfig{Duration: "10s", Regions: []string{"us", "eu"}, ChaosBuild: c.build, Bug: c.bug}}
		var buf bytes.Buffer
		r.WriteText(&buf)
		if !strings.Contains(buf.String(), "  "+c.want) {
			t.Errorf("build %t, bug %q: the report says\n%s\nwant a line with %q", c.build, c.bug, buf.String(), c.want)
		}
	}
}
