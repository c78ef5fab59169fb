package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/internal/base/testkit"
	tallynode "github.com/tally-dev/tally/node"
)

// localRun is an in-process `tallyd local` with free ports and a temp dir.
type localRun struct {
	out  *lockedBuilder
	urls []string // one per region, in region order
}

// startLocal runs `tallyd local` until the test ends, then checks it exits
// cleanly. It returns once every region listens.
func startLocal(t *testing.T, args ...string) *localRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan net.Addr, 8)
	run := &localRun{out: &lockedBuilder{}}
	c := &cli{stdout: run.out, stderr: &lockedBuilder{}, getenv: noEnv, onListen: func(a net.Addr) { addrs <- a }}
	code := make(chan int, 1)
	// Free ports for NATS too (local's default is 4222 on): tests that
	// start a deployment run side by side, and 4222 may be another's.
	args = append([]string{"local", "--port", "0", "--nats-port", "0", "--data", t.TempDir(), "--log-level", "error"}, args...)
	go func() { code <- c.run(ctx, args) }()
	t.Cleanup(func() {
		cancel()
		select {
		case got := <-code:
			if got != 0 {
				t.Errorf("local exited %d", got)
			}
		case <-time.After(30 * time.Second):
			t.Error("local did not stop")
		}
	})
	for range 3 {
		select {
		case a := <-addrs:
			run.urls = append(run.urls, "http://"+a.String())
		case got := <-code:
			code <- got
			t.Fatalf("local exited %d: %s", got, run.out)
		case <-time.After(90 * time.Second):
			t.Fatal("local did not start")
		}
	}
	return run
}

// local's flags become the deployment's config: ports follow --port, the
// allocator lives in the first region, settings reach every replica.
func TestLocalFlagsMakeTheDeployment(t *testing.T) {
	lc, err := parseLocal([]string{"--regions", "a,b", "--port", "9000", "--milestones", "every:5", "--durability", "none",
		"--data", "/tmp/x", "--limit", "write=user:5", "--limit", "scan=client:9", "--limit", "write=user:2"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfgs, err := lc.deployConfig(nil).NodeConfigs(func(r string) string { return "nats://" + r + ":4222" })
	if err != nil {
		t.Fatal(err)
	}
	if len(cfgs) != 2 {
		t.Fatalf("%d configs", len(cfgs))
	}
	for i, c := range cfgs {
		r := []string{"a", "b"}[i]
		if c.Region != r || c.Replica != r+"-1" || c.Listen != fmt.Sprintf("127.0.0.1:%d", 9000+i) ||
			c.NATS != "nats://"+r+":4222" || c.Milestones != "every:5" || c.AllocCluster != "a" || c.Durability != "none" ||
			c.DataDir != "/tmp/x/"+r+"-1" || len(c.Peers) != 1 {
			t.Errorf("region %s: %+v", r, c)
		}
		if c.RESPListen != fmt.Sprintf("127.0.0.1:%d", 6381+i) {
			t.Errorf("region %s: resp_listen %q", r, c.RESPListen)
		}
		if fmt.Sprint(c.Limits) != "[write=user:2 scan=client:9]" {
			t.Errorf("region %s: limits %v", r, c.Limits)
		}
		if len(c.Sequences) != 2 || c.Sequences[1].Name != "searches" {
			t.Errorf("region %s: default sequences %v", r, c.Sequences)
		}
	}
	// The first --sequence replaces the defaults; "" alone leaves none.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--sequence", "s=increments/q:*/every:9", "--sequence", "v=likes/v1/7"}, "[s=increments/q:*/every:9 v=likes/v1/7]"},
		{[]string{"--sequence", ""}, "[]"},
	} {
		lc, err := parseLocal(tc.args, noEnv, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, sc := range lc.deployConfig(nil).Sequences {
			got = append(got, sc.String())
		}
		if fmt.Sprint(got) != tc.want {
			t.Errorf("%q: sequences %v, want %s", tc.args, got, tc.want)
		}
	}
	if _, err := parseLocal([]string{"--sequence", "likes=likes/x/5"}, noEnv, io.Discard); err == nil {
		t.Error("a sequence named likes was accepted")
	}
	// Every replica gets the approx rules: hot: at 1% by default; the
	// first --approx replaces it, "" alone leaves none.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "[hot:=0.01]"},
		{[]string{"--approx", "views:=0.02", "--approx", "hits:=0.1"}, "[views:=0.02 hits:=0.1]"},
		{[]string{"--approx", ""}, "[]"},
	} {
		cfgs := localNodeConfigs(t, tc.args)
		for _, c := range cfgs {
			var got []string
			for _, ac := range c.Approx {
				got = append(got, ac.String())
			}
			if fmt.Sprint(got) != tc.want {
				t.Errorf("%q: %s's approx rules %v, want %s", tc.args, c.Replica, got, tc.want)
			}
		}
	}
	if _, err := parseLocal([]string{"--approx", "hot:=2"}, noEnv, io.Discard); err == nil {
		t.Error("an approx error of 2 was accepted")
	}
}

// --min-procs and --debug-listen, as serve has them: the default raises
// GOMAXPROCS to node's default, a negative one is a usage error before
// anything starts.
func TestLocalMinProcsAndDebugListen(t *testing.T) {
	lc, err := parseLocal(nil, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if lc.MinProcs != tallynode.DefaultConfig().MinProcs || lc.DebugListen != "" {
		t.Errorf("defaults: min procs %d, debug listen %q", lc.MinProcs, lc.DebugListen)
	}
	lc, err = parseLocal([]string{"--min-procs", "1", "--debug-listen", "127.0.0.1:6060"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if lc.MinProcs != 1 || lc.DebugListen != "127.0.0.1:6060" {
		t.Errorf("min procs %d, debug listen %q", lc.MinProcs, lc.DebugListen)
	}
	code, _, stderr := runArgs(t, "local", "--data", t.TempDir(), "--port", "0", "--min-procs", "-1")
	if code != 2 || !strings.Contains(stderr, "--min-procs -1") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}

// A replica setting local cannot run is a usage error, before anything
// starts.
func TestLocalInvalidReplicaSetting(t *testing.T) {
	code, _, stderr := runArgs(t, "local", "--data", t.TempDir(), "--port", "0", "--write-token", "has\ttab")
	if code != 2 || !strings.Contains(stderr, "write_token") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}

// --resp-port: the first region's RESP port, the others following; 0
// turns RESP off; with --port 0 and no --resp-port, free ports.
func TestLocalRESPPort(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--regions", "a,b"}, []string{"127.0.0.1:6381", "127.0.0.1:6382"}},
		{[]string{"--regions", "a,b", "--resp-port", "7000"}, []string{"127.0.0.1:7000", "127.0.0.1:7001"}},
		{[]string{"--regions", "a,b", "--resp-port", "0"}, []string{"", ""}},
		{[]string{"--regions", "a,b", "--port", "0"}, []string{"127.0.0.1:0", "127.0.0.1:0"}},
		{[]string{"--regions", "a,b", "--port", "0", "--resp-port", "7000"}, []string{"127.0.0.1:7000", "127.0.0.1:7001"}},
		{[]string{"--regions", "a,b", "--port", "0", "--resp-port", "0"}, []string{"", ""}},
	} {
		cfgs := localNodeConfigs(t, tc.args)
		for i, c := range cfgs {
			if c.RESPListen != tc.want[i] {
				t.Errorf("%v: region %s: resp_listen %q, want %q", tc.args, c.Region, c.RESPListen, tc.want[i])
			}
		}
	}
	if _, err := parseLocal([]string{"--resp-port", "65535"}, noEnv, io.Discard); err == nil || !strings.Contains(err.Error(), "--resp-port 65535") {
		t.Fatalf("--resp-port past 65535 for the third region: %v", err)
	}
}

// The banner prints each region's RESP address, and a like sent there
// with the Redis protocol is counted in every region.
func TestLocalServesRESP(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three regions")
	}
	t.Parallel()
	run := startLocal(t)
	found := regexp.MustCompile(`resp (\S+) `).FindAllStringSubmatch(run.out.String(), -1)
	if len(found) != 3 {
		t.Fatalf("banner names %d RESP addresses, want 3:\n%s", len(found), run.out)
	}
	for _, u := range run.urls {
		testkit.WaitFor(t, 30*time.Second, func() error {
			if st, _, err := testkit.DoJSON("GET", u+"/readyz", ""); err != nil || st != 200 {
				return fmt.Errorf("%s not ready: %d %v", u, st, err)
			}
			return nil
		})
	}
	ctx := context.Background()
	var clients []*redis.Client
	for _, m := range found {
		c := redis.NewClient(&redis.Options{Addr: m[1], Protocol: 2, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		clients = append(clients, c)
	}
	if v, err := clients[0].SAdd(ctx, "likes:post1", "alice").Result(); err != nil || v != 1 {
		t.Fatalf("SADD: %d %v", v, err)
	}
	testkit.WaitFor(t, 20*time.Second, func() error {
		for i, c := range clients {
			if n, err := c.SCard(ctx, "likes:post1").Result(); err != nil || n != 1 {
				return fmt.Errorf("%s: SCARD %d %v", found[i][1], n, err)
			}
		}
		return nil
	})
}

// localNodeConfigs is the node configs `tallyd local` with args would run.
func localNodeConfigs(t *testing.T, args []string) []tallynode.Config {
	t.Helper()
	lc, err := parseLocal(args, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfgs, err := lc.deployConfig(nil).NodeConfigs(func(r string) string { return "nats://" + r + ":4222" })
	if err != nil {
		t.Fatal(err)
	}
	return cfgs
}

// The PID file: <data>/tallyd.pid unless --pid-file says otherwise; it
// holds this process's id and is removed at the end only if it still
// does (a second deployment on the same data may have written its own).
func TestLocalPIDFile(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, filepath.Join("data", "tallyd.pid")},
		{[]string{"--data", "/srv/tally"}, "/srv/tally/tallyd.pid"},
		{[]string{"--pid-file", "/run/t.pid"}, "/run/t.pid"},
		{[]string{"--pid-file", ""}, ""},
	} {
		lc, err := parseLocal(c.args, noEnv, io.Discard)
		if err != nil || lc.PIDFile != c.want {
			t.Errorf("%q: pid file %q (%v), want %q", c.args, lc.PIDFile, err, c.want)
		}
	}
	file := filepath.Join(t.TempDir(), "sub", "tallyd.pid")
	remove, err := writePIDFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(file); err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("pid file holds %q (%v), want %d", b, err, os.Getpid())
	}
	remove()
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("after remove: %v", err)
	}
	remove, err = writePIDFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("1\n"), 0o644); err != nil { // another process took it over
		t.Fatal(err)
	}
	remove()
	if b, err := os.ReadFile(file); err != nil || string(b) != "1\n" {
		t.Fatalf("remove deleted another process's pid file: %q %v", b, err)
	}
}

// A second `tallyd local` on the data dir of a running one fails, naming
// the running process, and leaves its PID file alone: the README's stop
// command, kill $(cat data/tallyd.pid), still stops the running one. (It
// used to write its own id over it, fail on the store's lock and remove
// the file.)
func TestSecondLocalKeepsTheRunningPIDFile(t *testing.T) {
	data := t.TempDir()
	file := filepath.Join(data, "tallyd.pid")
	remove, err := writePIDFile(file) // the running deployment's
	if err != nil {
		t.Fatal(err)
	}
	defer remove()
	before, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runArgs(t, "local", "--data", data, "--port", "0", "--nats-port", "0", "--dashboard", "", "--log-level", "error")
	if code != 1 || !strings.Contains(stderr, "runs there already") || !strings.Contains(stderr, strings.TrimSpace(string(before))) {
		t.Fatalf("second local: exit %d, stderr %q; want 1 naming the running process", code, stderr)
	}
	if after, err := os.ReadFile(file); err != nil || string(after) != string(before) {
		t.Fatalf("the running deployment's pid file after a second local: %q (%v), want %q", after, err, before)
	}
	// Once the first is gone, the file is free again.
	remove()
	again, err := writePIDFile(file)
	if err != nil {
		t.Fatalf("after the first process let go: %v", err)
	}
	again()
}
