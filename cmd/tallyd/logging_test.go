package main

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// Every command that logs takes --log-json (serve had it alone, so a
// deployment's other processes logged text beside its JSON); the bench
// modes that log (those with --log-level) too.
func TestLogJSONOnEveryCommandThatLogs(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "-h"},
		{"local", "-h"},
		{"dashboard", "-h"},
		{"lease-authority", "-h"},
		{"events", "sink", "-h"},
		{"bench", "likes", "-h"},
		{"bench", "events", "-h"},
		{"bench", "replication", "-h"},
		{"bench", "budget", "-h"},
		{"bench", "shards", "-h"},
	} {
		code, stdout, stderr := runArgs(t, args...)
		if code != 0 || !strings.Contains(stdout+stderr, "-log-json") || !strings.Contains(stdout+stderr, logJSONUsage) {
			t.Errorf("%q: exit %d, no -log-json in its help (stderr %q)", args, code, stderr)
		}
	}

	// What the flags give is what the logger writes: JSON lines with it,
	// text without.
	for _, withJSON := range []bool{true, false} {
		args := []string{"--log-level", "warn"}
		if withJSON {
			args = append(args, "--log-json")
		}
		lc, err := parseLocal(args, noEnv, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		dc, err := parseDashboard(append(args[2:], "--replica", "us/us-1=http://127.0.0.1:1"), noEnv, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		_, lo, err := parseLeaseAuthority(append(args, "--nats", "nats://127.0.0.1:1"), noEnv, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if lc.LogJSON != withJSON || dc.LogJSON != withJSON || lo.JSON != withJSON {
			t.Fatalf("%q: local %v, dashboard %v, lease-authority %v", args, lc.LogJSON, dc.LogJSON, lo.JSON)
		}
		var out strings.Builder
		log := newLogger(&out, lc.LogLevel, lc.LogJSON)
		log.Info("dropped below warn")
		log.Warn("a warning", "replica", "us-1")
		line := strings.TrimSpace(out.String())
		var m map[string]any
		isJSON := json.Unmarshal([]byte(line), &m) == nil
		if strings.Count(line, "\n") != 0 || isJSON != withJSON || (withJSON && (m["@message"] != "a warning" || m["replica"] != "us-1")) {
			t.Fatalf("--log-json %v: logged %q", withJSON, out.String())
		}
	}
}
