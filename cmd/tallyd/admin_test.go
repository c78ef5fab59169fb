package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tally-dev/tally/internal/base/testkit"

	"github.com/tally-dev/tally/shard"
)

// tallyd admin refuses bad invocations with exit code 2 and a message that
// says what is missing, before it connects anywhere. (alloc's
// TestRetireFreesAGoneHoldersLease covers what retire does on a real
// JetStream KV.)
func TestAdminUsageErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"admin"}, "want a subcommand"},
		{[]string{"admin", "frob"}, `unknown subcommand "frob"`},
		{[]string{"admin", "retire", "--nats", "nats://127.0.0.1:1"}, "--replica is required"},
		{[]string{"admin", "retire", "--replica", "eu-2"}, "--nats is required"},
		{[]string{"admin", "retire", "--holder", "eu-2", "--nats", "x", "--user", "u"}, "--user and --password go together"},
		{[]string{"admin", "retire", "--holder", "eu-2", "--nats", "x", "--creds", "c", "--user", "u", "--password", "p"}, "not both"},
		{[]string{"admin", "retire", "--holder", "eu-2", "--nats", "x", "extra"}, `unexpected argument "extra"`},
		{[]string{"admin", "shards"}, "want assign, show, move"},
		{[]string{"admin", "shards", "split"}, `unknown subcommand "split"`},
		{[]string{"admin", "shards", "move", "--region", "us", "--url", "http://x", "--nats", "x"}, "--config is required"},
		{[]string{"admin", "shards", "drain", "--config", "f.hcl", "--region", "us", "--url", "http://x", "--nats", "x"}, "--drain is required"},
		{[]string{"admin", "shards", "rebalance", "--config", "f.hcl", "--region", "us", "--nats", "x"}, "--url is required"},
		{[]string{"admin", "shards", "assign", "--region", "us", "--nats", "x"}, "--config is required"},
		{[]string{"admin", "shards", "assign", "--config", "f.hcl", "--nats", "x"}, "--region is required"},
		{[]string{"admin", "shards", "assign", "--config", "f.hcl", "--region", "us", "--copies", "-1", "--nats", "x"}, "--copies -1 < 0"},
		{[]string{"admin", "shards", "show"}, "--nats is required"},
		{[]string{"admin", "backup", "--to", "/b"}, "--url is required"},
		{[]string{"admin", "backup", "--url", "http://127.0.0.1:1"}, "--to is required"},
		{[]string{"admin", "backup", "--url", "ftp://x", "--to", "/b"}, "want http(s)://host:port"},
	}
	for _, c := range cases {
		code, _, stderr := runArgs(t, c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr, c.want)
		}
	}
}

// A NATS server that is not there is a runtime failure (exit 1), not a
// usage error.
func TestAdminRetireUnreachable(t *testing.T) {
	code, _, stderr := runArgs(t, "admin", "retire", "--replica", "eu-2", "--nats", "nats://127.0.0.1:1", "--timeout", "2s")
	if code != 1 || !strings.Contains(stderr, "connect to nats://127.0.0.1:1") {
		t.Fatalf("exit %d, stderr %q; want 1 and a connect error", code, stderr)
	}
}

// tallyd admin shards assign stores a region's map computed from a
// config's shards block when none is stored (again the same map:
// unchanged; another map: refused, the stored one kept), and show
// prints the stored maps with their revisions, as text or as
// GET /v1/shards answers them.
func TestAdminShardsAssignAndShow(t *testing.T) {
	srv := testkit.StartNATS(t, true)
	file := filepath.Join(t.TempDir(), "tallyd.hcl")
	if err := os.WriteFile(file, []byte(`
shards {
  copies = 1
  region "us" { replicas = ["us-1", "us-2"] }
  region "eu" { replicas = ["eu-1", "eu-2"] }
}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	url := srv.ClientURL()
	admin := func(wantCode int, want string, args ...string) string {
		t.Helper()
		code, stdout, stderr := runArgs(t, append([]string{"admin", "shards"}, append(args, "--nats", url)...)...)
		if code != wantCode || !strings.Contains(stdout+stderr, want) {
			t.Fatalf("admin shards %v: exit %d, stdout %q, stderr %q; want %d and %q", args, code, stdout, stderr, wantCode, want)
		}
		return stdout
	}
	admin(0, "no shard maps stored (no bucket tally_shards)", "show")
	admin(0, "assigned: the shard map of us is at revision 1", "assign", "--config", file, "--region", "us")
	admin(0, "unchanged: the shard map of us is at revision 1", "assign", "--config", file, "--region", "us")
	// Another map over a stored one is refused (issue #42): only a move
	// changes it, and the stored map stays at its revision.
	out := admin(1, "refused: the stored shard map of us (revision 1) differs", "assign", "--config", file, "--region", "us", "--copies", "2")
	if !strings.Contains(out, "tallyd admin shards move") {
		t.Fatalf("the refusal printed %q: want the move to run instead", out)
	}
	admin(0, "assigned: the shard map of eu is at revision 2", "assign", "--config", file, "--region", "eu", "--copies", "2")
	admin(2, `no region "xx"`, "assign", "--config", file, "--region", "xx")
	admin(0, "us: revision 1", "show")
	out = admin(0, `"revision":2`, "show", "--json", "--region", "eu")
	m, err := shard.Decode([]byte(strings.TrimSpace(out)))
	if err != nil || m.Revision != 2 || m.Copies != 2 {
		t.Fatalf("show --json: %q: revision %d, copies %d, %v", out, m.Revision, m.Copies, err)
	}
}
