package main

import (
	"strings"
	"testing"
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
		{[]string{"admin", "retire", "--nats", "nats://127.0.0.1:1"}, "--holder is required"},
		{[]string{"admin", "retire", "--holder", "eu-2"}, "--nats is required"},
		{[]string{"admin", "retire", "--holder", "eu-2", "--nats", "x", "--user", "u"}, "--user and --password go together"},
		{[]string{"admin", "retire", "--holder", "eu-2", "--nats", "x", "--creds", "c", "--user", "u", "--password", "p"}, "not both"},
		{[]string{"admin", "retire", "--holder", "eu-2", "--nats", "x", "extra"}, `unexpected argument "extra"`},
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
	code, _, stderr := runArgs(t, "admin", "retire", "--holder", "eu-2", "--nats", "nats://127.0.0.1:1", "--timeout", "2s")
	if code != 1 || !strings.Contains(stderr, "connect to nats://127.0.0.1:1") {
		t.Fatalf("exit %d, stderr %q; want 1 and a connect error", code, stderr)
	}
}
