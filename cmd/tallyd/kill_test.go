package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// The real binary, built once per test run by the first test that needs
// it (the kill test and the tours share it: each only runs it), in a
// directory TestMain removes.
var (
	tallydOnce sync.Once
	tallydDir  string
	tallydBin  string
	tallydErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if tallydDir != "" {
		os.RemoveAll(tallydDir)
	}
	os.Exit(code)
}

// buildTallyd compiles the real binary once per test run, with the
// compile settings every test's build of tallyd shares
// (testkit.BuildTallyd).
func buildTallyd(t *testing.T) string {
	t.Helper()
	tallydOnce.Do(func() {
		if tallydDir, tallydErr = os.MkdirTemp("", "tallyd-test-bin-"); tallydErr != nil {
			return
		}
		tallydBin = filepath.Join(tallydDir, "tallyd")
		tallydErr = testkit.BuildTallyd(tallydBin)
	})
	if tallydErr != nil {
		t.Fatal(tallydErr)
	}
	return tallydBin
}

// startProcess runs `tallyd serve` as a child process and returns its URL.
func startProcess(t *testing.T, bin, dir string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--data", dir, "--region", "us", "--log-level", "error")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
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

// The acceptance scenario, on the real binary: like one item as
// 1,000 users (some requests retried), kill -9 the process, restart it on
// the same data dir and read exactly 1,000; unlike 10 and read 990.
func TestKill9KeepsEveryAcknowledgedLike(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the real binary")
	}
	t.Parallel()
	bin := buildTallyd(t)
	dir := t.TempDir()
	cmd, url := startProcess(t, bin, dir)

	const users, workers = 1000, 16
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := w; u < users; u += workers {
				tries := 1
				if u%7 == 0 {
					tries = 2 // a client retry: must not count twice
				}
				for range tries {
					st, b, err := testkit.DoJSON("PUT", fmt.Sprintf("%s/v1/likes/video1/user%d", url, u), "")
					if err != nil || st != 200 {
						errs <- fmt.Errorf("user%d: %d %v %v", u, st, b, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	_, url = startProcess(t, bin, dir)
	readCount := func() float64 {
		t.Helper()
		st, b, err := testkit.DoJSON("GET", url+"/v1/likes/video1", "")
		if err != nil || st != 200 {
			t.Fatalf("read: %d %v %v", st, b, err)
		}
		return b["count"].(float64)
	}
	if got := readCount(); got != users {
		t.Fatalf("after kill -9: %v likes, want %d", got, users)
	}
	for u := range 10 {
		if st, b, err := testkit.DoJSON("DELETE", fmt.Sprintf("%s/v1/likes/video1/user%d", url, u), ""); err != nil || st != 200 || b["changed"] != true {
			t.Fatalf("unlike user%d: %d %v %v", u, st, b, err)
		}
	}
	if got := readCount(); got != users-10 {
		t.Fatalf("after 10 unlikes: %v, want %d", got, users-10)
	}
	_, b, _ := testkit.DoJSON("GET", url+"/v1/likes/video1/user3", "")
	if b["liked"] != false {
		t.Fatalf("user3 still likes video1: %v", b)
	}
	_, b, _ = testkit.DoJSON("GET", url+"/v1/likes/video1/user999", "")
	if b["liked"] != true {
		t.Fatalf("user999 lost its like: %v", b)
	}
}
