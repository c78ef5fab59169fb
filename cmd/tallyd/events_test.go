package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/internal/deploy"
)

func TestEventsSinkUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"events", "sink", "--regions", "us", "--to-dir", "x"}, "--nats is required"},
		{[]string{"events", "sink", "--nats", "nats://127.0.0.1:1", "--to-dir", "x"}, "--regions is required"},
		{[]string{"events", "sink", "--nats", "nats://127.0.0.1:1", "--regions", "us"}, "give --postgres or --to-dir"},
		{[]string{"events", "sink", "--nats", "nats://127.0.0.1:1", "--regions", "us", "--to-dir", "x", "--postgres", "y"}, "give --postgres or --to-dir"},
		{[]string{"events", "sink", "--nats", "nats://127.0.0.1:1", "--regions", "us", "--to-dir", "x", "--batch", "0"}, "--batch must be at least 1"},
		{[]string{"events", "sink", "--nats", "nats://127.0.0.1:1", "--regions", "us", "--to-dir", "x", "--retry-for", "0s"}, "--retry-for must be positive"},
		{[]string{"events", "sink", "--nats", "nats://127.0.0.1:1", "--regions", "us", "--to-dir", filepath.Join(t.TempDir(), "x"), "--durable", "a.b"}, `consumer name "a.b"`},
		{[]string{"events", "sink", "--nats", "nats://127.0.0.1:1", "--regions", "us,../x", "--to-dir", t.TempDir()}, `region "../x"`},
		{[]string{"events", "frob"}, "want the subcommand tail or sink"},
	} {
		code, stdout, stderr := runArgs(t, c.args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and one line with %q", c.args, code, stdout, stderr, c.want)
		}
	}
	code, stdout, _ := runArgs(t, "help", "events")
	if code != 0 || !strings.Contains(stdout, "tallyd events sink") {
		t.Errorf("help events: exit %d, %q", code, stdout)
	}
	code, stdout, _ = runArgs(t, "events", "sink", "-h")
	if code != 0 || !strings.Contains(stdout, "-postgres") || !strings.Contains(stdout, "-to-dir") {
		t.Errorf("events sink -h: exit %d, %q", code, stdout)
	}
}

// syncBuffer is a bytes.Buffer safe for a command's logger and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// `tallyd events sink --to-dir` against a local deployment, as an
// application without credentials: every like in both regions lands in
// its region's hour file, its metrics are served on --metrics-listen,
// and an interrupt stops it with exit 0.
func TestEventsSinkToDir(t *testing.T) {
	t.Parallel()
	cfg := deploy.DefaultConfig()
	cfg.Regions, cfg.DataDir, cfg.Milestones = []string{"us", "eu"}, t.TempDir(), ""
	d, err := deploy.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	urls := d.URLs()
	for i := range 20 {
		u := urls[i%2]
		testkit.WaitFor(t, 60*time.Second, func() error {
			if st, b, err := testkit.DoJSON("PUT", fmt.Sprintf("%s/v1/likes/post/u%d", u, i), ""); err != nil || st != 200 {
				return fmt.Errorf("like: %d %v %v", st, b, err)
			}
			return nil
		})
	}
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		c := &cli{stdout: &bytes.Buffer{}, stderr: &stderr, getenv: func(string) string { return "" }}
		done <- c.run(ctx, []string{"events", "sink", "--nats", d.Configs()[0].NATS, "--regions", "us,eu", "--to-dir", dir,
			"--metrics-listen", "127.0.0.1:0"})
	}()
	testkit.WaitFor(t, 60*time.Second, func() error {
		for _, r := range []string{"us", "eu"} {
			paths, _ := filepath.Glob(filepath.Join(dir, r, "*.jsonl"))
			n := 0
			for _, p := range paths {
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				n += bytes.Count(b, []byte(`"type":"like"`))
			}
			if n != 10 {
				return fmt.Errorf("%s: %d likes in %v, want 10; log: %s", r, n, paths, stderr.String())
			}
		}
		return nil
	})
	m := regexp.MustCompile(`serving metrics: address=(\S+)`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("no metrics address in the log: %s", stderr.String())
	}
	resp, err := http.Get("http://" + m[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`tally_sink_dead_letters_total{region="us"} 0`, `tally_sink_write_failures_total{region="eu"} 0`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s:\n%s", want, body)
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "sink stopped") {
		t.Errorf("no closing line in the log: %s", stderr.String())
	}
}
