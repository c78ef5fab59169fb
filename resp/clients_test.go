package resp_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/node"
)

// The token the replica of TestRealClients requires for writes.
const clientsToken = "s3cret"

// Real Redis clients, as their users run them, against a replica's RESP
// port with a write token: redis-cli (Debian redis-tools), redis-py
// (Debian python3-redis, for Debian's /usr/bin/python3) and node-redis
// (npm redis, pinned in testdata/clients/node/package-lock.json). Each
// runs the same ordinary use: PING, NOAUTH then AUTH, INCR/INCRBY/GET, a
// GET of a missing key (nil), SADD/SCARD/SISMEMBER/SMEMBERS on a likes
// set, PFADD/PFCOUNT, MULTI/INCR/INCR/EXEC, SCAN with MATCH, EXISTS and
// TYPE, with its own key prefix; then go-redis reads what it wrote. A
// missing client is a failure, not a skip: .ci/run installs them, and
// redis-tools is installed here when running as root.
func TestRealClients(t *testing.T) {
	n := startNode(t, func(c *node.Config) { c.WriteToken = clientsToken })
	host, port, err := net.SplitHostPort(n.RESPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Run("redis-cli", func(t *testing.T) {
		redisCLI(t, host, port, "cli")
		wantWritten(t, n, "cli")
	})
	t.Run("redis-py", func(t *testing.T) {
		if out, err := exec.Command("/usr/bin/python3", "-c", "import redis").CombinedOutput(); err != nil {
			t.Fatalf("redis-py is missing for /usr/bin/python3 (%v: %s): install the Debian package python3-redis: sudo apt-get install python3-redis (.ci/run does)", err, strings.TrimSpace(string(out)))
		}
		runCheck(t, "redis-py", "/usr/bin/python3", filepath.Join("testdata", "clients", "redis_py_check.py"), host, port, clientsToken, "py")
		wantWritten(t, n, "py")
	})
	t.Run("node-redis", func(t *testing.T) {
		dir := npmCI(t, filepath.Join("testdata", "clients", "node"))
		runCheck(t, "node-redis", "node", filepath.Join(dir, "check.mjs"), host, port, clientsToken, "nd")
		wantWritten(t, n, "nd")
	})
}

// runCheck runs a client's check script, which exits non-zero on the first
// reply that differs from Redis's and ends with "<client> <version>: N
// checks ok".
func runCheck(t *testing.T, client, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s check: %v\nstdout:\n%s\nstderr:\n%s", client, err, out, stderr.String())
	}
	last := strings.TrimSpace(string(out))
	if !strings.HasPrefix(last, client+" ") || !strings.HasSuffix(last, " checks ok") {
		t.Fatalf("%s check exited 0 without its last line: %q\nstderr:\n%s", client, out, stderr.String())
	}
	t.Log(last)
}

// npmCI installs dir's locked packages (npm ci) when its node_modules is
// missing or older than package-lock.json, and returns dir.
func npmCI(t *testing.T, dir string) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed: install the Debian packages nodejs and npm: sudo apt-get install nodejs npm (.ci/run does)", tool)
		}
	}
	lock, err := os.Stat(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	// npm writes node_modules/.package-lock.json last, so it stands for a
	// complete install of the lock as it then was.
	if inst, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); err == nil && !inst.ModTime().Before(lock.ModTime()) {
		return dir
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
	return dir
}

// wantWritten reads, with go-redis, what a client's check wrote under
// prefix p, so a check that ran nothing cannot pass.
func wantWritten(t *testing.T, n *node.Node, p string) {
	t.Helper()
	ctx := context.Background()
	c := client(t, n, 2, "")
	if v, err := c.MGet(ctx, p+":views", p+":tx", p+":missing").Result(); err != nil || fmt.Sprint(v) != "[5 2 <nil>]" {
		t.Fatalf("%s:views, %s:tx, %s:missing: %v %v, want [5 2 <nil>]", p, p, p, v, err)
	}
	if v, err := c.SMembers(ctx, "likes:"+p+".post").Result(); err != nil || !slices.Equal(v, []string{"alice", "bob", "carol"}) {
		t.Fatalf("likes:%s.post: %v %v", p, v, err)
	}
	if v, err := c.PFCount(ctx, p+":visitors").Result(); err != nil || v != 3 {
		t.Fatalf("%s:visitors: %d %v", p, v, err)
	}
}

// redisCLI runs redis-cli's ordinary use: one command per run with its
// arguments, and the transaction and AUTH piped on its standard input.
// --no-raw makes it answer as on a terminal: (integer) 1, (nil), (error).
func redisCLI(t *testing.T, host, port, p string) {
	t.Helper()
	if out, err := exec.Command("bash", filepath.Join("..", "scripts", "need-tool.sh"), "redis-cli", "redis-tools").CombinedOutput(); err != nil {
		t.Fatalf("redis-cli: %v\n%s", err, out)
	}
	run := func(stdin string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "redis-cli", append([]string{"-h", host, "-p", port}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %q: %v\n%s", args, err, out)
		}
		return strings.TrimSuffix(string(out), "\n")
	}
	authed := []string{"--no-auth-warning", "-a", clientsToken}
	check := func(want string, args ...string) {
		t.Helper()
		if got := run("", append(append(slices.Clone(authed), "--no-raw"), args...)...); got != want {
			t.Fatalf("redis-cli %s: %q, want %q", strings.Join(args, " "), got, want)
		}
	}

	if got := run("", "--no-raw", "PING"); got != "PONG" {
		t.Fatalf("PING: %q", got)
	}
	// AUTH on the connection, after a write refused without it.
	got := run(fmt.Sprintf("INCR %s:views\nAUTH %s\nINCR %s:views\n", p, clientsToken, p), "--no-raw")
	want := "(error) NOAUTH authentication required: writes need AUTH with the write token (code unauthorized)\nOK\n(integer) 1"
	if got != want {
		t.Fatalf("INCR, AUTH, INCR on stdin:\n%s\nwant:\n%s", got, want)
	}
	check("(integer) 5", "INCRBY", p+":views", "4")
	check(`"5"`, "GET", p+":views")
	check("(nil)", "GET", p+":missing")

	item := "likes:" + p + ".post"
	check("(integer) 2", "SADD", item, "alice", "bob")
	check("(integer) 1", "SADD", item, "alice", "carol")
	check("(integer) 3", "SCARD", item)
	check("(integer) 1", "SISMEMBER", item, "bob")
	check("(integer) 0", "SISMEMBER", item, "dave")
	check("1) \"alice\"\n2) \"bob\"\n3) \"carol\"", "SMEMBERS", item)

	check("(integer) 1", "PFADD", p+":visitors", "u1", "u2", "u3")
	check("(integer) 0", "PFADD", p+":visitors", "u1")
	check("(integer) 3", "PFCOUNT", p+":visitors")

	got = run(fmt.Sprintf("MULTI\nINCR %s:tx\nINCR %s:tx\nEXEC\n", p, p), append(slices.Clone(authed), "--no-raw")...)
	if want := "OK\nQUEUED\nQUEUED\n1) (integer) 1\n2) (integer) 2"; got != want {
		t.Fatalf("MULTI, INCR, INCR, EXEC on stdin:\n%s\nwant:\n%s", got, want)
	}
	check(`"2"`, "GET", p+":tx")

	// SCAN by hand, cursor after cursor (a page may be empty before the
	// end), and redis-cli's own --scan loop. Unique counts are not listed.
	scan := func(pattern string) []string {
		var keys []string
		cursor := "0"
		for range 1000 {
			// Raw output: the next cursor, then one key per line.
			lines := strings.Split(run("", "SCAN", cursor, "MATCH", pattern), "\n")
			if _, err := strconv.ParseUint(lines[0], 10, 64); err != nil {
				t.Fatalf("SCAN %s MATCH %s: cursor %q", cursor, pattern, lines[0])
			}
			for _, k := range lines[1:] {
				if k != "" {
					keys = append(keys, k)
				}
			}
			if cursor = lines[0]; cursor == "0" {
				slices.Sort(keys)
				return keys
			}
		}
		t.Fatalf("SCAN MATCH %s did not end in 1000 pages", pattern)
		return nil
	}
	if got := scan(p + ":*"); !slices.Equal(got, []string{p + ":tx", p + ":views"}) {
		t.Fatalf("SCAN MATCH %s:*: %q", p, got)
	}
	if got := scan("likes:" + p + ".*"); !slices.Equal(got, []string{item}) {
		t.Fatalf("SCAN MATCH likes:%s.*: %q", p, got)
	}
	keys := strings.Split(run("", "--scan", "--pattern", p+":*"), "\n")
	slices.Sort(keys)
	if !slices.Equal(keys, []string{p + ":tx", p + ":views"}) {
		t.Fatalf("redis-cli --scan --pattern %s:*: %q", p, keys)
	}

	check("(integer) 1", "EXISTS", p+":views", p+":missing")
	check("string", "TYPE", p+":views")
	check("set", "TYPE", item)
	check("none", "TYPE", p+":missing")
}
