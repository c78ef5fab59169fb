package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
	tallynode "github.com/tally-dev/tally/node"
)

// tallyd import backfills a file with the admin token: the walkthrough's
// like and increments days old count, two identical increment lines in
// different batches count twice, a second run changes nothing, a budget
// line is named on stderr and makes the exit code 1.
func TestImportFile(t *testing.T) {
	cfg := tallynode.DefaultConfig()
	cfg.Region, cfg.DataDir, cfg.Listen, cfg.AdminToken = "us", t.TempDir(), "127.0.0.1:0", "a-for-tests"
	cfg.Derive()
	n, err := tallynode.Start(context.Background(), cfg, tallynode.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	url := "http://" + n.Addr().String()
	twoDays := time.Now().Add(-48 * time.Hour).UnixMilli()
	incr := fmt.Sprintf(`{"type":"incr","key":"views:v123","by":2,"at":%d}`, twoDays)
	file := filepath.Join(t.TempDir(), "events.ndjson")
	lines := `{"videoId":"v123","userId":"u456","timestamp":1698765432}` + "\n" + incr + "\n\n" + incr + "\n" +
		`{"type":"incr","key":"views:v9","idempotency_key":"order-1","at":"2024-01-02T03:04:05Z"}` + "\n"
	if err := os.WriteFile(file, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runArgs(t, "import", "--url", url, file); code != 1 || !strings.Contains(stderr, "unauthorized") {
		t.Fatalf("without the admin token: exit %d, %s", code, stderr)
	}
	run := func(args ...string) (int, string, string) {
		var out, errOut strings.Builder
		c := &cli{stdout: &out, stderr: &errOut, getenv: tokenEnv}
		return c.run(context.Background(), args), out.String(), errOut.String()
	}
	count := func(path string) float64 {
		st, b, err := testkit.DoJSON("GET", url+path, "")
		if err != nil || st != 200 {
			t.Fatal(err)
		}
		v, _ := b["value"].(float64)
		if c, ok := b["count"].(float64); ok {
			v = c
		}
		return v
	}
	for i, want := range []string{"4 applied (0 duplicates)", "4 applied (3 duplicates)"} {
		// Batches of 2: the identical increments go in different requests.
		code, stdout, stderr := run("import", "--url", url, "--batch", "2", file)
		if code != 0 || !strings.Contains(stdout, "imported 4 lines in 2 batches: "+want+", 0 rejected") {
			t.Fatalf("run %d: exit %d, stdout %q, stderr %q", i, code, stdout, stderr)
		}
		if l, v, o := count("/v1/likes/v123"), count("/v1/counters/views:v123"), count("/v1/counters/views:v9"); l != 1 || v != 4 || o != 1 {
			t.Fatalf("run %d: likes %v, views %v and %v; want 1, 4, 1", i, l, v, o)
		}
	}
	if err := os.WriteFile(file, []byte(`{"type":"grant","key":"b","by":1}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := run("import", "--url", url, file); code != 1 || !strings.Contains(stderr, "line 1: grant events are not imported") {
		t.Fatalf("a budget line: exit %d, %s", code, stderr)
	}
	if code, _, stderr := run("import", "--url", url, "--batch", "0", file); code != 2 || !strings.Contains(stderr, "--batch") {
		t.Fatalf("--batch 0: exit %d, %s", code, stderr)
	}
}
