package httpapi

import (
	"bufio"
	"github.com/tally-dev/tally/frontdoor"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// head sends HEAD path on a raw connection and returns the status and
// every byte after the headers (none is the point: a probe that sends
// HEAD gets the status alone).
func head(t *testing.T, e *env, path string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, "HEAD "+path+" HTTP/1.1\r\nHost: tally\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, &http.Request{Method: http.MethodHead})
	if err != nil {
		t.Fatalf("HEAD %s: %v", path, err)
	}
	rest, err := io.ReadAll(br) // the server closes after the headers
	if err != nil {
		t.Fatalf("HEAD %s: reading after the headers: %v", path, err)
	}
	return res.StatusCode, string(rest)
}

// HEAD on the health routes answers the status GET would, with no body
// (it was 405): load balancers and probes that send HEAD work.
func TestHeadOnHealthRoutes(t *testing.T) {
	e := newEnv(t, envOpts{hold: true})
	if st, body := head(t, e, "/healthz"); st != http.StatusOK || body != "" {
		t.Fatalf("HEAD /healthz: %d %q, want 200 and no body", st, body)
	}
	if st, body := head(t, e, "/readyz"); st != http.StatusServiceUnavailable || body != "" {
		t.Fatalf("HEAD /readyz while holding writes: %d %q, want 503 and no body", st, body)
	}
	e.rep.AcceptWrites()
	if st, body := head(t, e, "/readyz"); st != http.StatusOK || body != "" {
		t.Fatalf("HEAD /readyz: %d %q, want 200 and no body", st, body)
	}
	// GET is unchanged, and another method still names both in Allow.
	e.do("GET", "/healthz", "").ok(t)
	r := e.do("POST", "/healthz", "")
	r.isError(t, http.StatusMethodNotAllowed, frontdoor.CodeMethodNotAllowed)
	if allow := r.header.Get("Allow"); !strings.Contains(allow, "GET") || !strings.Contains(allow, "HEAD") {
		t.Fatalf("POST /healthz: Allow %q, want GET and HEAD", allow)
	}
}
