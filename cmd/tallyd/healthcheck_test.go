package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHealthcheck: exit 0 only on a 200, 1 on any other answer or none,
// 2 on bad flags.
func TestHealthcheck(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	}))
	defer srv.Close()
	code, stdout, stderr := runArgs(t, "healthcheck", "--url", srv.URL+"/healthz")
	if code != 0 || !strings.Contains(stdout, `{"status":"ok"}`) {
		t.Fatalf("200: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	status = http.StatusServiceUnavailable
	if code, _, stderr := runArgs(t, "healthcheck", "--url", srv.URL+"/healthz"); code != 1 || !strings.Contains(stderr, "503") {
		t.Fatalf("503: exit %d, stderr %q, want 1 naming the status", code, stderr)
	}
	if code, _, stderr := runArgs(t, "healthcheck", "--url", srv.URL+"/elsewhere"); code != 1 || !strings.Contains(stderr, "404") {
		t.Fatalf("404: exit %d, stderr %q", code, stderr)
	}
	// A base URL, as every other command's --url, asks its /healthz.
	status = http.StatusOK
	for _, base := range []string{srv.URL, srv.URL + "/"} {
		if code, stdout, stderr := runArgs(t, "healthcheck", "--url", base); code != 0 || !strings.Contains(stdout, srv.URL+"/healthz:") {
			t.Fatalf("--url %s: exit %d, stdout %q, stderr %q", base, code, stdout, stderr)
		}
	}
	// Nothing listens: a closed port answers nothing.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/healthz"
	_ = ln.Close()
	if code, _, stderr := runArgs(t, "healthcheck", "--url", closed, "--timeout", "2s"); code != 1 || !strings.Contains(stderr, "healthcheck:") {
		t.Fatalf("closed port: exit %d, stderr %q", code, stderr)
	}
	for _, args := range [][]string{
		{"healthcheck", "--url", "localhost:8080/healthz"},
		{"healthcheck", "--timeout", "0s"},
		{"healthcheck", "extra"},
		{"healthcheck", "--ca", "/nonexistent/ca.pem"},
	} {
		if code, _, stderr := runArgs(t, args...); code != 2 {
			t.Errorf("%q: exit %d, want 2 (stderr %q)", args, code, stderr)
		}
	}
}

// With no --url, healthcheck asks the first replica of a default `tallyd
// local`, not the dashboard beside it on 8080.
func TestHealthcheckDefaultsToTheReplica(t *testing.T) {
	hc, err := parseHealthcheck(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	lc := defaultLocalConfig()
	want := fmt.Sprintf("http://127.0.0.1:%d/healthz", lc.Port)
	if hc.URL != want {
		t.Fatalf("default URL %s, want %s (tallyd local's first replica)", hc.URL, want)
	}
	if _, port, _ := net.SplitHostPort(lc.Dashboard.Addr); strings.HasSuffix(hc.URL, ":"+port+"/healthz") {
		t.Fatalf("default URL %s is the dashboard's port", hc.URL)
	}
}
