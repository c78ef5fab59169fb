package httpapi

import (
	"net/http"
	"strings"
	"testing"
)

// A write whose Content-Type is a form type, as a cross-site page can send
// without a preflight, is refused with 415 and changes nothing; JSON (with
// parameters), NDJSON for batches and no Content-Type at all are served.
func TestWritesRequireAJSONContentType(t *testing.T) {
	e := newEnv(t, envOpts{})
	refused := []struct{ method, path, ct, body string }{
		{"POST", "/v1/counters/views/incr", "text/plain", `{"by":5}`},
		{"POST", "/v1/counters/views/incr", "application/x-www-form-urlencoded", `{"by":5}`},
		{"POST", "/v1/counters/views/incr", "text/plain", ""},
		{"POST", "/v1/likes", "multipart/form-data; boundary=x", `{"item":"p","userId":"u"}`},
		{"POST", "/v1/events", "text/plain", `{"type":"incr","key":"views"}`},
		{"PUT", "/v1/likes/p/u", "text/plain", ""},
	}
	for _, c := range refused {
		r := e.send(req{method: c.method, path: c.path, body: strings.NewReader(c.body), header: map[string]string{"Content-Type": c.ct}})
		if r.status != http.StatusUnsupportedMediaType || !strings.Contains(r.raw, `"code":"unsupported_media_type"`) {
			t.Errorf("%s %s with %s: %d %s, want 415 unsupported_media_type", c.method, c.path, c.ct, r.status, r.raw)
		}
	}
	if v := e.counter("views"); v != 0 {
		t.Fatalf("refused writes changed the counter to %d", v)
	}
	if e.liked("p", "u") {
		t.Fatal("a refused like counted")
	}

	served := []struct{ method, path, ct, body string }{
		{"POST", "/v1/counters/views/incr", "application/json", `{"by":2}`},
		{"POST", "/v1/counters/views/incr", "application/json; charset=utf-8", `{"by":3}`},
		{"POST", "/v1/counters/views/incr", "", ""},
		{"POST", "/v1/events", "application/x-ndjson", `{"type":"incr","key":"views","by":4}`},
	}
	for _, c := range served {
		h := map[string]string{}
		if c.ct != "" {
			h["Content-Type"] = c.ct
		}
		r := e.send(req{method: c.method, path: c.path, body: strings.NewReader(c.body), header: h})
		if r.status != http.StatusOK {
			t.Errorf("%s %s with %q: %d %s, want 200", c.method, c.path, c.ct, r.status, r.raw)
		}
	}
	if v := e.counter("views"); v != 2+3+1+4 {
		t.Fatalf("counter %d after the served writes, want 10", v)
	}
	// Reads need no Content-Type, whatever a client sends.
	if r := e.send(req{method: "GET", path: "/v1/counters/views", header: map[string]string{"Content-Type": "text/plain"}}); r.status != http.StatusOK {
		t.Fatalf("GET with text/plain: %d", r.status)
	}
}
