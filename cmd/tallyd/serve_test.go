package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/testkit"
)

// served is an in-process `tallyd serve`.
type served struct {
	addr   string
	cancel context.CancelFunc
	code   chan int
	stdout *lockedBuilder
	stderr *lockedBuilder
}

func startServe(t *testing.T, args ...string) *served {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{cancel: cancel, code: make(chan int, 1), stdout: &lockedBuilder{}, stderr: &lockedBuilder{}}
	addrs := make(chan net.Addr, 1)
	c := &cli{stdout: s.stdout, stderr: s.stderr, getenv: noEnv, onListen: func(a net.Addr) { addrs <- a }}
	go func() { s.code <- c.run(ctx, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.code:
		case <-time.After(10 * time.Second):
			t.Error("serve did not stop")
		}
	})
	select {
	case a := <-addrs:
		s.addr = a.String()
	case code := <-s.code:
		s.code <- code
		t.Fatalf("serve exited %d before listening: %s", code, s.stderr)
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not start listening")
	}
	return s
}

// stop cancels serve's context (as SIGTERM does) and returns its exit code.
func (s *served) stop(t *testing.T) int {
	t.Helper()
	s.cancel()
	select {
	case code := <-s.code:
		s.code <- code // for the cleanup
		return code
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
		return -1
	}
}

func (s *served) call(t *testing.T, method, path string) (int, map[string]any) {
	t.Helper()
	return testkit.CallJSON(t, method, "http://"+s.addr+path)
}

func TestServeLifecycle(t *testing.T) {
	dir := t.TempDir()
	s := startServe(t, "--data", dir, "--region", "eu")
	if !strings.Contains(s.stdout.String(), "listening on "+s.addr) {
		t.Errorf("stdout %q does not announce the address", s.stdout)
	}
	if code, b := s.call(t, "GET", "/healthz"); code != 200 || b["status"] != "ok" {
		t.Fatalf("healthz: %d %v", code, b)
	}
	if code, b := s.call(t, "GET", "/readyz"); code != 200 {
		t.Fatalf("readyz: %d %v", code, b)
	}
	if code, b := s.call(t, "PUT", "/v1/likes/post1/alice"); code != 200 || b["count"] != 1.0 {
		t.Fatalf("like: %d %v", code, b)
	}
	if code, b := s.call(t, "GET", "/v1/status"); code != 200 || b["replica"] != "eu-1" || b["durability"] != "fsync" {
		t.Fatalf("status: %d %v", code, b)
	}
	if code := s.stop(t); code != 0 {
		t.Fatalf("exit %d: %s", code, s.stderr)
	}
	logs := s.stderr.String()
	for _, step := range []string{"shutting down", "stopping HTTP server", "closing replica", "closing store", "stopped"} {
		if !strings.Contains(logs, step) {
			t.Errorf("shutdown log lacks %q:\n%s", step, logs)
		}
	}

	// The acknowledged like survived the restart.
	s = startServe(t, "--data", dir, "--region", "eu", "--durability", "none")
	if code, b := s.call(t, "GET", "/v1/likes/post1"); code != 200 || b["count"] != 1.0 {
		t.Fatalf("after restart: %d %v", code, b)
	}
	if !strings.Contains(s.stderr.String(), "durability none") {
		t.Errorf("no warning for durability none:\n%s", s.stderr)
	}
	if code := s.stop(t); code != 0 {
		t.Fatalf("exit %d: %s", code, s.stderr)
	}
}

// TestServeStartFailure: when the listener cannot bind, serve exits 1
// with the reason (that the store is released is node's test).
func TestServeStartFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	code, _, stderr := runArgs(t, "serve", "--data", dir, "--listen", ln.Addr().String(), "--log-level", "error")
	if code != 1 || !strings.Contains(stderr, "tallyd: listen on "+ln.Addr().String()) {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

// lockedBuilder is a strings.Builder safe for the server and the test.
type lockedBuilder struct {
	mu sync.Mutex // protects b
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServeDebugListen: --debug-listen serves the profiler on its own
// address, not on the API's, and stops with serve.
func TestServeDebugListen(t *testing.T) {
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	debugAddr := ln.Addr().String()
	ln.Close()
	s := startServe(t, "--data", t.TempDir(), "--debug-listen", debugAddr, "--write-token", "sekrit-token-1234567")
	if !strings.Contains(s.stdout.String(), "debug (pprof) on "+debugAddr) {
		t.Errorf("stdout %q does not announce the debug address", s.stdout)
	}
	get := func(url string) (int, string) {
		t.Helper()
		res, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var b strings.Builder
		if _, err := io.Copy(&b, res.Body); err != nil {
			t.Fatal(err)
		}
		return res.StatusCode, b.String()
	}
	if code, body := get("http://" + debugAddr + "/debug/pprof/goroutine?debug=1"); code != 200 || !strings.Contains(body, "goroutine profile") {
		t.Fatalf("debug goroutine profile: %d %.200s", code, body)
	}
	// The command line holds the token: pprof must not serve it.
	if code, body := get("http://" + debugAddr + "/debug/pprof/cmdline"); code == 200 || strings.Contains(body, "sekrit") {
		t.Errorf("debug cmdline: %d %q", code, body)
	}
	if code, _ := get("http://" + s.addr + "/debug/pprof/"); code != 404 {
		t.Errorf("API address serves /debug/pprof/: %d", code)
	}
	if code := s.stop(t); code != 0 {
		t.Fatalf("exit %d: %s", code, s.stderr)
	}
	if _, err := http.Get("http://" + debugAddr + "/debug/pprof/"); err == nil {
		t.Error("debug server still answers after serve stopped")
	}
}
