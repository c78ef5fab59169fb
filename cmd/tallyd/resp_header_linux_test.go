package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// The 16-byte RESP header *9999999999999\r\n announces ten trillion
// arguments and sends none. Unpatched redcon looped over that count after
// the client left, a core busy per connection, and held shutdown forever
// (third_party/redcon/PATCHES.md). On the real binary: several clients
// send the header and leave; the idle process then burns next to no CPU,
// drops the connections, and SIGTERM ends it with status 0.
func TestRESPHeaderCostsNothingAfterTheClientLeaves(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	t.Parallel() // mostly waits; the bound is on the child's own CPU time
	bin := buildTallyd(t)
	cmd, url := startRESPProcess(t, bin, t.TempDir())
	status := func() map[string]any {
		t.Helper()
		code, b := testkit.CallJSON(t, "GET", url+"/v1/status")
		r, ok := b["resp"].(map[string]any)
		if code != 200 || !ok {
			t.Fatalf("/v1/status: %d %v", code, b)
		}
		return r
	}
	respAddr, _ := status()["addr"].(string)

	const clients = 8
	conns := make([]net.Conn, clients)
	for i := range conns {
		c, err := net.Dial("tcp", respAddr)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
		if _, err := c.Write([]byte("*9999999999999\r\n")); err != nil {
			t.Fatal(err)
		}
	}
	// The replica holds every one of them before they leave.
	testkit.WaitFor(t, 10*time.Second, func() error {
		if n := status()["connections"]; n != float64(clients) {
			return fmt.Errorf("connections %v, want %d", n, clients)
		}
		return nil
	})
	for _, c := range conns {
		_ = c.Close()
	}

	// Idle from here: a spinning reader would burn up to a core per
	// connection (two cores here) over the wait, and still 1.3 s of it
	// with other work on both cores; an idle tallyd burns tens of
	// milliseconds. The bound is far from both.
	const idle, bound = 3 * time.Second, 500 * time.Millisecond
	before := cpuTime(t, cmd.Process.Pid)
	time.Sleep(idle)
	if burnt := cpuTime(t, cmd.Process.Pid) - before; burnt > bound {
		t.Errorf("tallyd used %v of CPU in %v idle after the clients left, want at most %v: a reader is spinning", burnt, idle, bound)
	} else {
		t.Logf("CPU in %v idle after the clients left: %v", idle, burnt)
	}
	// Not fatal, so that SIGTERM is tried either way.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		n := status()["connections"]
		if n == 0.0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%v connections open 10s after the clients left, want 0", n)
			break
		}
	}

	// SIGTERM: a liveness bound, not a speed one (the drain delay is 0).
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("tallyd after SIGTERM: %v, want exit status 0", err)
		}
		t.Logf("exit status 0 %v after SIGTERM; CPU in all %v", time.Since(start).Round(time.Millisecond),
			cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())
	case <-time.After(30 * time.Second):
		t.Fatal("tallyd still running 30s after SIGTERM")
	}
}

// startRESPProcess runs `tallyd serve` with RESP on a free loopback port
// and no drain delay, stopped (killed) when the test ends, and returns it
// with its HTTP base URL.
func startRESPProcess(t *testing.T, bin, dir string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--resp-listen", "127.0.0.1:0",
		"--data", dir, "--region", "eu", "--drain-delay", "0", "--log-level", "error")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		if addr, ok := strings.CutPrefix(lines.Text(), "listening on "); ok {
			go func() { // keep draining so the child never blocks on stdout
				for lines.Scan() {
				}
			}()
			return cmd, "http://" + addr
		}
	}
	t.Fatalf("serve exited without listening: %v", lines.Err())
	return nil, ""
}

// cpuTime is the user and system CPU time process pid has used, from
// /proc/<pid>/stat (utime and stime, in clock ticks of 1/100 s: Linux
// reports them in USER_HZ, 100 on every architecture).
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing one, where field 3 (state) is the first.
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		t.Fatalf("/proc/%d/stat: %q", pid, raw)
	}
	var ticks int64
	for _, f := range fields[11:13] { // fields 14 utime and 15 stime
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			t.Fatalf("/proc/%d/stat: %q", pid, raw)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}
