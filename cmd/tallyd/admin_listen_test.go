package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// adminRoutes are every admin route of the API (httpapi's
// TestAdminRoutesAllGuarded checks the list is whole).
var adminRoutes = []struct{ method, path, body string }{
	{"PUT", "/v1/blocks/alice", ""},
	{"DELETE", "/v1/blocks/alice", ""},
	{"GET", "/v1/blocks/alice", ""},
	{"GET", "/v1/blocks", ""},
	{"GET", "/v1/audit", ""},
	{"POST", "/v1/admin/import", `{"type":"incr","key":"k"}`},
	{"PUT", "/v1/types/video", `{"owner":"o"}`},
	{"PUT", "/v1/admin/budgets/handoff", `{"to":"eu-1"}`},
	{"GET", "/v1/admin/budgets/handoff", ""},
	{"DELETE", "/v1/admin/budgets/handoff", ""},
	{"GET", "/v1/admin/links", ""},
	{"PUT", "/v1/admin/links/us/eu", `{"up":false}`},
}

// serveRefused runs `tallyd serve args` and returns its exit code and
// stderr; a serve that starts listening instead fails t (and is stopped).
func serveRefused(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &lockedBuilder{}
	listening := make(chan net.Addr, 1)
	code := make(chan int, 1)
	c := &cli{stdout: io.Discard, stderr: stderr, getenv: noEnv, onListen: func(a net.Addr) { listening <- a }}
	go func() { code <- c.run(ctx, append([]string{"serve", "--drain-delay", "0"}, args...)) }()
	select {
	case got := <-code:
		return got, stderr.String()
	case a := <-listening:
		cancel()
		<-code
		t.Fatalf("serve %v started listening on %s", args, a)
	case <-time.After(10 * time.Second):
		t.Fatal("serve neither listened nor exited")
	}
	return -1, ""
}

// httpsJSON sends one request with an optional bearer token over c and
// decodes the JSON object answered.
func httpsJSON(t *testing.T, c *http.Client, method, url, body, token string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: %d %q is not a JSON object: %v", method, url, res.StatusCode, raw, err)
	}
	return res.StatusCode, out
}

// The attack of issue #27: `tallyd serve` on every interface, with TLS
// and a write token but no admin token, served PUT /v1/blocks/alice and
// /v1/audit to anyone and told them so in /v1/status. Now it refuses to
// start; with an admin token every admin route refuses an anonymous
// caller with a JSON 401 over the real listener, and /v1/status shows
// the auth posture to the admin only.
func TestServePublicListenerNeedsAdminToken(t *testing.T) {
	// Its wrong tokens are slowed (one a second after the first ten, per
	// server): about 20 s of waiting, beside the other tests rather than
	// before them. Its server and data directory are its own.
	t.Parallel()
	certs := testkit.NewCerts(t)
	public := []string{"--listen", "0.0.0.0:0", "--tls-cert", certs.Cert, "--tls-key", certs.Key, "--write-token", "wt"}

	if code, stderr := serveRefused(t, append([]string{"--data", t.TempDir()}, public...)...); code == 0 ||
		!strings.Contains(stderr, "without an admin token") {
		t.Fatalf("a public listener without an admin token: exit %d, stderr %q", code, stderr)
	}

	s := startServe(t, append([]string{"--data", t.TempDir(), "--admin-token", "at"}, public...)...)
	_, port, err := net.SplitHostPort(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	if host, _, _ := net.SplitHostPort(s.addr); net.ParseIP(host) == nil || !net.ParseIP(host).IsUnspecified() {
		t.Fatalf("listening on %s, want every interface", s.addr)
	}
	base := "https://127.0.0.1:" + port
	c := certs.Client(t, false)
	for _, r := range adminRoutes {
		for _, tok := range []string{"", "wrong", "wt"} {
			code, b := httpsJSON(t, c, r.method, base+r.path, r.body, tok)
			if code != http.StatusUnauthorized || b["code"] != "unauthorized" || b["error"] == "" {
				t.Errorf("%s %s with token %q: %d %v", r.method, r.path, tok, code, b)
			}
		}
	}
	if code, b := httpsJSON(t, c, "GET", base+"/v1/blocks/alice", "", "at"); code != 200 || b["blocked"] != false {
		t.Fatalf("anonymous PUT blocked alice, or the admin cannot read: %d %v", code, b)
	}
	for _, tok := range []string{"", "wt"} {
		code, b := httpsJSON(t, c, "GET", base+"/v1/status", "", tok)
		if code != 200 || b["auth"] != nil || b["edge"] != nil {
			t.Fatalf("status with token %q shows the auth posture: %d %v", tok, code, b)
		}
	}
	if code, b := httpsJSON(t, c, "GET", base+"/v1/status", "", "at"); code != 200 || b["auth"] == nil || b["edge"] == nil {
		t.Fatalf("status for the admin: %d %v", code, b)
	}
	if code, b := httpsJSON(t, c, "PUT", base+"/v1/blocks/alice", "", "at"); code != 200 || b["blocked"] != true {
		t.Fatalf("admin PUT /v1/blocks/alice: %d %v", code, b)
	}
}

// The opt-out is explicit, loudly named and logged; /v1/status still
// tells nobody that admin routes are open.
func TestServeInsecureOpenAdminOptOut(t *testing.T) {
	certs := testkit.NewCerts(t)
	s := startServe(t, "--data", t.TempDir(), "--listen", "0.0.0.0:0", "--tls-cert", certs.Cert, "--tls-key", certs.Key,
		"--write-token", "wt", "--insecure-open-admin")
	if !strings.Contains(s.stderr.String(), "insecure_open_admin") {
		t.Errorf("no warning for insecure_open_admin:\n%s", s.stderr)
	}
	_, port, _ := net.SplitHostPort(s.addr)
	base := "https://127.0.0.1:" + port
	c := certs.Client(t, false)
	if code, b := httpsJSON(t, c, "PUT", base+"/v1/blocks/alice", "", ""); code != 200 || b["blocked"] != true {
		t.Fatalf("opted-out admin route: %d %v", code, b)
	}
	if code, b := httpsJSON(t, c, "GET", base+"/v1/status", "", ""); code != 200 || b["auth"] != nil || b["edge"] != nil {
		t.Fatalf("status shows the auth posture: %d %v", code, b)
	}
}
