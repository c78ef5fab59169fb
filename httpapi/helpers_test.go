package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

// env is one real replica on a real Pebble store in a temp dir, served by
// the Server over a real HTTP listener.
type env struct {
	t    testing.TB
	rep  *region.Replica
	srv  *Server
	ts   *httptest.Server
	logs *syncBuffer
}

type envOpts struct {
	hold       bool                 // start the replica with HoldWrites
	durability storage.Durability   // default fsync
	api        func(cfg *Config)    // adjust the Server config
	reg        *prometheus.Registry // shared with the replica
	noLists    bool                 // like lists off
	noLog      bool                 // event log off
	approx     []region.ApproxRule  // approximate counters (seed 1)
}

func newEnv(t testing.TB, o envOpts) *env {
	t.Helper()
	st, err := storage.Open(storage.Config{Dir: t.TempDir(), Durability: o.durability})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if o.reg == nil {
		o.reg = prometheus.NewRegistry()
	}
	rep, err := region.New(region.Config{
		Region: "us", Replica: "us-1", Store: st, HoldWrites: o.hold, Registerer: o.reg, LikeLists: !o.noLists, EventLog: !o.noLog,
		Approx: o.approx, Seed: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rep.Close() })
	logs := &syncBuffer{}
	cfg := Config{
		Replica:  rep,
		Registry: o.reg,
		Logger:   hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug}),
		Version:  "test",
	}
	if o.api != nil {
		o.api(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return &env{t: t, rep: rep, srv: srv, ts: ts, logs: logs}
}

// on returns e bound to a subtest's t, so its helpers fail the subtest.
func (e *env) on(t *testing.T) *env {
	c := *e
	c.t = t
	return &c
}

// resp is a decoded response.
type resp struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

// req is one request to send.
type req struct {
	method, path string
	body         io.Reader
	header       map[string]string
}

func (e *env) do(method, path, body string, header ...string) resp {
	e.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	h := map[string]string{}
	for i := 0; i+1 < len(header); i += 2 {
		h[header[i]] = header[i+1]
	}
	return e.send(req{method: method, path: path, body: r, header: h})
}

func (e *env) send(q req) resp {
	e.t.Helper()
	hr, err := http.NewRequestWithContext(context.Background(), q.method, e.ts.URL+q.path, q.body)
	if err != nil {
		e.t.Fatalf("%s %s: %v", q.method, q.path, err)
	}
	for k, v := range q.header {
		hr.Header.Set(k, v)
	}
	res, err := e.ts.Client().Do(hr)
	if err != nil {
		e.t.Fatalf("%s %s: %v", q.method, q.path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read body: %v", q.method, q.path, err)
	}
	out := resp{status: res.StatusCode, header: res.Header, raw: string(raw)}
	if q.path != "/metrics" {
		if ct := res.Header.Get("Content-Type"); ct != "application/json" {
			e.t.Errorf("%s %s: Content-Type %q, want application/json", q.method, q.path, ct)
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&out.body); err != nil {
			e.t.Fatalf("%s %s: response is not a JSON object: %v: %q", q.method, q.path, err, raw)
		}
	}
	return out
}

// ok asserts a 200 and returns the body.
func (r resp) ok(t *testing.T) map[string]any {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("status %d, want 200: %s", r.status, r.raw)
	}
	return r.body
}

// isError asserts an error response with the given status and code, in the
// {"error","code"} shape with a non-empty message.
func (r resp) isError(t *testing.T, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Errorf("status %d, want %d: %s", r.status, status, r.raw)
	}
	if got := r.body["code"]; got != code {
		t.Errorf("code %v, want %q: %s", got, code, r.raw)
	}
	if msg, _ := r.body["error"].(string); msg == "" {
		t.Errorf("error message empty: %s", r.raw)
	}
	if len(r.body) != 2 {
		t.Errorf("error body has %d fields, want exactly error and code: %s", len(r.body), r.raw)
	}
}

// num reads a JSON number field as int64.
func num(t *testing.T, m map[string]any, field string) int64 {
	t.Helper()
	n, ok := m[field].(json.Number)
	if !ok {
		t.Fatalf("field %q = %#v, want a number", field, m[field])
	}
	v, err := n.Int64()
	if err != nil {
		t.Fatalf("field %q: %v", field, err)
	}
	return v
}

func (e *env) likes(item string) int64 {
	e.t.Helper()
	rd, err := e.rep.Likes().Count(item)
	if err != nil {
		e.t.Fatal(err)
	}
	return rd.Value
}

func (e *env) counter(key string) int64 {
	e.t.Helper()
	rd, err := e.rep.Counters().Get(key)
	if err != nil {
		e.t.Fatal(err)
	}
	return rd.Value
}

func (e *env) liked(item, user string) bool {
	e.t.Helper()
	ok, err := e.rep.Likes().Liked(item, user)
	if err != nil {
		e.t.Fatal(err)
	}
	return ok
}

// syncBuffer is a bytes.Buffer safe for the logger and the test to share.
type syncBuffer struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
