package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	tallynode "github.com/tally-dev/tally/node"
)

// tallyd admin backup has a running replica write its backup, with the
// admin token from the environment, and says where; a directory that
// exists is refused.
func TestAdminBackup(t *testing.T) {
	cfg := tallynode.DefaultConfig()
	cfg.Region, cfg.DataDir, cfg.Listen, cfg.AdminToken = "us", t.TempDir(), "127.0.0.1:0", "a-for-tests"
	cfg.Derive()
	n, err := tallynode.Start(context.Background(), cfg, tallynode.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	url := "http://" + n.Addr().String()
	dir := filepath.Join(t.TempDir(), "b1")

	if code, _, stderr := runArgs(t, "admin", "backup", "--url", url, "--to", dir); code != 1 || !strings.Contains(stderr, "unauthorized") {
		t.Fatalf("without the admin token: exit %d, %s", code, stderr)
	}
	run := func(args ...string) (int, string, string) {
		var out, errOut strings.Builder
		c := &cli{stdout: &out, stderr: &errOut, getenv: tokenEnv}
		return c.run(context.Background(), args), out.String(), errOut.String()
	}
	code, stdout, stderr := run("admin", "backup", "--url", url, "--to", dir)
	if code != 0 || !strings.HasPrefix(stdout, "backup of us-1 (region us) taken at ") || !strings.Contains(stdout, dir) {
		t.Fatalf("backup: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, _, stderr := run("admin", "backup", "--url", url, "--to", dir); code != 1 || !strings.Contains(stderr, "exists") {
		t.Fatalf("into an existing directory: exit %d, %s", code, stderr)
	}
}
