package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	tallynode "github.com/tally-dev/tally/node"
)

func noEnv(string) string { return "" }

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaults(t *testing.T) {
	cfg, err := loadConfig(nil, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Region != "local" || cfg.Replica != "local-1" || cfg.DataDir != filepath.Join("data", "local-1") ||
		cfg.Listen != "127.0.0.1:8080" || cfg.Durability != "fsync" || cfg.LogLevel != "info" ||
		cfg.MaxBodyBytes != 1<<20 || cfg.WriteToken != "" {
		t.Fatalf("%+v", cfg)
	}
	// The replica default follows the region, the data dir the replica.
	cfg, err = loadConfig([]string{"--region", "eu"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Replica != "eu-1" || cfg.DataDir != filepath.Join("data", "eu-1") {
		t.Fatalf("%+v", cfg)
	}
}

func TestFileThenFlags(t *testing.T) {
	path := writeFile(t, "t.hcl", `
region         = "eu"
replica        = "eu-7"
data_dir       = "/var/lib/tally"
listen         = "0.0.0.0:9000"
durability     = "none"
write_token    = "from-file"
insecure_open_admin = true
tls_cert       = "/etc/tally/api.pem"
tls_key        = "/etc/tally/api-key.pem"
drain_delay    = "2s"
limit "write" {
  client = 100
  user   = 2.5
}
log_level      = "debug"
log_json       = true
max_body_bytes = "2048" # a string converts, as with gohcl
request_timeout  = "3s"
shutdown_timeout = "5s"
windows          = "1s:1h,1m:7d"
event_time_past  = "2m"
window "views:" {
  kind   = "counters"
  levels = "1m:30d,1h:forever"
}
`)
	cfg, err := loadConfig([]string{"--config", path}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := tallynode.Config{
		Region: "eu", Replica: "eu-7", DataDir: "/var/lib/tally", Listen: "0.0.0.0:9000", MinProcs: 2,
		Durability: "none", WriteToken: "from-file", InsecureOpenAdmin: true, LogLevel: "debug", LogJSON: true,
		TLSCert: "/etc/tally/api.pem", TLSKey: "/etc/tally/api-key.pem", DrainDelay: "2s",
		Limits: []tallynode.LimitConfig{{Class: "write", Client: 100, User: 2.5}},
		// The file sets neither: the defaults.
		RESPMaxConnections:           tallynode.DefaultConfig().RESPMaxConnections,
		RESPMaxConnectionsPerAddress: tallynode.DefaultConfig().RESPMaxConnectionsPerAddress,
		MaxBodyBytes:                 2048, RequestTimeout: "3s", ShutdownTimeout: "5s", IdempotencyTTL: "24h", LikeLists: true,
		EventLog: true, EventRetention: "168h", EventLogKeep: "168h",
		Windows: "1s:1h,1m:7d", EventTimePast: "2m", EventTimeFuture: "1m", TrendingCapacity: 128, UniquesWindows: "1h:8d,1d:400d",
		WindowRules:   []tallynode.WindowRuleConfig{{Prefix: "views:", Kind: "counters", Levels: "1m:30d,1h:forever"}},
		FlushInterval: "10ms", AntiEntropyInterval: "1s", PeerTimeout: "5s", RecoveryTimeout: "10s",
		AllocBucket: "tally_alloc", AllocReplicas: 1, LeaseTTL: "4s", LeaseReclaimAfter: "0",
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("file:\n got %+v\nwant %+v", cfg, want)
	}
	wc, err := cfg.WindowConfig()
	if err != nil {
		t.Fatal(err)
	}
	if len(wc.Rules) != 2 || wc.Past != 2*time.Minute || len(wc.Rules[1].Levels) != 2 || wc.Rules[1].Levels[1].Keep != 0 ||
		wc.Rules[1].Levels[0].Keep != 30*24*time.Hour || wc.Rules[0].Levels[0].Width != time.Second {
		t.Fatalf("window config: %+v", wc)
	}

	// Explicit flags win over the file, in any order relative to --config;
	// flags not given leave the file's values, even where the file's value
	// differs from the flag's default.
	cfg, err = loadConfig([]string{"--listen", "127.0.0.1:1", "--config", path, "--durability", "fsync", "--log-json=false"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want.Listen, want.Durability, want.LogJSON = "127.0.0.1:1", "fsync", false
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("flags:\n got %+v\nwant %+v", cfg, want)
	}
}

func TestTokensFromEnv(t *testing.T) {
	path := writeFile(t, "t.hcl", `write_token = "file"`)
	e := env(map[string]string{envWriteToken: "env-w", envAdminToken: "env-a"})
	cfg, err := loadConfig([]string{"--config", path}, e, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.WriteToken != "env-w" || cfg.AdminToken != "env-a" {
		t.Fatalf("env must override the file: %+v", cfg)
	}
	cfg, err = loadConfig([]string{"--config", path, "--write-token", "flag"}, e, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.WriteToken != "flag" || cfg.AdminToken != "env-a" {
		t.Fatalf("flag must override env: %+v", cfg)
	}
}

// TestSecretsFromFiles: each secret serve reads from the environment
// may come from the file its _FILE variable names instead (a mounted
// Kubernetes Secret, one NATS password a pod), newline trimmed; a flag
// still wins; setting both, or naming a missing file, is a config
// problem that names the variable and never shows the secret.
func TestSecretsFromFiles(t *testing.T) {
	pw := writeFile(t, "nats-password", "pod-own-password\n")
	wt := writeFile(t, "write-token", "file-w")
	at := writeFile(t, "admin-token", "file-a\n")
	rt := writeFile(t, "read-token", "file-r\n")
	e := env(map[string]string{
		envNATSPass + "_FILE": pw, envWriteToken + "_FILE": wt, envAdminToken + "_FILE": at, envReadToken + "_FILE": rt,
	})
	cfg, err := loadConfig([]string{"--region", "us", "--replica", "us-1", "--nats", "nats://127.0.0.1:4222", "--nats-user", "tally-us-1"}, e, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NATSPassword != "pod-own-password" || cfg.WriteToken != "file-w" || cfg.AdminToken != "file-a" || cfg.ReadToken != "file-r" {
		t.Fatalf("secrets from files: password %q, write %q, admin %q, read %q", cfg.NATSPassword, cfg.WriteToken, cfg.AdminToken, cfg.ReadToken)
	}
	cfg, err = loadConfig([]string{"--write-token", "flag"}, e, io.Discard)
	if err != nil || cfg.WriteToken != "flag" {
		t.Fatalf("a flag must override the file: %q, %v", cfg.WriteToken, err)
	}

	for name, kv := range map[string]map[string]string{
		"both":    {envNATSPass: "env-secret", envNATSPass + "_FILE": pw},
		"missing": {envWriteToken + "_FILE": filepath.Join(t.TempDir(), "absent")},
		"empty":   {envAdminToken + "_FILE": writeFile(t, "empty", "\n")},
	} {
		_, err := loadConfig(nil, env(kv), io.Discard)
		var ue *usageError
		if !errors.As(err, &ue) {
			t.Fatalf("%s: %v, want a usage error", name, err)
		}
		var v string
		for k := range kv {
			v = strings.TrimSuffix(k, "_FILE")
		}
		if !strings.Contains(err.Error(), v+"_FILE") || strings.Contains(err.Error(), "env-secret") || strings.Contains(err.Error(), "pod-own-password") {
			t.Errorf("%s: %v: want the variable %s_FILE named and no secret shown", name, err, v)
		}
	}

	// The lease authority reads its password the same way.
	la, _, err := parseLeaseAuthority([]string{"--nats", "nats://n:4222"}, env(map[string]string{envNATSPass + "_FILE": pw}), io.Discard)
	if err != nil || la.NATSPassword != "pod-own-password" {
		t.Fatalf("lease-authority: password %q, %v", la.NATSPassword, err)
	}
	if _, _, err := parseLeaseAuthority([]string{"--nats", "nats://n:4222"}, env(map[string]string{envNATSPass + "_FILE": filepath.Join(t.TempDir(), "absent")}), io.Discard); err == nil {
		t.Fatal("lease-authority: a missing password file was accepted")
	}
}

func TestJSONConfigFile(t *testing.T) {
	path := writeFile(t, "t.json", `{"region": "ap", "max_body_bytes": 10}`)
	cfg, err := loadConfig([]string{"--config", path}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Region != "ap" || cfg.Replica != "ap-1" || cfg.MaxBodyBytes != 10 {
		t.Fatalf("%+v", cfg)
	}
}

// TestExampleConfig keeps configs/tallyd.hcl loadable and valid.
func TestExampleConfig(t *testing.T) {
	cfg, err := loadConfig([]string{"--config", filepath.Join("..", "..", "configs", "tallyd.hcl")}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Region != "us" || cfg.Replica != "us-1" {
		t.Fatalf("%+v", cfg)
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		file string // if set, written and passed as --config
		want []string
	}{
		{"unknown flag", []string{"--nope"}, "", []string{"flag provided but not defined: -nope"}},
		{"bad flag value", []string{"--max-body-bytes", "lots"}, "", []string{"max-body-bytes"}},
		{"stray argument", []string{"extra"}, "", []string{`unexpected argument "extra"`}},
		{"missing file", []string{"--config", "/nonexistent/tallyd.hcl"}, "", []string{"/nonexistent/tallyd.hcl"}},
		{"HCL syntax", nil, `region = `, []string{"c.hcl:1 (region =): "}},
		{"unknown attribute", nil, "region = \"us\"\nport = 1\n", []string{"c.hcl:2 (port = 1): ", `"port"`}},
		{"wrong type", nil, `log_json = "maybe"`, []string{"log_json", "bool"}},
		{"block", nil, "peer \"eu\" {}\n", []string{"c.hcl:1 ("}},
		{"file and values at once", nil, "listen = \"nohost\"\nnope = 1\n", []string{"c.hcl:2 (nope = 1): ", `listen "nohost"`}},
		{
			"every problem at once", []string{
				"--region", "a/b", "--replica", "", "--listen", "nohost", "--durability", "fast",
				"--log-level", "loud", "--max-body-bytes", "0", "--request-timeout", "soon",
				"--shutdown-timeout", "-1s", "--write-token", "has\ttab",
			}, "",
			[]string{
				`region "a/b"`, `replica "a/b-1"`, `listen "nohost"`, `durability "fast"`, `log_level "loud"`,
				"max_body_bytes 0", `request_timeout "soon"`, `shutdown_timeout "-1s"`, "write_token",
			},
		},
		{"bad port", []string{"--listen", "127.0.0.1:99999"}, "", []string{"bad port"}},
		{"negative idempotency ttl", []string{"--idempotency-ttl", "-1h"}, "", []string{`idempotency_ttl "-1h"`}},
		{"bad debug listen", []string{"--debug-listen", "localhost"}, "", []string{`debug_listen "localhost"`}},
		{"bad region in file", nil, `region = "é"`, []string{`region "é"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := c.args
			if c.file != "" {
				args = append([]string{"--config", writeFile(t, "c.hcl", c.file)}, args...)
			}
			_, err := loadConfig(args, noEnv, io.Discard)
			var uerr *usageError
			if !errors.As(err, &uerr) {
				t.Fatalf("want a usage error, got %v", err)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("message spans lines: %q", msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q lacks %q", msg, w)
				}
			}
		})
	}
}

func TestServeHelp(t *testing.T) {
	var out strings.Builder
	_, err := loadConfig([]string{"-h"}, noEnv, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err %v, want flag.ErrHelp", err)
	}
	for _, w := range []string{"usage: tallyd serve", "-data", "-listen", "-durability", "-config", "TALLY_WRITE_TOKEN"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("help lacks %q:\n%s", w, out.String())
		}
	}
}

func TestMilestoneSettings(t *testing.T) {
	cfg, err := loadConfig([]string{"--replica", "local-1", "--nats", "nats://127.0.0.1:4222", "--milestones", "1000,10^k", "--alloc-cluster", "us", "--alloc-replicas", "3", "--lease-ttl", "2s"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Milestones != "1000,10^k" || cfg.AllocCluster != "us" || cfg.AllocReplicas != 3 || cfg.LeaseTTL != "2s" {
		t.Fatalf("%+v", cfg)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--milestones", "1000"}, "milestones are set but nats is empty"},
		{[]string{"--nats", "nats://x:1", "--milestones", "ten"}, `milestones "ten"`},
		{[]string{"--nats", "nats://x:1", "--milestones", "10", "--alloc-replicas", "2"}, "alloc_replicas 2"},
		{[]string{"--nats", "nats://x:1", "--milestones", "10", "--lease-ttl", "0s"}, "lease_ttl"},
	} {
		_, err := loadConfig(tc.args, noEnv, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want it to mention %q", tc.args, err, tc.want)
		}
	}
}

// idempotency_ttl defaults to 24h and takes 0 (keep forever).
func TestIdempotencyTTLConfig(t *testing.T) {
	for _, c := range []struct {
		args []string
		want time.Duration
	}{{nil, 24 * time.Hour}, {[]string{"--idempotency-ttl", "0"}, 0}, {[]string{"--idempotency-ttl", "90m"}, 90 * time.Minute}} {
		cfg, err := loadConfig(c.args, noEnv, io.Discard)
		if err != nil || duration(cfg.IdempotencyTTL) != c.want {
			t.Errorf("%v: ttl %q, %v; want %v", c.args, cfg.IdempotencyTTL, err, c.want)
		}
	}
}

// lease_reclaim_after comes from the file or the flag into the replica's
// config, off ("0") by default, and must exceed lease_ttl.
func TestLeaseReclaimAfterConfig(t *testing.T) {
	cfg, err := loadConfig(nil, noEnv, io.Discard)
	if err != nil || duration(cfg.LeaseReclaimAfter) != 0 {
		t.Fatalf("default: %q, %v", cfg.LeaseReclaimAfter, err)
	}
	path := writeFile(t, "r.hcl", "lease_ttl = \"2s\"\nlease_reclaim_after = \"10m\"\n")
	cfg, err = loadConfig([]string{"--config", path}, noEnv, io.Discard)
	if err != nil || cfg.LeaseReclaimAfter != "10m" || cfg.LeaseTTL != "2s" {
		t.Fatalf("from file: %+v, %v", cfg, err)
	}
	cfg, err = loadConfig([]string{"--config", path, "--lease-reclaim-after", "1h"}, noEnv, io.Discard)
	if err != nil || cfg.LeaseReclaimAfter != "1h" {
		t.Fatalf("flag over file: %q, %v", cfg.LeaseReclaimAfter, err)
	}
	_, err = loadConfig([]string{"--config", path, "--lease-reclaim-after", "2s"}, noEnv, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "lease_reclaim_after") {
		t.Fatalf("reclaim_after = lease_ttl accepted: %v", err)
	}
}

// Approximate counters: approx blocks in the file, --approx flags adding
// a rule or replacing the file's rule for the same prefix; bad rules in
// either place are usage errors naming the rule.
func TestApproxSettings(t *testing.T) {
	path := writeFile(t, "a.hcl", `
approx "views:" {
  error = 0.01
}
approx "" {
  error = 0.05
}
`)
	cfg, err := loadConfig([]string{"--config", path}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := []tallynode.ApproxConfig{{Prefix: "views:", Error: 0.01}, {Prefix: "", Error: 0.05}}
	if !reflect.DeepEqual(cfg.Approx, want) {
		t.Fatalf("from file: %+v", cfg.Approx)
	}
	cfg, err = loadConfig([]string{"--config", path, "--approx", "views:=0.002", "--approx", "hits:=0.1"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want = []tallynode.ApproxConfig{{Prefix: "views:", Error: 0.002}, {Prefix: "", Error: 0.05}, {Prefix: "hits:", Error: 0.1}}
	if !reflect.DeepEqual(cfg.Approx, want) {
		t.Fatalf("flags over file: %+v", cfg.Approx)
	}
	if cfg, err := loadConfig(nil, noEnv, io.Discard); err != nil || cfg.Approx != nil {
		t.Fatalf("default: %+v, %v", cfg.Approx, err)
	}
	for _, tc := range []struct {
		args []string
		file string
		want string
	}{
		{[]string{"--approx", "views:"}, "", "PREFIX=ERROR"},
		{[]string{"--approx", "views:=0.9"}, "", `approx "views:": error 0.9`},
		{nil, "approx \"views:\" {\n  error = 2\n}\n", `approx "views:": error 2`},
		{nil, "approx \"views:\" {}\n", `"error" is required`},
		{nil, "approx \"a\" {\n  error = 0.01\n}\napprox \"a\" {\n  error = 0.02\n}\n", `approx "a" is configured twice`},
		{[]string{"--nats", "nats://x:1", "--replica", "us-1", "--approx", "search:=0.01", "--sequence", "s=increments/search:*/10^k"}, "",
			"a numbered counter must be exact"},
	} {
		args := tc.args
		if tc.file != "" {
			args = append([]string{"--config", writeFile(t, "bad.hcl", tc.file)}, args...)
		}
		_, err := loadConfig(args, noEnv, io.Discard)
		var uerr *usageError
		if !errors.As(err, &uerr) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %q: error %v, want a usage error mentioning %q", tc.args, tc.file, err, tc.want)
		}
	}
}

// A --limit flag replaces the file's limit of its class and adds others.
func TestLimitFlagsOverrideTheFile(t *testing.T) {
	path := writeFile(t, "t.hcl", `
limit "write" {
  client = 100
  user   = 5
}
limit "scan" {
  client = 10
}
`)
	cfg, err := loadConfig([]string{"--config", path, "--limit", "write=client:7", "--limit", "read=client:3,client_burst:9"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range cfg.Limits {
		got = append(got, l.String())
	}
	if want := "[write=client:7 scan=client:10 read=client:3,client_burst:9]"; fmt.Sprint(got) != want {
		t.Fatalf("limits %v, want %s", got, want)
	}
	cfg, err = loadConfig([]string{"--trusted-proxies", " 10.0.0.0/8, ,192.0.2.1"}, noEnv, io.Discard)
	if err != nil || fmt.Sprint(cfg.TrustedProxies) != "[10.0.0.0/8 192.0.2.1]" {
		t.Fatalf("--trusted-proxies: %v %v", cfg.TrustedProxies, err)
	}
	if _, err := loadConfig([]string{"--limit", "write=clients:7"}, noEnv, io.Discard); err == nil || !strings.Contains(err.Error(), "clients") {
		t.Fatalf("a bad --limit: %v", err)
	}
}

// Hot blocks in the file, a --hot flag replacing the file's block of its
// prefix; a bad block is a usage error.
func TestHotSettings(t *testing.T) {
	path := writeFile(t, "h.hcl", "hot \"viral:\" {\n  splits = 3\n}\nhot \"live:\" {\n  splits = 4\n}\n")
	cfg, err := loadConfig([]string{"--config", path, "--hot", "live:=6"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := []tallynode.HotConfig{{Prefix: "viral:", Splits: 3}, {Prefix: "live:", Splits: 6}}
	if !reflect.DeepEqual(cfg.Hot, want) {
		t.Fatalf("hot blocks %+v", cfg.Hot)
	}
	_, err = loadConfig([]string{"--config", writeFile(t, "bad.hcl", "hot \"viral:\" {\n  splits = 1\n}\n")}, noEnv, io.Discard)
	var uerr *usageError
	if !errors.As(err, &uerr) || !strings.Contains(err.Error(), "splits 1") {
		t.Fatalf("splits 1: %v", err)
	}
}
