package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/dashboard"
)

// TestDashboardCommand: `tallyd dashboard` shows and drives a replica that
// runs elsewhere, sending its write token; a like through it reaches the
// replica, which refuses the same like without the token.
func TestDashboardCommand(t *testing.T) {
	s := startServe(t, "--data", t.TempDir(), "--region", "us", "--replica", "us-1", "--write-token", "w-dash")
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan net.Addr, 1)
	code := make(chan int, 1)
	c := &cli{stdout: &lockedBuilder{}, stderr: &lockedBuilder{}, getenv: tokenEnvWith(envWriteToken, "w-dash"), onListen: func(a net.Addr) { addrs <- a }}
	go func() {
		code <- c.run(ctx, []string{"dashboard", "--listen", "127.0.0.1:0", "--replica", "us/us-1=http://" + s.addr})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-code:
		case <-time.After(10 * time.Second):
			t.Error("dashboard did not stop")
		}
	})
	var base string
	select {
	case a := <-addrs:
		base = "http://" + a.String()
	case n := <-code:
		t.Fatalf("dashboard exited %d: %s", n, c.stderr)
	case <-time.After(10 * time.Second):
		t.Fatal("dashboard did not listen")
	}
	req, _ := http.NewRequest("POST", base+"/api/like?region=us&item=post1&user=alice", nil)
	req.Header.Set(dashboard.Header, "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var like map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&like)
	resp.Body.Close()
	if resp.StatusCode != 200 || like["count"] != 1.0 {
		t.Fatalf("like through the dashboard: %d %v", resp.StatusCode, like)
	}
	if n, b := s.call(t, "GET", "/v1/likes/post1"); n != 200 || b["count"] != 1.0 {
		t.Fatalf("the replica: %d %v", n, b)
	}
	if n, _ := s.call(t, "PUT", "/v1/likes/post1/bob"); n != 401 {
		t.Fatalf("a like without the token: %d, want 401 (the dashboard sent the token)", n)
	}
}

func TestDashboardCommandUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"dashboard"}, "at least one --replica"},
		{[]string{"dashboard", "--replica", "us=http://x:1"}, "REGION/REPLICA=URL"},
		{[]string{"dashboard", "--replica", "us/us-1=x:1"}, "http://"},
		{[]string{"dashboard", "--replica", "us/us-1=http://x:1", "--listen", "8080"}, "--listen"},
		{[]string{"dashboard", "--replica", "us/us-1=http://x:1", "extra"}, "unexpected argument"},
	} {
		n, _, stderr := runArgs(t, c.args...)
		if n != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d, stderr %q, want 2 and %q", c.args, n, stderr, c.want)
		}
	}
}

// tokenEnvWith is an environment with one variable set.
func tokenEnvWith(k, v string) func(string) string {
	return func(key string) string {
		if key == k {
			return v
		}
		return ""
	}
}
