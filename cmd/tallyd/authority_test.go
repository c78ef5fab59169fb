package main

import (
	"io"
	"strings"
	"testing"
)

// lease-authority's flags: --nats is required, the user's password comes
// from the environment, --creds replaces the user.
func TestParseLeaseAuthority(t *testing.T) {
	env := tokenEnvWith(envNATSPass, "pw")
	cfg, level, err := parseLeaseAuthority([]string{"--nats", "nats://n:4222", "--alloc-cluster", "us", "--alloc-replicas", "3", "--log-level", "debug"}, env, io.Discard)
	if err != nil || cfg.NATS != "nats://n:4222" || cfg.AllocCluster != "us" || cfg.AllocReplicas != 3 || level.Level != "debug" ||
		cfg.NATSUser != "tally-authority" || cfg.NATSPassword != "pw" {
		t.Fatalf("cfg %+v, level %+v, err %v", cfg, level, err)
	}
	cfg, _, err = parseLeaseAuthority([]string{"--nats", "nats://n:4222", "--creds", "/x.creds"}, env, io.Discard)
	if err != nil || cfg.NATSUser != "" || cfg.NATSPassword != "" || cfg.NATSCreds != "/x.creds" {
		t.Fatalf("--creds: cfg %+v, err %v", cfg, err)
	}
	for _, args := range [][]string{{}, {"--nats", "nats://n:4222", "extra"}, {"--nats", "nats://n:4222", "--bogus"}} {
		code, _, stderr := runArgs(t, append([]string{"lease-authority"}, args...)...)
		if code != 2 || !strings.HasPrefix(stderr, "tallyd: lease-authority: ") {
			t.Errorf("%q: exit %d, stderr %q, want 2", args, code, stderr)
		}
	}
}
