package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tally-dev/tally/internal/base/version"
)

// runArgs runs tallyd in-process and returns the exit code and output.
func runArgs(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut strings.Builder
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestRunUsageErrors(t *testing.T) {
	dir := t.TempDir()
	badHCL := filepath.Join(dir, "bad.hcl")
	if err := os.WriteFile(badHCL, []byte("listen = 8080\nnope = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{nil, ""}, // usage on stderr
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"serve", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"serve", "--durability", "sometimes"}, `durability "sometimes": want fsync or none`},
		{[]string{"serve", "--region", "a b", "--listen", "x"}, `region "a b"`},
		{[]string{"serve", "--config", badHCL}, "nope"},
		{[]string{"serve", "--config", filepath.Join(dir, "missing.hcl")}, "missing.hcl"},
		{[]string{"version", "extra"}, "unexpected argument"},
		{[]string{"help", "frobnicate"}, `unknown command "frobnicate"`},
	}
	for _, c := range cases {
		code, stdout, stderr := runArgs(t, c.args...)
		if code != 2 {
			t.Errorf("%q: exit %d, want 2 (stderr %q)", c.args, code, stderr)
		}
		if stdout != "" {
			t.Errorf("%q: unexpected stdout %q", c.args, stdout)
		}
		if c.want == "" {
			if !strings.Contains(stderr, "usage: tallyd") {
				t.Errorf("%q: no usage on stderr: %q", c.args, stderr)
			}
			continue
		}
		if !strings.HasPrefix(stderr, "tallyd: ") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%q: want one line \"tallyd: ...\", got %q", c.args, stderr)
		}
		if !strings.Contains(stderr, c.want) {
			t.Errorf("%q: stderr %q lacks %q", c.args, stderr, c.want)
		}
	}
}

func TestRunHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		code, stdout, stderr := runArgs(t, args...)
		if code != 0 || !strings.Contains(stdout, "serve") || !strings.Contains(stdout, "version") || stderr != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	for _, args := range [][]string{{"help", "serve"}, {"serve", "-h"}} {
		code, stdout, _ := runArgs(t, args...)
		if code != 0 || !strings.Contains(stdout, "-listen") {
			t.Errorf("%q: exit %d, stdout %q", args, code, stdout)
		}
	}
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		code, stdout, _ := runArgs(t, args...)
		if code != 0 || !strings.HasPrefix(stdout, "tallyd "+version.Version()+" (revision ") {
			t.Errorf("%q: exit %d, stdout %q", args, code, stdout)
		}
	}
}

// TestRunRuntimeFailure: a valid config that cannot run exits 1.
func TestRunRuntimeFailure(t *testing.T) {
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runArgs(t, "serve", "--data", notADir, "--listen", "127.0.0.1:0", "--log-level", "error")
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr %q", code, stderr)
	}
	last := stderr[strings.LastIndex(strings.TrimSuffix(stderr, "\n"), "\n")+1:]
	if !strings.HasPrefix(last, "tallyd: ") || !strings.Contains(last, notADir) {
		t.Fatalf("last stderr line %q does not name the failure", last)
	}
}
