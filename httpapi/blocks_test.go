package httpapi

import (
	"github.com/tally-dev/tally/frontdoor"
	"net/http"
	"strings"
	"testing"
)

func TestBlockRoutes(t *testing.T) {
	e := newEnv(t, envOpts{api: func(c *Config) { c.WriteToken, c.AdminToken = "w-secret", "a-secret" }})
	admin := []string{"Authorization", "Bearer a-secret"}
	write := []string{"Authorization", "Bearer w-secret"}
	e.do(http.MethodPut, "/v1/likes/post/u", "", write...).ok(t)
	e.do(http.MethodPut, "/v1/likes/post/v", "", write...).ok(t)

	// Admin only: a write token does not block.
	e.do(http.MethodPut, "/v1/blocks/u", "", write...).isError(t, http.StatusUnauthorized, frontdoor.CodeUnauthorized)
	e.do(http.MethodGet, "/v1/blocks/u", "", write...).isError(t, http.StatusUnauthorized, frontdoor.CodeUnauthorized)
	if n := e.likes("post"); n != 2 {
		t.Fatalf("count %d after a refused block, want 2", n)
	}

	b := e.do(http.MethodPut, "/v1/blocks/u", "", admin...).ok(t)
	if b["blocked"] != true || b["changed"] != true || b["replica"] != "us-1" || b["hlc"] == nil || b["at"] == nil {
		t.Fatalf("block answer %v", b)
	}
	if n := e.likes("post"); n != 1 {
		t.Fatalf("count %d after blocking u, want 1", n)
	}
	e.do(http.MethodPut, "/v1/likes/other/u", "", write...).isError(t, http.StatusForbidden, frontdoor.CodeUserBlocked)
	e.do(http.MethodDelete, "/v1/likes/post/u", "", write...).isError(t, http.StatusForbidden, frontdoor.CodeUserBlocked)
	e.do(http.MethodPost, "/v1/likes", `{"videoId":"other","userId":"u"}`, append(write, "Content-Type", "application/json")...).
		isError(t, http.StatusForbidden, frontdoor.CodeUserBlocked)

	// In a batch, the blocked user's events are refused alone.
	ev := e.do(http.MethodPost, "/v1/events", `[{"type":"like","item":"x","user":"u"},{"type":"like","item":"x","user":"v"}]`,
		append(write, "Content-Type", "application/json")...)
	if ev.status != http.StatusOK || !strings.Contains(ev.raw, `"code":"user_blocked"`) || num(t, ev.body, "applied") != 1 {
		t.Fatalf("events with a blocked user's like: %d %s", ev.status, ev.raw)
	}
	if n := e.likes("x"); n != 1 {
		t.Fatalf("x counts %d, want only v's like", n)
	}

	g := e.do(http.MethodGet, "/v1/blocks/u", "", admin...).ok(t)
	if g["blocked"] != true || g["hlc"] != b["hlc"] {
		t.Fatalf("GET after block: %v (block answered %v)", g, b)
	}
	if l := e.do(http.MethodGet, "/v1/blocks", "", admin...); l.status != http.StatusOK || !strings.Contains(l.raw, `"user":"u"`) {
		t.Fatalf("list: %d %s", l.status, l.raw)
	}
	never := e.do(http.MethodGet, "/v1/blocks/w", "", admin...).ok(t)
	if never["blocked"] != false || never["hlc"] != nil {
		t.Fatalf("a user never blocked: %v", never)
	}

	u := e.do(http.MethodDelete, "/v1/blocks/u", "", admin...).ok(t)
	if u["blocked"] != false || u["changed"] != true {
		t.Fatalf("unblock answer %v", u)
	}
	if n := e.likes("post"); n != 2 {
		t.Fatalf("count %d after unblocking u, want 2 again", n)
	}
	if l := e.do(http.MethodGet, "/v1/blocks", "", admin...); strings.Contains(l.raw, `"user":"u"`) {
		t.Fatalf("list after unblock still names u: %s", l.raw)
	}
	e.do(http.MethodPut, "/v1/likes/other/u", "", write...).ok(t)

	// Bad input.
	e.do(http.MethodPut, "/v1/blocks/bad%2Fid", "", admin...).isError(t, http.StatusBadRequest, frontdoor.CodeBadID)
	e.do(http.MethodPut, "/v1/blocks/"+strings.Repeat("a", 129), "", admin...).isError(t, http.StatusBadRequest, frontdoor.CodeBadID)
	e.do(http.MethodGet, "/v1/blocks?limit=0", "", admin...).isError(t, http.StatusBadRequest, frontdoor.CodeBadRequest)
	e.do(http.MethodGet, "/v1/blocks?after=a/b", "", admin...).isError(t, http.StatusBadRequest, frontdoor.CodeBadRequest)
	e.do(http.MethodPut, "/v1/blocks/u", "x", append(admin, "Content-Type", "text/plain")...).
		isError(t, http.StatusUnsupportedMediaType, frontdoor.CodeMediaType)
	e.do(http.MethodPost, "/v1/blocks/u", "", admin...).isError(t, http.StatusMethodNotAllowed, frontdoor.CodeMethodNotAllowed)
}
