package httpapi

import (
	"bytes"
	"github.com/tally-dev/tally/frontdoor"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestBadInput sends malformed requests and checks each gets the right
// status and code and changes nothing (docs/architecture.md, Guarantees 9).
func TestBadInput(t *testing.T) {
	e := newEnv(t, envOpts{})
	// Known state: post1 liked by alice; counter c1 = 5 with key k1 used.
	e.do("PUT", "/v1/likes/post1/alice", "").ok(t)
	e.do("POST", "/v1/counters/c1/incr", `{"by":5,"idempotency_key":"k1"}`).ok(t)

	long := strings.Repeat("a", 129)
	huge := `{"by":1,"idempotency_key":"` + strings.Repeat("x", 1<<20) + `"}`
	hugeLike := `{"videoId":"post1","userId":"` + strings.Repeat("x", 1<<20) + `"}`
	const (
		bad     = http.StatusBadRequest
		tooBig  = http.StatusRequestEntityTooLarge
		methodX = http.StatusMethodNotAllowed
	)
	cases := []struct {
		name         string
		method, path string
		body         string
		header       []string
		status       int
		code         string
	}{
		// Ids in the path.
		{"empty item", "PUT", "/v1/likes//alice", "", nil, bad, frontdoor.CodeBadID},
		{"empty user", "PUT", "/v1/likes/post1/", "", nil, bad, frontdoor.CodeBadID},
		{"129-byte item", "PUT", "/v1/likes/" + long + "/alice", "", nil, bad, frontdoor.CodeBadID},
		{"129-byte user", "DELETE", "/v1/likes/post1/" + long, "", nil, bad, frontdoor.CodeBadID},
		{"slash in item", "PUT", "/v1/likes/post1%2Fx/alice", "", nil, bad, frontdoor.CodeBadID},
		{"slash in user", "DELETE", "/v1/likes/post1/alice%2F", "", nil, bad, frontdoor.CodeBadID},
		{"unicode user", "PUT", "/v1/likes/post1/%C3%A9", "", nil, bad, frontdoor.CodeBadID},
		{"space in user", "PUT", "/v1/likes/post1/al%20ice", "", nil, bad, frontdoor.CodeBadID},
		{"plus in user", "PUT", "/v1/likes/post1/al+ice", "", nil, bad, frontdoor.CodeBadID},
		{"NUL in item", "GET", "/v1/likes/post%00", "", nil, bad, frontdoor.CodeBadID},
		{"bad read id", "GET", "/v1/likes/%2F/alice", "", nil, bad, frontdoor.CodeBadID},
		{"empty counter key", "POST", "/v1/counters//incr", "", nil, bad, frontdoor.CodeBadID},
		{"bad counter key", "GET", "/v1/counters/c%3F1", "", nil, bad, frontdoor.CodeBadID},

		// Seed-style like bodies.
		{"empty body", "POST", "/v1/likes", "", nil, bad, frontdoor.CodeBadJSON},
		{"truncated JSON", "POST", "/v1/likes", `{"videoId":"post1","userId":"bob"`, nil, bad, frontdoor.CodeBadJSON},
		{"not JSON", "POST", "/v1/likes", `videoId=post1&userId=bob`, nil, bad, frontdoor.CodeBadJSON},
		{"array body", "POST", "/v1/likes", `[{"videoId":"post1","userId":"bob"}]`, nil, bad, frontdoor.CodeBadJSON},
		{"unknown field", "POST", "/v1/likes", `{"videoId":"post1","userId":"bob","when":1}`, nil, bad, frontdoor.CodeUnknownField},
		{"trailing garbage", "POST", "/v1/likes", `{"videoId":"post1","userId":"bob"} x`, nil, bad, frontdoor.CodeBadJSON},
		{"two objects", "POST", "/v1/likes", `{"videoId":"post1","userId":"bob"}{"videoId":"post1","userId":"carol"}`, nil, bad, frontdoor.CodeBadJSON},
		{"videoId and item", "POST", "/v1/likes", `{"videoId":"post1","item":"post1","userId":"bob"}`, nil, bad, frontdoor.CodeBadRequest},
		{"no item", "POST", "/v1/likes", `{"userId":"bob"}`, nil, bad, frontdoor.CodeMissingField},
		{"no user", "POST", "/v1/likes", `{"videoId":"post1"}`, nil, bad, frontdoor.CodeMissingField},
		{"number id", "POST", "/v1/likes", `{"videoId":7,"userId":"bob"}`, nil, bad, frontdoor.CodeBadJSON},
		{"bad body id", "POST", "/v1/likes", `{"videoId":"post 1","userId":"bob"}`, nil, bad, frontdoor.CodeBadID},
		{"empty body user", "POST", "/v1/likes", `{"videoId":"post1","userId":""}`, nil, bad, frontdoor.CodeBadID},
		{"huge like body", "POST", "/v1/likes", hugeLike, nil, tooBig, frontdoor.CodeBodyTooLarge},
		{"seed unlike, other item", "DELETE", "/v1/likes/post1", `{"videoId":"post2","userId":"alice"}`, nil, bad, frontdoor.CodeBadRequest},
		{"seed unlike, no user", "DELETE", "/v1/likes/post1", `{}`, nil, bad, frontdoor.CodeMissingField},
		{"seed unlike, no body", "DELETE", "/v1/likes/post1", ``, nil, bad, frontdoor.CodeBadJSON},
		{"seed unlike, unknown field", "DELETE", "/v1/likes/post1", `{"userId":"alice","x":1}`, nil, bad, frontdoor.CodeUnknownField},

		// Increment bodies.
		{"by too big", "POST", "/v1/counters/c1/incr", `{"by":1099511627777}`, nil, bad, frontdoor.CodeBadBy},
		{"by too small", "POST", "/v1/counters/c1/incr", `{"by":-1099511627777}`, nil, bad, frontdoor.CodeBadBy},
		{"by beyond int64", "POST", "/v1/counters/c1/incr", `{"by":1e30}`, nil, bad, frontdoor.CodeBadJSON},
		{"fractional by", "POST", "/v1/counters/c1/incr", `{"by":1.5}`, nil, bad, frontdoor.CodeBadJSON},
		{"string by", "POST", "/v1/counters/c1/incr", `{"by":"5"}`, nil, bad, frontdoor.CodeBadJSON},
		{"unknown incr field", "POST", "/v1/counters/c1/incr", `{"bye":1}`, nil, bad, frontdoor.CodeUnknownField},
		{"incr trailing garbage", "POST", "/v1/counters/c1/incr", `{"by":1}]`, nil, bad, frontdoor.CodeBadJSON},
		{"bad body key", "POST", "/v1/counters/c1/incr", `{"idempotency_key":"a/b"}`, nil, bad, frontdoor.CodeBadID},
		{"empty body key", "POST", "/v1/counters/c1/incr", `{"idempotency_key":""}`, nil, bad, frontdoor.CodeBadID},
		{"bad header key", "POST", "/v1/counters/c1/incr", ``, []string{"Idempotency-Key", "a b"}, bad, frontdoor.CodeBadID},
		{"keys differ", "POST", "/v1/counters/c1/incr", `{"idempotency_key":"k2"}`, []string{"Idempotency-Key", "k3"}, bad, frontdoor.CodeBadRequest},
		{"huge incr body", "POST", "/v1/counters/c1/incr", huge, nil, tooBig, frontdoor.CodeBodyTooLarge},

		// Routing.
		{"unknown route", "GET", "/v1/nope", "", nil, http.StatusNotFound, frontdoor.CodeNotFound},
		{"too many segments", "PUT", "/v1/likes/a/b/c", "", nil, http.StatusNotFound, frontdoor.CodeNotFound},
		{"PATCH a like", "PATCH", "/v1/likes/post1/alice", "", nil, methodX, frontdoor.CodeMethodNotAllowed},
		{"POST a like path", "POST", "/v1/likes/post1/alice", "", nil, methodX, frontdoor.CodeMethodNotAllowed},
		{"GET the seed route", "GET", "/v1/likes", "", nil, methodX, frontdoor.CodeMethodNotAllowed},
		{"PUT a counter", "PUT", "/v1/counters/c1", `{"by":1}`, nil, methodX, frontdoor.CodeMethodNotAllowed},
		{"GET incr", "GET", "/v1/counters/c1/incr", "", nil, methodX, frontdoor.CodeMethodNotAllowed},
		{"POST healthz", "POST", "/healthz", "", nil, methodX, frontdoor.CodeMethodNotAllowed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := e.on(t)
			r := e.do(c.method, c.path, c.body, c.header...)
			r.isError(t, c.status, c.code)
			e.assertUnchanged(t)
		})
	}
}

// assertUnchanged checks the state TestBadInput set up.
func (e *env) assertUnchanged(t *testing.T) {
	t.Helper()
	if n := e.likes("post1"); n != 1 {
		t.Errorf("post1 count %d, want 1", n)
	}
	if !e.liked("post1", "alice") {
		t.Error("alice no longer likes post1")
	}
	for _, u := range []string{"bob", "carol"} {
		if e.liked("post1", u) {
			t.Errorf("%s likes post1", u)
		}
	}
	if n := e.counter("c1"); n != 5 {
		t.Errorf("c1 = %d, want 5", n)
	}
}

func TestMethodNotAllowedListsAllow(t *testing.T) {
	e := newEnv(t, envOpts{})
	cases := map[string]string{
		"/v1/likes/p/u":       "GET, PUT, DELETE",
		"/v1/likes/p":         "GET, DELETE",
		"/v1/likes":           "POST",
		"/v1/counters/c/incr": "POST",
	}
	for path, want := range cases {
		r := e.do("PATCH", path, "")
		r.isError(t, http.StatusMethodNotAllowed, frontdoor.CodeMethodNotAllowed)
		if got := r.header.Get("Allow"); got != want {
			t.Errorf("PATCH %s: Allow %q, want %q", path, got, want)
		}
	}
}

// TestHugeChunkedBody sends an over-limit body without a Content-Length,
// so the limit trips while decoding rather than up front, including after
// a valid object (trailing whitespace still counts).
func TestHugeChunkedBody(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.do("POST", "/v1/counters/c1/incr", `{"by":5}`).ok(t)
	bodies := map[string]string{
		"inside value":    `{"by":1,"idempotency_key":"` + strings.Repeat("x", 1<<20) + `"}`,
		"after the value": `{"by":1}` + strings.Repeat(" ", 1<<20),
	}
	for name, body := range bodies {
		// A reader that is not a *strings.Reader hides the length, so the
		// client sends it chunked.
		r := e.send(req{method: "POST", path: "/v1/counters/c1/incr", body: io.MultiReader(bytes.NewReader([]byte(body)))})
		if r.status != http.StatusRequestEntityTooLarge || r.body["code"] != frontdoor.CodeBodyTooLarge {
			t.Errorf("%s: %d %s", name, r.status, r.raw)
		}
	}
	if n := e.counter("c1"); n != 5 {
		t.Fatalf("c1 = %d after refused bodies, want 5", n)
	}
}

// TestBodyAtLimit accepts a body of exactly MaxBodyBytes.
func TestBodyAtLimit(t *testing.T) {
	e := newEnv(t, envOpts{api: func(c *Config) { c.MaxBodyBytes = 64 }})
	body := `{"by":3}`
	body += strings.Repeat(" ", 64-len(body))
	e.do("POST", "/v1/counters/c/incr", body).ok(t)
	e.do("POST", "/v1/counters/c/incr", body+" ").isError(t, http.StatusRequestEntityTooLarge, frontdoor.CodeBodyTooLarge)
	if n := e.counter("c"); n != 3 {
		t.Fatalf("c = %d, want 3", n)
	}
}
