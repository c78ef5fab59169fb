package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// served is an in-process `tallyd serve`.
type served struct {
	addr   string
	cancel context.CancelFunc
	code   chan int
	stdout *lockedBuilder
	stderr *lockedBuilder
	hup    chan os.Signal // stands for SIGHUP
}

func startServe(t *testing.T, args ...string) *served {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{cancel: cancel, code: make(chan int, 1), stdout: &lockedBuilder{}, stderr: &lockedBuilder{}, hup: make(chan os.Signal, 1)}
	addrs := make(chan net.Addr, 1)
	c := &cli{stdout: s.stdout, stderr: s.stderr, getenv: noEnv, onListen: func(a net.Addr) { addrs <- a }, hup: s.hup}
	go func() {
		s.code <- c.run(ctx, append([]string{"serve", "--listen", "127.0.0.1:0", "--drain-delay", "0"}, args...))
	}()
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

// TestSIGHUPRotatesTokenWithoutAFailedRequest rotates the write token the
// way docs/operations.md says: add the new token, reload, move the client,
// remove the old token, reload. A client writing all along never fails.
func TestSIGHUPRotatesTokenWithoutAFailedRequest(t *testing.T) {
	path := writeFile(t, "tallyd.hcl", `write_token = "old-token"`)
	s := startServe(t, "--config", path, "--data", t.TempDir())
	base := "http://" + s.addr

	var token atomic.Value
	token.Store("old-token")
	var ok, failed atomic.Int64
	var lastErr atomic.Value
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			code, err := callWithToken("PUT", fmt.Sprintf("%s/v1/likes/p/u%d", base, i), token.Load().(string))
			if code == 200 {
				ok.Add(1)
			} else {
				failed.Add(1)
				lastErr.Store(fmt.Sprintf("%d %v", code, err))
			}
		}
	}()
	waitRequests := func(n int64) {
		t.Helper()
		at := ok.Load()
		testkit.WaitFor(t, 10*time.Second, func() error {
			if ok.Load() < at+n {
				return fmt.Errorf("client made %d requests", ok.Load()-at)
			}
			return nil
		})
	}
	reloadTo := func(content string, probe string, want int) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		s.hup <- syscall.SIGHUP
		testkit.WaitFor(t, 10*time.Second, func() error {
			if code, err := callWithToken("PUT", base+"/v1/likes/probe/p", probe); code != want {
				return fmt.Errorf("probe with %s: %d %v, want %d", probe, code, err, want)
			}
			return nil
		})
	}
	waitRequests(20)
	reloadTo(`write_token = "old-token new-token"`, "new-token", 200)
	waitRequests(20)
	token.Store("new-token")
	waitRequests(20)
	reloadTo(`write_token = "new-token"`, "old-token", 401)
	waitRequests(20)
	close(stop)
	<-done
	if failed.Load() != 0 {
		t.Fatalf("%d of %d requests failed during the rotation; last: %v", failed.Load(), failed.Load()+ok.Load(), lastErr.Load())
	}
	logs := s.stderr.String()
	if !strings.Contains(logs, "configuration reloaded") || !strings.Contains(logs, "write_token") {
		t.Fatalf("the reload is not logged with what changed:\n%s", logs)
	}
	for _, secret := range []string{"old-token", "new-token"} {
		if strings.Contains(logs, secret) || strings.Contains(s.stdout.String(), secret) {
			t.Fatalf("a token appears in the output:\n%s", logs)
		}
	}

	// A file that does not validate changes nothing, and says so.
	if err := os.WriteFile(path, []byte(`write_token = "new-token"`+"\n"+`log_level = "loud"`), 0o600); err != nil {
		t.Fatal(err)
	}
	s.hup <- syscall.SIGHUP
	testkit.WaitFor(t, 10*time.Second, func() error {
		if !strings.Contains(s.stderr.String(), "not reloaded; nothing changed") {
			return fmt.Errorf("no log of the refused reload")
		}
		return nil
	})
	if code, _ := callWithToken("PUT", base+"/v1/likes/probe/q", "new-token"); code != 200 {
		t.Fatalf("after a refused reload the token in force is refused: %d", code)
	}
}

// TestSIGTERMDrains: the first signal fails /readyz for the drain delay,
// while requests are still served, and then serve stops.
func TestSIGTERMDrains(t *testing.T) {
	t.Parallel() // waits out the drain delay
	s := startServe(t, "--data", t.TempDir(), "--drain-delay", "2s")
	base := "http://" + s.addr
	testkit.WaitFor(t, 10*time.Second, func() error {
		if code, _ := s.call(t, "GET", "/readyz"); code != 200 {
			return fmt.Errorf("readyz %d", code)
		}
		return nil
	})
	s.cancel()
	testkit.WaitFor(t, 2*time.Second, func() error {
		code, b := s.call(t, "GET", "/readyz")
		if code != 503 || b["code"] != "draining" {
			return fmt.Errorf("readyz %d %v", code, b)
		}
		return nil
	})
	if code, _ := callWithToken("PUT", base+"/v1/likes/p/u", ""); code != 200 {
		t.Fatalf("like while draining: %d", code)
	}
	if code := s.stop(t); code != 0 {
		t.Fatalf("exit %d: %s", code, s.stderr)
	}
	if !strings.Contains(s.stderr.String(), "draining") {
		t.Fatalf("drain not logged:\n%s", s.stderr)
	}
}

// callWithToken sends a request with a bearer token ("" for none) and
// returns its status.
func callWithToken(method, url, token string) (int, error) {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode, nil
}
