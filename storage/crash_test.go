package storage

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// crashChildEnv names the store dir of the child process that
// TestProcessCrashKeepsAckedBatches starts and SIGKILLs. crashModeEnv set to
// "ack-early" makes the child print each ack before committing (and dawdle
// in between): a deliberately broken child for the negative control.
const (
	crashChildEnv = "TALLY_CRASH_CHILD_DIR"
	crashModeEnv  = "TALLY_CRASH_CHILD_MODE"
)

const (
	crashWriters  = 8
	crashWantAcks = 2000
	crashMaxRun   = 2 * time.Second
)

// crashID and crashN name the i-th batch of writer w in the crash workload.
func crashID(w, i int) string { return fmt.Sprintf("g%d-%d", w, i) }
func crashN(w, i int) uint64  { return uint64(w)*1_000_000 + uint64(i) }
func parseCrashID(id string) (w, i int, err error) {
	a, b, ok := strings.Cut(strings.TrimPrefix(id, "g"), "-")
	if !ok || !strings.HasPrefix(id, "g") {
		return 0, 0, fmt.Errorf("bad id %q", id)
	}
	if w, err = strconv.Atoi(a); err != nil {
		return 0, 0, err
	}
	if i, err = strconv.Atoi(b); err != nil {
		return 0, 0, err
	}
	return w, i, nil
}

// TestCrashChild is the child half of TestProcessCrashKeepsAckedBatches: it
// commits workload batches from several goroutines with DurabilitySync and
// prints "ack <id>" after each Commit that returned nil, until it is killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("runs only as the child process of TestProcessCrashKeepsAckedBatches")
	}
	s, err := Open(Config{Dir: dir, Durability: DurabilitySync})
	if err != nil {
		fmt.Fprintf(os.Stderr, "child open: %v\n", err)
		os.Exit(2)
	}
	ackEarly := os.Getenv(crashModeEnv) == "ack-early"
	var mu sync.Mutex // one ack line at a time, written whole
	for w := range crashWriters {
		go func() {
			line := make([]byte, 0, 32)
			ack := func(id string) {
				line = append(append(append(line[:0], "ack "...), id...), '\n')
				mu.Lock()
				_, err := os.Stdout.Write(line)
				mu.Unlock()
				if err != nil { // the parent is gone
					os.Exit(3)
				}
			}
			for i := 0; ; i++ {
				id := crashID(w, i)
				if ackEarly {
					ack(id)
					time.Sleep(20 * time.Millisecond)
				}
				b := s.NewBatch()
				fillWorkload(b, id, crashN(w, i))
				if err := b.Commit(); err != nil {
					fmt.Fprintf(os.Stderr, "child commit %s: %v\n", id, err)
					os.Exit(2)
				}
				b.Close()
				if !ackEarly {
					ack(id)
				}
			}
		}()
	}
	// The parent kills us long before this; never exit cleanly on our own.
	time.Sleep(30 * time.Second)
	fmt.Fprintln(os.Stderr, "child: not killed within 30s")
	os.Exit(4)
}

// A real process crash: a child commits with fsync durability and is
// SIGKILLed mid-stream; every batch it acknowledged must be in the store,
// whole, when it is reopened.
func TestProcessCrashKeepsAckedBatches(t *testing.T) {
	if os.Getenv(crashChildEnv) != "" {
		t.Skip("in the child")
	}
	acked, lost := runCrash(t, "", crashWantAcks, t.Errorf)
	if lost > 0 {
		t.Errorf("%d of %d acknowledged batches lost", lost, acked)
	}
}

// Negative control: a child that acknowledges before committing is caught.
func TestProcessCrashDetectsEarlyAcks(t *testing.T) {
	if os.Getenv(crashChildEnv) != "" {
		t.Skip("in the child")
	}
	acked, lost := runCrash(t, "ack-early", 120, t.Logf)
	if lost == 0 {
		t.Fatalf("a child acking before Commit lost none of %d acked batches: the crash test cannot see lost writes", acked)
	}
	t.Logf("ack-early child: %d of %d acked batches missing, as expected", lost, acked)
}

// runCrash runs the child in mode until it has acked wantAcks batches (or
// crashMaxRun passed), SIGKILLs it, reopens its store and checks every acked
// batch. Missing acked batches are reported through lostf and counted.
func runCrash(t *testing.T, mode string, wantAcks int, lostf func(string, ...any)) (nAcked, lost int) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1", "-test.timeout=60s")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, crashModeEnv+"="+mode)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	var (
		mu    sync.Mutex
		acked = map[string]bool{}
		junk  []string
	)
	enough := make(chan struct{})
	readDone := make(chan error, 1)
	go func() {
		r := bufio.NewReader(stdout)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				// A partial last line was cut by the kill: the child had
				// not finished acknowledging, so it is not an ack.
				if errors.Is(err, io.EOF) {
					err = nil
				}
				readDone <- err
				return
			}
			mu.Lock()
			if id, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "ack "); ok {
				acked[id] = true
				if len(acked) == wantAcks {
					close(enough)
				}
			} else {
				junk = append(junk, line)
			}
			mu.Unlock()
		}
	}()

	start := time.Now()
	select {
	case <-enough:
	case <-time.After(crashMaxRun):
	case err := <-readDone:
		_ = cmd.Wait()
		t.Fatalf("child ended before it was killed (read err %v); stderr:\n%s", err, stderr.String())
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("kill: %v", err)
	}
	// Acks already in the pipe were printed before the kill, after their
	// commits returned: they count.
	if err := <-readDone; err != nil {
		t.Fatalf("reading child stdout: %v", err)
	}
	werr := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(werr, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die of SIGKILL: %v; stderr:\n%s", werr, stderr.String())
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("child acked %d batches in %v before SIGKILL", len(acked), time.Since(start).Round(time.Millisecond))
	if len(junk) > 0 {
		t.Errorf("child printed non-ack lines: %q", junk)
	}
	if len(acked) < 50 {
		t.Fatalf("only %d acks: the crash came too early to test anything; stderr:\n%s", len(acked), stderr.String())
	}

	// Acks of one writer come in order, so they form a prefix 0..last[w].
	last := make([]int, crashWriters)
	for w := range last {
		last[w] = -1
	}
	for id := range acked {
		w, i, err := parseCrashID(id)
		if err != nil || w < 0 || w >= crashWriters {
			t.Fatalf("bad ack id %q: %v", id, err)
		}
		last[w] = max(last[w], i)
	}
	for w, l := range last {
		for i := 0; i <= l; i++ {
			if !acked[crashID(w, i)] {
				t.Fatalf("writer %d acked %d but not %d", w, l, i)
			}
		}
	}

	s, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatalf("reopen after SIGKILL: %v", err)
	}
	defer s.Close()
	for w, l := range last {
		for i := 0; i <= l; i++ {
			if k := workloadKeys(t, s, crashID(w, i), crashN(w, i)); k != 4 {
				lost++
				if lost <= 10 {
					lostf("acknowledged batch %s: %d of 4 keys after the crash", crashID(w, i), k)
				}
			}
		}
		// Past the last ack, a batch may have been committed without its
		// ack being printed, but never torn; further ones were never tried.
		for i := l + 1; i <= l+3; i++ {
			if k := workloadKeys(t, s, crashID(w, i), crashN(w, i)); k != 0 && k != 4 {
				t.Errorf("unacknowledged batch %s torn: %d of 4 keys", crashID(w, i), k)
			}
		}
	}
	return len(acked), lost
}
