package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tally-dev/tally/api"
)

// The client's timeout header bounds the request: a malformed or absurd
// one answers 400 bad_timeout and changes nothing; a sane one is served.
func TestClientTimeoutHeader(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, v := range []string{"soon", "0", "-5", "1.5", "86400001", "99999999999999999999"} {
		r := e.send(req{method: "POST", path: "/v1/counters/views/incr", body: strings.NewReader(`{"by":5}`),
			header: map[string]string{api.TimeoutHeader: v}})
		if r.status != http.StatusBadRequest || !strings.Contains(r.raw, `"code":"bad_timeout"`) {
			t.Errorf("%s: %q answered %d %s, want 400 bad_timeout", api.TimeoutHeader, v, r.status, r.raw)
		}
	}
	if v := e.counter("views"); v != 0 {
		t.Fatalf("refused writes changed the counter to %d", v)
	}
	r := e.send(req{method: "POST", path: "/v1/counters/views/incr", body: strings.NewReader(`{"by":2}`),
		header: map[string]string{api.TimeoutHeader: "5000"}})
	if r.status != http.StatusOK {
		t.Fatalf("%s: 5000 answered %d %s", api.TimeoutHeader, r.status, r.raw)
	}
	if v := e.counter("views"); v != 2 {
		t.Fatalf("counter %d, want 2", v)
	}
}
