package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

// Event types over HTTP: an admin registers one; reads with ?with=meta
// show it for keys under it; inactive, it refuses writes of its keys with
// 409 inactive_type (also in a batch, event by event); bad input is a 4xx.
func TestTypeRoutes(t *testing.T) {
	e := newEnv(t, envOpts{api: func(c *Config) { c.WriteToken, c.AdminToken = "w-secret", "a-secret" }})
	admin := []string{"Authorization", "Bearer a-secret", "Content-Type", "application/json"}
	write := []string{"Authorization", "Bearer w-secret", "Content-Type", "application/json"}
	body := `{"owner":"media-team","status":"active","description":"views of a video"}`

	e.do(http.MethodPut, "/v1/types/video", body, write...).isError(t, http.StatusUnauthorized, frontdoor.CodeUnauthorized)
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
	e.do(http.MethodGet, "/v1/counters/video:v123?with=owner", "", write...).isError(t, http.StatusBadRequest, frontdoor.CodeBadRequest)

	// Inactive: writes of its keys are refused, reads go on.
	b = e.do(http.MethodPut, "/v1/types/video", `{"owner":"media-team","status":"inactive"}`, admin...).ok(t)
	if b["status"] != "inactive" || b["description"] != "" || b["changed"] != true {
		t.Fatalf("deactivate: %v", b)
	}
	e.do(http.MethodPost, "/v1/counters/video:v123/incr", `{"by":1}`, write...).isError(t, http.StatusConflict, frontdoor.CodeInactiveType)
	e.do(http.MethodPut, "/v1/likes/video:v1/u9", "", write...).isError(t, http.StatusConflict, frontdoor.CodeInactiveType)
	e.do(http.MethodPost, "/v1/likes", `{"videoId":"video:v2","userId":"u456"}`, write...).isError(t, http.StatusConflict, frontdoor.CodeInactiveType)
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
	e.do(http.MethodGet, "/v1/types/nope", "", write...).isError(t, http.StatusNotFound, frontdoor.CodeNotFound)
	for _, c := range []struct{ path, body, code string }{
		{"/v1/types/bad%2Fname", `{}`, frontdoor.CodeBadID},
		{"/v1/types/t", `{"status":"paused"}`, frontdoor.CodeBadRequest},
		{"/v1/types/t", `{"owner":"` + strings.Repeat("x", 129) + `"}`, frontdoor.CodeBadRequest},
		{"/v1/types/t", `{"owner":1}`, frontdoor.CodeBadJSON},
		{"/v1/types/t", `{"colour":"red"}`, frontdoor.CodeUnknownField},
		{"/v1/types/t", ``, frontdoor.CodeBadJSON},
	} {
		e.do(http.MethodPut, c.path, c.body, admin...).isError(t, http.StatusBadRequest, c.code)
	}
}

// GET /v1/types/{name}/total adds up the all-time counts of the type's
// keys as the registry decides at the read: the key itself and keys
// under it, not a nested type's keys nor a longer name's ("videos:"),
// a type registered after its keys were written included; a peer's
// entries (merged as replication merges them) count, per replica.
func TestTypeTotalRoute(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, name := range []string{"video", "video:hd:"} {
		e.do(http.MethodPut, "/v1/types/"+name, `{"owner":"media-team"}`, "Content-Type", "application/json").ok(t)
	}
	for key, by := range map[string]int{"video:v1": 2, "video:v2": 3, "video": 1, "video:hd:x": 10, "videos:z": 7, "music:m": 4, "other": 5} {
		e.do(http.MethodPost, "/v1/counters/"+key+"/incr", fmt.Sprintf(`{"by":%d}`, by)).ok(t)
	}
	e.do(http.MethodPost, "/v1/counters/video:v1/incr", `{"by":-1}`).ok(t)
	peer := crdt.Vector{}.Set("eu-1", crdt.PN{P: 6, N: 1})
	if err := e.rep.Merge(context.Background(), []region.VectorMerge{{Kind: storage.Counters, Item: "video:v2", Vec: peer}}, nil); err != nil {
		t.Fatal(err)
	}
	b := e.do(http.MethodGet, "/v1/types/video/total", "").ok(t)
	reps := fmt.Sprint(b["replicas"])
	if num(t, b, "value") != 1+2-1+3+5 || num(t, b, "keys") != 3 || b["kind"] != "counters" || b["type"] != "video" || b["approx"] != false ||
		reps != "map[eu-1:map[n:1 p:6] us-1:map[n:1 p:6]]" {
		t.Fatalf("video total: %v", b)
	}
	if r, _ := b["regions"].(map[string]any); fmt.Sprint(r["us"]) != "5" {
		t.Fatalf("video total's regions: %v", b["regions"])
	}
	if b = e.do(http.MethodGet, "/v1/types/video:hd:/total", "").ok(t); num(t, b, "value") != 10 || num(t, b, "keys") != 1 {
		t.Fatalf("video:hd: total: %v", b)
	}
	e.do(http.MethodGet, "/v1/types/music/total", "").isError(t, http.StatusNotFound, frontdoor.CodeNotFound)
	e.do(http.MethodPut, "/v1/types/music", `{}`, "Content-Type", "application/json").ok(t)
	if b = e.do(http.MethodGet, "/v1/types/music/total", "").ok(t); num(t, b, "value") != 4 {
		t.Fatalf("music total, registered after its keys: %v", b)
	}
	e.do(http.MethodPut, "/v1/likes/video:v1/u1", "").ok(t)
	e.do(http.MethodPut, "/v1/likes/video:hd:v9/u1", "").ok(t)
	if b = e.do(http.MethodGet, "/v1/types/video/total?kind=likes", "").ok(t); num(t, b, "value") != 1 || b["kind"] != "likes" {
		t.Fatalf("video likes total: %v", b)
	}
	for _, c := range []struct {
		path   string
		status int
		code   string
	}{
		{"/v1/types/nope/total", 404, frontdoor.CodeNotFound},
		{"/v1/types/a!b/total", 400, frontdoor.CodeBadID},
		{"/v1/types/video/total?kind=hits", 400, frontdoor.CodeBadRequest},
		{"/v1/types/video/total?kind=likes&kind=counters", 400, frontdoor.CodeBadRequest},
	} {
		e.do(http.MethodGet, c.path, "").isError(t, c.status, c.code)
	}
}

// GET /v1/types/{name}/window: the net change of the type's keys in each
// of two windows a minute apart, each key's increments booked at their
// own event times; a nested type's keys, a longer name's and keys of no
// type left out; the type's window is the sum of its keys' own windows
// over the same bounds; bad input is a 4xx.
func TestTypeWindowRoute(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, name := range []string{"video", "video:hd:"} {
		e.do(http.MethodPut, "/v1/types/"+name, `{"owner":"media-team"}`, "Content-Type", "application/json").ok(t)
	}
	// Two whole minutes, both within the event times a write may carry.
	base := e.rep.Now().Add(-4 * time.Minute).Truncate(time.Minute).Add(time.Minute).UnixMilli()
	inA, inB := base+5_000, base+65_000
	for _, w := range []struct {
		key string
		by  int
		at  int64
	}{
		{"video:v1", 2, inA}, {"video:v2", 3, inA}, {"video:v1", 10, inB}, {"video:v1", -1, inB}, {"video", 1, inB},
		{"video:hd:x", 7, inA}, {"videos:z", 50, inA}, {"other", 100, inB}, {"video:v3", 4, 0},
	} {
		body := fmt.Sprintf(`{"by":%d}`, w.by)
		if w.at != 0 {
			body = fmt.Sprintf(`{"by":%d,"at":%d}`, w.by, w.at)
		}
		e.do(http.MethodPost, "/v1/counters/"+w.key+"/incr", body).ok(t)
	}
	window := func(path string, from, to int64) map[string]any {
		t.Helper()
		return e.do(http.MethodGet, fmt.Sprintf("%s?from=%d&to=%d", path, from, to), "").ok(t)
	}
	for _, c := range []struct {
		from, to int64
		want     int64
	}{{base, base + 60_000, 2 + 3}, {base + 60_000, base + 120_000, 10 - 1 + 1}, {base, base + 120_000, 15}} {
		b := window("/v1/types/video/window", c.from, c.to)
		if num(t, b, "value") != c.want || num(t, b, "keys") != 4 || b["type"] != "video" || b["kind"] != "counters" ||
			b["approx"] != false || b["final"] != false || b["bucket"] != "1s" ||
			b["from"] != time.UnixMilli(c.from).UTC().Format(time.RFC3339) || b["to"] != time.UnixMilli(c.to).UTC().Format(time.RFC3339) {
			t.Fatalf("video window [%d, %d): %v, want value %d", c.from, c.to, b, c.want)
		}
		if r, _ := b["regions"].(map[string]any); fmt.Sprint(r["us"]) != fmt.Sprint(c.want) {
			t.Fatalf("video window's regions: %v", b["regions"])
		}
		var sum int64
		for _, key := range []string{"video", "video:v1", "video:v2", "video:v3"} {
			sum += num(t, window("/v1/counters/"+key+"/window", c.from, c.to), "value")
		}
		if sum != c.want {
			t.Fatalf("the keys' own windows [%d, %d) add up to %d, the type's to %d", c.from, c.to, sum, c.want)
		}
	}
	if b := window("/v1/types/video:hd:/window", base, base+60_000); num(t, b, "value") != 7 || num(t, b, "keys") != 1 {
		t.Fatalf("video:hd: window: %v", b)
	}
	// last= as for one key: the increment booked now, not the past ones.
	if b := e.do(http.MethodGet, "/v1/types/video/window?last=30s", "").ok(t); num(t, b, "value") != 4 {
		t.Fatalf("video last=30s: %v", b)
	}
	e.do(http.MethodPut, "/v1/likes/video:v1/u1", "").ok(t)
	e.do(http.MethodPut, "/v1/likes/video:hd:v9/u1", "").ok(t)
	if b := e.do(http.MethodGet, "/v1/types/video/window?kind=likes&last=1m", "").ok(t); num(t, b, "value") != 1 || b["kind"] != "likes" {
		t.Fatalf("video likes window: %v", b)
	}
	old := e.rep.Now().AddDate(-4, 0, 0).UnixMilli()
	for _, c := range []struct {
		path   string
		status int
		code   string
	}{
		{"/v1/types/nope/window?last=1m", 404, frontdoor.CodeNotFound},
		{"/v1/types/a!b/window?last=1m", 400, frontdoor.CodeBadID},
		{"/v1/types/video/window", 400, frontdoor.CodeMissingField},
		{"/v1/types/video/window?last=1m&from=1", 400, frontdoor.CodeBadRequest},
		{"/v1/types/video/window?last=1m&last=2m", 400, frontdoor.CodeBadRequest},
		{"/v1/types/video/window?last=1m&kind=hits", 400, frontdoor.CodeBadRequest},
		{"/v1/types/video/window?from=yesterday", 400, frontdoor.CodeBadTime},
		{fmt.Sprintf("/v1/types/video/window?from=%d&to=%d", base, base-1000), 400, frontdoor.CodeBadTime},
		{fmt.Sprintf("/v1/types/video/window?from=%d&to=%d", old, old+3_600_000), 404, frontdoor.CodeNoWindow},
	} {
		e.do(http.MethodGet, c.path, "").isError(t, c.status, c.code)
	}
}
