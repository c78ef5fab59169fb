package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// A config with problems of every sort, each on its own line of the file.
const badConfig = `region = "us"
port = 1
listen = "nohost"
peer "eu" {}
durability = "fast"
log_json = "maybe"
limit "write" {
  clients = 3
}
`

// validate reports every problem of a config at once, the file's with
// file:line, and exits 2; serve refuses the same config with the same
// problems.
func TestValidateReportsEveryProblem(t *testing.T) {
	path := writeFile(t, "bad.hcl", badConfig)
	code, stdout, stderr := runArgs(t, "validate", "--config", path)
	if code != 2 || stdout != "" {
		t.Fatalf("exit %d, stdout %q; want 2 and nothing", code, stdout)
	}
	want := []string{
		path + `:2 (port = 1): Unsupported argument: An argument named "port"`,
		path + `:4 (peer "eu" {}): Unsupported block type: Blocks of type "peer"`,
		path + `:6 (log_json = "maybe"): Unsuitable value type`,
		path + `:8 (clients = 3): Unsupported argument: An argument named "clients"`,
		`listen "nohost": want host:port`,
		`durability "fast": want fsync or none`,
		"tallyd: validate: 6 problems; tallyd serve refuses this config",
	}
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), stderr)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d: %q, want it to start with %q", i+1, lines[i], w)
		}
	}

	code, _, serveErr := runArgs(t, "serve", "--config", path)
	if code != 2 {
		t.Fatalf("serve: exit %d, want 2", code)
	}
	for _, w := range want[:len(want)-1] {
		if !strings.Contains(serveErr, w) {
			t.Errorf("serve's refusal %q lacks %q", serveErr, w)
		}
	}
}

// Flags and the environment count as they do for serve: a flag fixes a
// file's value, and a missing token is a problem.
func TestValidateFlagsAndEnvironment(t *testing.T) {
	path := writeFile(t, "c.hcl", "region = \"us\"\nlisten = \"nohost\"\n")
	if code, _, stderr := runArgs(t, "validate", "--config", path, "--listen", "127.0.0.1:9000"); code != 0 {
		t.Fatalf("a flag fixing the listen address: exit %d, %s", code, stderr)
	}
	if code, _, stderr := runArgs(t, "validate", "--config", path, "--nope"); code != 2 || !strings.Contains(stderr, "-nope") {
		t.Fatalf("an unknown flag: exit %d, %s", code, stderr)
	}
	if code, _, stderr := runArgs(t, "validate", "--config", filepath.Join(t.TempDir(), "none.hcl")); code != 2 || !strings.Contains(stderr, "none.hcl") {
		t.Fatalf("a missing file: exit %d, %s", code, stderr)
	}
	public := writeFile(t, "p.hcl", "listen = \"0.0.0.0:8080\"\ninsecure_listen = true\n")
	if code, _, stderr := runArgs(t, "validate", "--config", public); code != 2 || !strings.Contains(stderr, "without an admin token") ||
		!strings.Contains(stderr, "1 problem;") {
		t.Fatalf("a public listener without an admin token: exit %d, %s", code, stderr)
	}
	c := &cli{getenv: tokenEnv}
	var out, errOut strings.Builder
	c.stdout, c.stderr = &out, &errOut
	if code := c.run(context.Background(), []string{"validate", "--config", public}); code != 0 {
		t.Fatalf("with TALLY_ADMIN_TOKEN set: exit %d, %s", code, errOut.String())
	}
}

// Every shipped tallyd config validates clean, with the secrets their
// headers say come from the environment.
func TestShippedConfigsValidate(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "..", "configs", "*.hcl"))
	if len(files) < 4 {
		t.Fatalf("found %d configs", len(files))
	}
	for _, f := range files {
		c := &cli{getenv: tokenEnv}
		var out, errOut strings.Builder
		c.stdout, c.stderr = &out, &errOut
		if code := c.run(context.Background(), []string{"validate", "--config", f}); code != 0 || errOut.Len() > 0 ||
			!strings.HasPrefix(out.String(), "ok: replica ") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", f, code, out.String(), errOut.String())
		}
	}
}
