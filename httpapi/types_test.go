package httpapi

import (
	"net/http"
	"strings"
	"testing"
)

// Event types over HTTP: an admin registers one; reads with ?with=meta
// show it for keys under it; inactive, it refuses writes of its keys with
// 409 inactive_type (also in a batch, event by event); bad input is a 4xx.
func TestTypeRoutes(t *testing.T) {
	e := newEnv(t, envOpts{api: func(c *Config) { c.WriteToken, c.AdminToken = "w-secret", "a-secret" }})
	admin := []string{"Authorization", "Bearer a-secret", "Content-Type", "application/json"}
	write := []string{"Authorization", "Bearer w-secret", "Content-Type", "application/json"}
	body := `{"owner":"media-team","status":"active","description":"views of a video"}`

	e.do(http.MethodPut, "/v1/types/video", body, write...).isError(t, http.StatusUnauthorized, CodeUnauthorized)
	b := e.do(http.MethodPut, "/v1/types/video", body, admin...).ok(t)
	if b["name"] != "video" || b["owner"] != "media-team" || b["status"] != "active" || b["changed"] != true || b["replica"] != "us-1" || b["hlc"] == nil {
		t.Fatalf("put: %v", b)
	}
	e.do(http.MethodPost, "/v1/counters/video:v123/incr", `{"by":2}`, write...).ok(t)
	c := e.do(http.MethodGet, "/v1/counters/video:v123?with=meta", "", write...).ok(t)
	if m, _ := c["meta"].(map[string]any); m["type"] != "video" || m["owner"] != "media-team" || m["description"] != "views of a video" || num(t, c, "value") != 2 {
		t.Fatalf("counter with meta: %v", c)
	}
	if c := e.do(http.MethodGet, "/v1/counters/video:v123", "", write...).ok(t); c["meta"] != nil {
		t.Fatalf("meta without with=meta: %v", c)
	}
	if c := e.do(http.MethodGet, "/v1/counters/other?with=meta", "", write...).ok(t); c["meta"] != nil {
		t.Fatalf("meta of a key of no type: %v", c)
	}
	e.do(http.MethodPut, "/v1/likes/video:v1/u456", "", write...).ok(t)
	if l := e.do(http.MethodGet, "/v1/likes/video:v1?with=meta", "", write...).ok(t); l["meta"] == nil {
		t.Fatalf("likes with meta: %v", l)
	}
	tr := e.do(http.MethodGet, "/v1/trending?kind=counters&window=all&with=meta", "", write...)
	if tr.status != http.StatusOK || !strings.Contains(tr.raw, `"item":"video:v123"`) || !strings.Contains(tr.raw, `"meta":{"type":"video"`) {
		t.Fatalf("trending with meta: %d %s", tr.status, tr.raw)
	}
	e.do(http.MethodGet, "/v1/counters/video:v123?with=owner", "", write...).isError(t, http.StatusBadRequest, CodeBadRequest)

	// Inactive: writes of its keys are refused, reads go on.
	b = e.do(http.MethodPut, "/v1/types/video", `{"owner":"media-team","status":"inactive"}`, admin...).ok(t)
	if b["status"] != "inactive" || b["description"] != "" || b["changed"] != true {
		t.Fatalf("deactivate: %v", b)
	}
	e.do(http.MethodPost, "/v1/counters/video:v123/incr", `{"by":1}`, write...).isError(t, http.StatusConflict, CodeInactiveType)
	e.do(http.MethodPut, "/v1/likes/video:v1/u9", "", write...).isError(t, http.StatusConflict, CodeInactiveType)
	e.do(http.MethodPost, "/v1/likes", `{"videoId":"video:v2","userId":"u456"}`, write...).isError(t, http.StatusConflict, CodeInactiveType)
	ev := e.do(http.MethodPost, "/v1/events", `[{"type":"incr","key":"video:v9"},{"type":"incr","key":"other"}]`, write...)
	if ev.status != http.StatusOK || !strings.Contains(ev.raw, `"code":"inactive_type"`) || num(t, ev.body, "applied") != 1 {
		t.Fatalf("batch with an inactive type's event: %d %s", ev.status, ev.raw)
	}
	if c := e.do(http.MethodGet, "/v1/counters/video:v123", "", write...).ok(t); num(t, c, "value") != 2 {
		t.Fatalf("read of an inactive type's key: %v", c)
	}

	g := e.do(http.MethodGet, "/v1/types/video", "", write...).ok(t)
	if g["status"] != "inactive" || g["owner"] != "media-team" {
		t.Fatalf("get: %v", g)
	}
	e.do(http.MethodPut, "/v1/types/ads", `{}`, admin...).ok(t) // active, no texts
	l := e.do(http.MethodGet, "/v1/types?limit=1", "", write...).ok(t)
	if types, _ := l["types"].([]any); len(types) != 1 || l["next"] != "ads" {
		t.Fatalf("list: %v", l)
	}
	e.do(http.MethodGet, "/v1/types/nope", "", write...).isError(t, http.StatusNotFound, CodeNotFound)
	for _, c := range []struct{ path, body, code string }{
		{"/v1/types/bad%2Fname", `{}`, CodeBadID},
		{"/v1/types/t", `{"status":"paused"}`, CodeBadRequest},
		{"/v1/types/t", `{"owner":"` + strings.Repeat("x", 129) + `"}`, CodeBadRequest},
		{"/v1/types/t", `{"owner":1}`, CodeBadJSON},
		{"/v1/types/t", `{"colour":"red"}`, CodeUnknownField},
		{"/v1/types/t", ``, CodeBadJSON},
	} {
		e.do(http.MethodPut, c.path, c.body, admin...).isError(t, http.StatusBadRequest, c.code)
	}
}
