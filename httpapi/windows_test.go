package httpapi

import (
	"fmt"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"github.com/tally-dev/tally/frontdoor"
)

func TestWindowsRoutes(t *testing.T) {
	e := newEnv(t, envOpts{})
	now := e.rep.Now()
	at := now.Add(-90 * time.Second).UnixMilli()
	e.do("POST", "/v1/counters/views:v1/incr", fmt.Sprintf(`{"by":5,"at":%d}`, at)).ok(t)
	e.do("POST", "/v1/counters/views:v1/incr", `{"by":2}`).ok(t)
	e.do("POST", "/v1/counters/views:v2/incr", fmt.Sprintf(`{"by":4,"at":%q}`, now.UTC().Format(time.RFC3339Nano))).ok(t)
	// The seed body with a timestamp in unix seconds.
	e.do("POST", "/v1/likes", fmt.Sprintf(`{"videoId":"vid","userId":"u1","timestamp":%d}`, now.Unix()-30)).ok(t)
	e.do("POST", "/v1/likes", `{"videoId":"vid","userId":"u2"}`).ok(t)
	e.do("POST", "/v1/events", fmt.Sprintf(`[{"type":"incr","key":"views:v1","by":1,"at":%d},{"type":"like","item":"vid2","user":"u1","timestamp":%d}]`,
		at, now.UnixMilli())).ok(t)

	// last=60s holds only the increments of the last minute.
	b := e.do("GET", "/v1/counters/views:v1/window?last=60s", "").ok(t)
	if num(t, b, "value") != 2 || b["bucket"] != "1s" || b["approx"] != false || b["final"] != false || b["kind"] != "counters" {
		t.Fatalf("last=60s: %v", b)
	}
	if r, _ := b["regions"].(map[string]any); len(r) != 1 || fmt.Sprint(r["us"]) != "2" {
		t.Fatalf("regions: %v", b["regions"])
	}
	b = e.do("GET", "/v1/counters/views:v1/window?last=5m", "").ok(t)
	if num(t, b, "value") != 8 {
		t.Fatalf("last=5m: %v", b)
	}
	// from/to in both notations; the window widens to whole slots.
	from := time.UnixMilli(at).Truncate(time.Second)
	b = e.do("GET", fmt.Sprintf("/v1/counters/views:v1/window?from=%d&to=%s", at, from.Add(time.Second).UTC().Format(time.RFC3339)), "").ok(t)
	if num(t, b, "value") != 6 || b["from"] != from.UTC().Format(time.RFC3339) {
		t.Fatalf("from/to: %v", b)
	}
	// Likes: the seed-style timestamp books the like 30 s ago.
	if b = e.do("GET", "/v1/likes/vid/window?last=20s", "").ok(t); num(t, b, "value") != 1 {
		t.Fatalf("likes last=20s: %v", b)
	}
	if b = e.do("GET", "/v1/likes/vid/window?last=1m", "").ok(t); num(t, b, "value") != 2 {
		t.Fatalf("likes last=1m: %v", b)
	}
	// The family total, on its own route and in a series.
	if b = e.do("GET", "/v1/window?kind=counters&last=10m", "").ok(t); num(t, b, "value") != 12 || b["key"] != nil {
		t.Fatalf("total: %v", b)
	}
	b = e.do("GET", "/v1/series?kind=counters&key=views:v1&key=views:v2&key=*&last=5m&step=1m&by=region", "").ok(t)
	series, _ := b["series"].([]any)
	times, _ := b["times"].([]any)
	if len(series) != 3 || len(times) != 5 || b["step"] != "1m" {
		t.Fatalf("series: %v", b)
	}
	sums := map[string]int64{}
	for _, s := range series {
		line := s.(map[string]any)
		vals := line["values"].([]any)
		us := line["regions"].(map[string]any)["us"].([]any)
		for i, v := range vals {
			if fmt.Sprint(v) != fmt.Sprint(us[i]) {
				t.Fatalf("series %v: region us %v differs from values %v", line["key"], us, vals)
			}
			n, _ := v.(interface{ Int64() (int64, error) }).Int64()
			sums[line["key"].(string)] += n
		}
	}
	if sums["views:v1"] != 8 || sums["views:v2"] != 4 || sums["*"] != 12 {
		t.Fatalf("series sums %v", sums)
	}
	// The 4 is in the second of now, wherever that falls among the last
	// 10 s by the time of the read (a busy machine may have moved on).
	b = e.do("GET", "/v1/counters/views:v2/series?last=10s&step=1s", "").ok(t)
	vals, _ := b["series"].([]any)[0].(map[string]any)["values"].([]any)
	times, _ = b["times"].([]any)
	if len(vals) != 10 || len(times) != 10 {
		t.Fatalf("per-key series: %v", b)
	}
	for i, v := range vals {
		want := "0"
		if fmt.Sprint(times[i]) == fmt.Sprint(now.Truncate(time.Second).UnixMilli()) {
			want = "4"
		}
		if fmt.Sprint(v) != want {
			t.Fatalf("per-key series at %v: %v, want %s (now %d): %v", times[i], v, want, now.UnixMilli(), b)
		}
	}
	if !strings.Contains(fmt.Sprint(vals), "4") {
		t.Fatalf("per-key series misses the 4 booked at %d: %v", now.UnixMilli(), b)
	}

	// Trending: exact counts, by family and prefix, globally and per region.
	b = e.do("GET", "/v1/trending?window=10m&n=5&kind=counters&prefix=views:", "").ok(t)
	if got := fmt.Sprint(b["items"]); got != "[map[count:8 item:views:v1] map[count:4 item:views:v2]]" {
		t.Fatalf("trending counters: %s", got)
	}
	b = e.do("GET", "/v1/trending?window=10m&region=us", "").ok(t)
	if got := fmt.Sprint(b["items"]); got != "[map[count:2 item:vid] map[count:1 item:vid2]]" || b["region"] != "us" {
		t.Fatalf("trending likes: %v", b)
	}
	if b = e.do("GET", "/v1/trending?window=all&n=1", "").ok(t); fmt.Sprint(b["items"]) != "[map[count:2 item:vid]]" || b["from"] != nil {
		t.Fatalf("trending all time: %v", b)
	}
	if b = e.do("GET", "/v1/trending?window=day&kind=counters&n=1", "").ok(t); fmt.Sprint(b["items"]) != "[map[count:8 item:views:v1]]" {
		t.Fatalf("trending of the day: %v", b)
	}
}

// GET /v1/trending?window=7d ranks the likes of the last 7 UTC days
// (today included) by their exact counts: likes imported at times spread
// over ten days and live ones, those of the days before the week left
// out; a 10 day window has them.
func TestTrendingWeekRoute(t *testing.T) {
	e := newEnv(t, envOpts{})
	now := e.rep.Now()
	today := now.UTC().Truncate(24 * time.Hour)
	day := func(d int, h int) int64 { return today.AddDate(0, 0, d).Add(time.Duration(h) * time.Hour).UnixMilli() }
	var lines []string
	u := 0
	like := func(item string, n int, at int64) {
		for range n {
			lines = append(lines, fmt.Sprintf(`{"type":"like","item":%q,"user":"u%d","at":%d}`, item, u, at))
			u++
		}
	}
	like("old", 5, day(-8, 1))
	like("d", 4, day(-7, 23)) // the last hour before the week
	like("a", 2, day(-6, 0))  // the week's first hour
	like("a", 1, day(-2, 5))
	like("b", 2, day(-3, 2))
	r := e.do("POST", "/v1/admin/import", strings.Join(lines, "\n")+"\n", "Content-Type", "application/x-ndjson")
	if r.status != http.StatusOK || num(t, r.body, "applied") != int64(len(lines)) {
		t.Fatalf("import: %d %s", r.status, r.raw)
	}
	e.do("POST", "/v1/likes", `{"videoId":"c","userId":"u1"}`).ok(t)
	e.do("POST", "/v1/likes", fmt.Sprintf(`{"videoId":"b","userId":"u1","timestamp":%d}`, now.Unix()-60)).ok(t)

	b := e.do("GET", "/v1/trending?window=7d", "").ok(t)
	if got := fmt.Sprint(b["items"]); got != "[map[count:3 item:a] map[count:3 item:b] map[count:1 item:c]]" {
		t.Fatalf("the week: %s", got)
	}
	if b["from"] != today.AddDate(0, 0, -6).Format(time.RFC3339) || b["to"] != today.AddDate(0, 0, 1).Format(time.RFC3339) || b["window"] != "7d" {
		t.Fatalf("the week's bounds: %v", b)
	}
	if b = e.do("GET", "/v1/trending?window=7d&n=1", "").ok(t); fmt.Sprint(b["items"]) != "[map[count:3 item:a]]" {
		t.Fatalf("the week's top 1: %v", b["items"])
	}
	b = e.do("GET", "/v1/trending?window=10d", "").ok(t)
	if got := fmt.Sprint(b["items"]); got != "[map[count:5 item:old] map[count:4 item:d] map[count:3 item:a] map[count:3 item:b] map[count:1 item:c]]" {
		t.Fatalf("ten days: %s", got)
	}
}

func TestWindowsBadInput(t *testing.T) {
	e := newEnv(t, envOpts{})
	old := e.rep.Now().Add(-time.Hour).UnixMilli()
	for _, c := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"GET", "/v1/counters/k/window", "", 400, frontdoor.CodeMissingField},
		{"GET", "/v1/counters/k/window?last=abc", "", 400, frontdoor.CodeBadTime},
		{"GET", "/v1/counters/k/window?last=-5s", "", 400, frontdoor.CodeBadTime},
		{"GET", "/v1/counters/k/window?last=99999d", "", 400, frontdoor.CodeBadTime},
		{"GET", "/v1/counters/k/window?last=3000d", "", 404, frontdoor.CodeNoWindow}, // past the 1 h level's 3 years
		{"GET", "/v1/counters/k/window?last=1m&from=1", "", 400, frontdoor.CodeBadRequest},
		{"GET", "/v1/counters/k/window?last=1m&last=2m", "", 400, frontdoor.CodeBadRequest},
		{"GET", "/v1/counters/k/window?from=yesterday", "", 400, frontdoor.CodeBadTime},
		{"GET", "/v1/counters/k/window?from=2000&to=1000", "", 400, frontdoor.CodeBadTime},
		{"GET", "/v1/counters/k!/window?last=1m", "", 400, frontdoor.CodeBadID},
		{"GET", "/v1/counters/k/series?last=1h&step=1500ms", "", 400, frontdoor.CodeBadTime},
		{"GET", "/v1/counters/k/series?last=10d&step=1s", "", 404, frontdoor.CodeNoWindow}, // 1 s slots are kept 3 h
		{"GET", "/v1/counters/k/series?last=3650d&step=1s", "", 404, frontdoor.CodeNoWindow},
		{"GET", "/v1/series?kind=hits&last=1m", "", 400, frontdoor.CodeBadRequest},
		{"GET", "/v1/series?kind=likes&key=a/b&last=1m", "", 400, frontdoor.CodeBadID},
		{"GET", "/v1/series?kind=likes&last=1m&by=replica", "", 400, frontdoor.CodeBadRequest},
		{"GET", "/v1/series?last=170m&step=1s", "", 400, frontdoor.CodeInvalid}, // more than 10,000 points
		{"GET", "/v1/trending?n=0", "", 400, frontdoor.CodeBadRequest},
		{"GET", "/v1/trending?n=5000", "", 400, frontdoor.CodeBadRequest},
		{"GET", "/v1/trending?window=32d", "", 404, frontdoor.CodeNoWindow},   // past the day sketches' 31 days
		{"GET", "/v1/trending?window=3000d", "", 404, frontdoor.CodeNoWindow}, // past every level's retention
		{"GET", "/v1/trending?region=mars", "", 400, frontdoor.CodeUnknownZone},
		{"GET", "/v1/trending?prefix=a/b", "", 400, frontdoor.CodeBadID},
		{"POST", "/v1/counters/k/incr", fmt.Sprintf(`{"at":%d}`, old), 400, frontdoor.CodeBadTime},
		{"POST", "/v1/counters/k/incr", `{"at":"last tuesday"}`, 400, frontdoor.CodeBadTime},
		{"POST", "/v1/counters/k/incr", `{"at":-5}`, 400, frontdoor.CodeBadTime},
		{"POST", "/v1/counters/k/incr", `{"at":1,"timestamp":1}`, 400, frontdoor.CodeBadRequest},
		{"POST", "/v1/likes", fmt.Sprintf(`{"videoId":"v","userId":"u","timestamp":%d}`, old), 400, frontdoor.CodeBadTime},
	} {
		t.Run(c.path+c.body, func(t *testing.T) {
			e.on(t).do(c.method, c.path, c.body).isError(t, c.status, c.code)
		})
	}
	// A bad time in a batch rejects that event alone.
	b := e.do("POST", "/v1/events", fmt.Sprintf(`[{"type":"incr","key":"k","at":%d},{"type":"incr","key":"k"},{"type":"like","item":"i","user":"u","at":"x"}]`, old)).ok(t)
	if num(t, b, "applied") != 1 || num(t, b, "rejected") != 2 {
		t.Fatalf("batch: %v", b)
	}
	res := b["results"].([]any)
	if res[0].(map[string]any)["code"] != frontdoor.CodeBadTime || res[2].(map[string]any)["code"] != frontdoor.CodeBadTime {
		t.Fatalf("batch results: %v", res)
	}
	if e.counter("k") != 1 {
		t.Fatalf("counter %d, want 1: rejected events changed state", e.counter("k"))
	}
}

// docRoute matches a route row of docs/api.md's table: | `GET /v1/x` |.
var docRoute = regexp.MustCompile("(?m)^\\| `(GET|HEAD|PUT|POST|DELETE) (/[^`]*)`")

// Every route the router serves is documented in docs/api.md's route
// table, and every documented route is served.
func TestAPIDocDocumentsEveryRoute(t *testing.T) {
	raw, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range docRoute.FindAllStringSubmatch(string(raw), -1) {
		path, _, _ := strings.Cut(m[2], "?")
		documented[m[1]+" "+path] = true
	}
	e := newEnv(t, envOpts{api: func(c *Config) {
		c.ChaosClock = func(time.Duration) {} // a chaos build's route, documented too
		c.Links = nil
	}})
	param := regexp.MustCompile(`\{([a-z]+)(:[^}]*)?\}`)
	served := map[string]bool{}
	err = e.srv.Router().Walk(func(r *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		tpl, err := r.GetPathTemplate()
		if err != nil {
			return err
		}
		tpl = param.ReplaceAllString(tpl, "{$1}")
		methods, err := r.GetMethods()
		if err != nil {
			methods = []string{http.MethodGet} // /metrics: any method
		}
		for _, m := range methods {
			served[m+" "+tpl] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var missing, extra []string
	for r := range served {
		if !documented[r] {
			missing = append(missing, r)
		}
	}
	for r := range documented {
		if !served[r] {
			extra = append(extra, r)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 || len(extra) > 0 {
		t.Fatalf("docs/api.md route table and router differ:\n served, not documented: %v\n documented, not served: %v", missing, extra)
	}
	if len(served) < 30 {
		t.Fatalf("only %d routes walked: the walk is broken", len(served))
	}
}
