package httpapi

import (
	"fmt"
	"github.com/tally-dev/tally/frontdoor"
	"math"
	"net/http"
	"strings"
	"testing"
)

func TestUniquesRoutes(t *testing.T) {
	e := newEnv(t, envOpts{})
	ids := make([]string, 500)
	for i := range ids {
		ids[i] = fmt.Sprintf("%q", fmt.Sprint("viewer", i))
	}
	b := e.do("POST", "/v1/uniques/video:1", `{"ids":[`+strings.Join(ids, ",")+`]}`).ok(t)
	if num(t, b, "ids") != 500 || b["changed"] != true || b["key"] != "video:1" {
		t.Fatalf("add: %v", b)
	}
	// The same ids again change nothing; one new id does.
	if b = e.do("POST", "/v1/uniques/video:1", `{"ids":[`+strings.Join(ids[:50], ",")+`]}`).ok(t); b["changed"] != false {
		t.Fatalf("repeat: %v", b)
	}
	e.do("POST", "/v1/uniques/video:2", `{"id":"viewer7"}`).ok(t)
	e.do("POST", "/v1/uniques/video:2", `{"id":"someone-else"}`).ok(t)
	e.do("POST", "/v1/events", `[{"type":"unique","key":"video:2","id":"third"},{"type":"unique","key":"video:2","user":"third"}]`).ok(t)

	near := func(b map[string]any, want float64) {
		t.Helper()
		est := float64(num(t, b, "estimate"))
		if math.Abs(est-want) > math.Max(2, 4*0.0082*want) || b["approx"] != true || fmt.Sprint(b["rel_std_error"]) != "0.008125" {
			t.Fatalf("want about %v: %v", want, b)
		}
	}
	b = e.do("GET", "/v1/uniques/video:1", "").ok(t)
	near(b, 500)
	if r, _ := b["regions"].([]any); len(r) != 1 || r[0] != "us" || b["from"] != nil {
		t.Fatalf("all-time read: %v", b)
	}
	near(e.do("GET", "/v1/uniques/video:2", "").ok(t), 3)
	b = e.do("GET", "/v1/uniques/video:2?by=region", "").ok(t)
	if r, _ := b["by_region"].(map[string]any); len(r) != 1 || fmt.Sprint(r["us"]) != "3" {
		t.Fatalf("by=region: %v", b)
	}
	e.do("GET", "/v1/uniques/video:2?by=replica", "").isError(t, http.StatusBadRequest, frontdoor.CodeBadRequest)
	// The union counts viewer7 once.
	near(e.do("GET", "/v1/uniques?keys=video:1,video:2", "").ok(t), 502)
	b = e.do("GET", "/v1/uniques/video:1?last=24h", "").ok(t)
	near(b, 500)
	if b["bucket"] != "1h0m0s" || b["from"] == nil || b["final"] != false {
		t.Fatalf("windowed: %v", b)
	}
	near(e.do("GET", "/v1/uniques?keys=video:2,video:1&last=7d", "").ok(t), 502)
	if b = e.do("GET", "/v1/uniques/nobody", "").ok(t); num(t, b, "estimate") != 0 {
		t.Fatalf("unknown key: %v", b)
	}

	for _, c := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"POST", "/v1/uniques/k", ``, http.StatusBadRequest, frontdoor.CodeMissingField},
		{"POST", "/v1/uniques/k", `{"ids":[]}`, http.StatusBadRequest, frontdoor.CodeMissingField},
		{"POST", "/v1/uniques/k", `{"ids":["a"],"id":"b"}`, http.StatusBadRequest, frontdoor.CodeBadRequest},
		{"POST", "/v1/uniques/k", `{"ids":["a/b"]}`, http.StatusBadRequest, frontdoor.CodeBadID},
		{"POST", "/v1/uniques/k", `{"ids":"a"}`, http.StatusBadRequest, frontdoor.CodeBadJSON},
		{"POST", "/v1/uniques/k", `{"ids":["a"],"by":1}`, http.StatusBadRequest, frontdoor.CodeUnknownField},
		{"POST", "/v1/uniques/k", `{"ids":["a"],"at":1}`, http.StatusBadRequest, frontdoor.CodeBadTime},
		{"POST", "/v1/uniques/k", `{"ids":[` + strings.Repeat(`"x",`, 10_000) + `"y"]}`, http.StatusBadRequest, frontdoor.CodeBadRequest},
		{"GET", "/v1/uniques", ``, http.StatusBadRequest, frontdoor.CodeMissingField},
		{"GET", "/v1/uniques?keys=a,,b", ``, http.StatusBadRequest, frontdoor.CodeBadID},
		{"GET", "/v1/uniques?keys=" + strings.Repeat("k,", 100) + "k", ``, http.StatusBadRequest, frontdoor.CodeBadRequest},
		{"GET", "/v1/uniques/k?last=soon", ``, http.StatusBadRequest, frontdoor.CodeBadTime},
		{"GET", "/v1/uniques/k?last=1h&from=1", ``, http.StatusBadRequest, frontdoor.CodeBadRequest},
		{"GET", "/v1/uniques/k?last=3000d", ``, http.StatusNotFound, frontdoor.CodeNoWindow},
	} {
		e.do(c.method, c.path, c.body).isError(t, c.status, c.code)
	}
	// A bad event is rejected alone.
	b = e.do("POST", "/v1/events", `[{"type":"unique","key":"k","id":"a","by":2},{"type":"unique","key":"k"},{"type":"unique","key":"k","id":"ok"}]`).ok(t)
	if num(t, b, "applied") != 1 || num(t, b, "rejected") != 2 {
		t.Fatalf("events: %v", b)
	}
}
