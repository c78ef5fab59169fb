package main

import (
	"io"
	"os/exec"
	"strings"
	"testing"
)

// TestMakeRunPorts: `make run` runs tallyd local on the ports the tour
// uses by default, and on others when its variables say so.
func TestMakeRunPorts(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed")
	}
	def := defaultLocalConfig()
	for _, c := range []struct {
		vars                   []string
		port, nats, resp       int
		dashboard, wantPIDFile string
	}{
		{nil, def.Port, def.NATSPort, def.RESPPort, def.Dashboard.Addr, "data/tallyd.pid"},
		{[]string{"RUN_PORT=9081", "RUN_NATS_PORT=5222", "RUN_RESP_PORT=0", "RUN_DASHBOARD=", "RUN_ARGS=--pid-file /tmp/x.pid"}, 9081, 5222, 0, "", "/tmp/x.pid"},
	} {
		out, err := exec.Command("make", append([]string{"-s", "-n", "-C", "../..", "run"}, c.vars...)...).Output()
		if err != nil {
			t.Fatalf("make -n run %v: %v", c.vars, err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		last := lines[len(lines)-1]
		_, after, ok := strings.Cut(last, " local ")
		if !ok {
			t.Fatalf("make run %v runs %q, not tallyd local", c.vars, last)
		}
		var args []string
		for _, f := range strings.Fields(after) {
			args = append(args, strings.Trim(f, "'"))
		}
		lc, err := parseLocal(args, noEnv, io.Discard)
		if err != nil {
			t.Fatalf("make run %v: %q: %v", c.vars, args, err)
		}
		if lc.Port != c.port || lc.NATSPort != c.nats || lc.RESPPort != c.resp || lc.Dashboard.Addr != c.dashboard || lc.PIDFile != c.wantPIDFile {
			t.Errorf("make run %v: ports %d %d %d, dashboard %q, pid file %q; want %d %d %d %q %q", c.vars,
				lc.Port, lc.NATSPort, lc.RESPPort, lc.Dashboard.Addr, lc.PIDFile, c.port, c.nats, c.resp, c.dashboard, c.wantPIDFile)
		}
	}
}
