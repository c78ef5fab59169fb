package dashboard

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/api"
)

// fakeT is the start of the fakes' series grid; fakeFrom and fakeTo are
// their trending range.
const fakeT = int64(1_700_000_000_000)

var fakeFrom, fakeTo = time.UnixMilli(fakeT).UTC(), time.UnixMilli(fakeT + 600_000).UTC()

// windowRoutes adds the window routes to a fake region: us and eu answer
// /v1/series with views one step apart (eu's ends a step earlier), and
// /v1/trending and the item windows with canned lists.
func (f *fakeRegion) windowRoutes(mux *http.ServeMux) {
	bad := func(w http.ResponseWriter, status int, code, msg string) {
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": msg, "code": code})
	}
	read := func(r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.reads = append(f.reads, r.URL.Path+"?"+r.URL.RawQuery)
	}
	mux.HandleFunc("GET /v1/series", func(w http.ResponseWriter, r *http.Request) {
		read(r)
		q := r.URL.Query()
		if q.Get("step") != "10s" {
			bad(w, http.StatusBadRequest, "bad_time", "step "+q.Get("step")+" is not a duration")
			return
		}
		if q.Get("kind") != "likes" || q.Get("key") != "*" || q.Get("by") != "region" || q.Get("last") != "10m" {
			bad(w, http.StatusBadRequest, "bad_request", "unexpected query "+r.URL.RawQuery)
			return
		}
		s := api.Series{Kind: "likes", Step: "10s", Final: true}
		switch f.name {
		case "us":
			s.Times = []int64{fakeT, fakeT + 10_000, fakeT + 20_000}
			s.Series = []api.SeriesOfKey{{Key: "*", Values: []int64{1, 3, 12},
				Regions: map[string][]int64{"us": {1, 2, 3}, "eu": {0, 1, 5}, "sa": {0, 0, 4}}}}
		case "eu":
			s.Times = []int64{fakeT - 10_000, fakeT, fakeT + 10_000}
			s.Series = []api.SeriesOfKey{{Key: "*", Values: []int64{5, 6, 8},
				Regions: map[string][]int64{"eu": {4, 5, 6}, "us": {1, 1, 2}}}}
		}
		s.From, s.To = time.UnixMilli(s.Times[0]).UTC(), time.UnixMilli(s.Times[2]+10_000).UTC()
		_ = json.NewEncoder(w).Encode(s)
	})
	mux.HandleFunc("GET /v1/trending", func(w http.ResponseWriter, r *http.Request) {
		read(r)
		q := r.URL.Query()
		win := q.Get("window")
		if win != "10m" && win != "all" {
			bad(w, http.StatusBadRequest, "bad_time", "window "+win+" is not a duration")
			return
		}
		if q.Get("kind") != "likes" || q.Get("n") != "10" || q.Get("with") != "meta" {
			bad(w, http.StatusBadRequest, "bad_request", "unexpected query "+r.URL.RawQuery)
			return
		}
		tr := api.Trending{Kind: "likes", Window: win, Region: q.Get("region"), Items: []api.TrendingItem{}, Candidates: 3, Capacity: 128}
		if win != "all" {
			tr.From, tr.To = &fakeFrom, &fakeTo
		}
		switch f.name + "/" + q.Get("region") {
		case "us/":
			tr.Items = []api.TrendingItem{{Item: "v1", Count: 30, Meta: &api.TypeMeta{Type: "v1", Owner: "media", Status: "inactive"}}, {Item: "v2", Count: 12}}
		case "us/ap":
			tr.Items = []api.TrendingItem{{Item: "v1", Count: 5}, {Item: "broken", Count: 2}}
		case "eu/eu":
			tr.Items = []api.TrendingItem{{Item: "eu-pick", Count: 9}}
		default:
			tr.Items = []api.TrendingItem{{Item: "wrong-region-asked", Count: 1}}
		}
		_ = json.NewEncoder(w).Encode(tr)
	})
	mux.HandleFunc("GET /v1/likes/{item}/window", func(w http.ResponseWriter, r *http.Request) {
		read(r)
		q := r.URL.Query()
		if q.Get("from") != strconv.FormatInt(fakeT, 10) || q.Get("to") != strconv.FormatInt(fakeT+600_000, 10) || q.Has("last") {
			bad(w, http.StatusBadRequest, "bad_time", "not the trending range: "+r.URL.RawQuery)
			return
		}
		win := api.Window{Kind: "likes", Key: r.PathValue("item"), From: fakeFrom, To: fakeTo, SlotWidth: "1m"}
		switch r.PathValue("item") {
		case "v1":
			win.Value, win.Regions = 30, map[string]int64{"us": 20, "eu": 7, "ap": 3}
		case "v2":
			win.Value, win.Regions, win.Approx = 12, map[string]int64{"us": 11, "sa": 1}, true
		case "eu-pick":
			win.Value, win.Regions = 9, map[string]int64{"eu": 9}
		default:
			bad(w, http.StatusServiceUnavailable, "not_ready", "replica is recovering")
			return
		}
		_ = json.NewEncoder(w).Encode(win)
	})
}

func (f *fakeRegion) windowReads() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.reads...)
}

func decodeAs[T any](t *testing.T, v map[string]any) T {
	t.Helper()
	raw, _ := json.Marshal(v)
	var out T
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return out
}

func ptrs(vs ...any) []*int64 {
	out := make([]*int64, len(vs))
	for i, v := range vs {
		if v != nil {
			n := int64(v.(int))
			out[i] = &n
		}
	}
	return out
}

func fmtPtrs(vs []*int64) string {
	var parts []string
	for _, v := range vs {
		if v == nil {
			parts = append(parts, "null")
		} else {
			parts = append(parts, strconv.FormatInt(*v, 10))
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// The chart's series: each region's line from its own replica, on the
// newest grid; the unreachable region's line from the first view that
// answered, which makes the whole approx.
func TestDashboardSeriesMergesRegionsOwnViews(t *testing.T) {
	d, fakes := fakeDashboard(t)
	st, raw := dashDo(t, d, "GET", "/api/series")
	if st != http.StatusOK {
		t.Fatalf("series: %d %v", st, raw)
	}
	sv := decodeAs[SeriesView](t, raw)
	for _, f := range fakes {
		if got := f.windowReads(); len(got) != 1 || got[0] != "/v1/series?by=region&key=%2A&kind=likes&last=10m&step=10s" {
			t.Errorf("%s was asked %q", f.name, got)
		}
	}
	if want := []int64{fakeT, fakeT + 10_000, fakeT + 20_000}; !reflect.DeepEqual(sv.Times, want) || sv.Step != "10s" || sv.Kind != "likes" || sv.Key != "*" {
		t.Errorf("grid: times %v step %q kind %q key %q, want us's, the newest", sv.Times, sv.Step, sv.Kind, sv.Key)
	}
	want := []struct {
		region, source string
		values         []*int64
	}{
		{"us", "us", ptrs(1, 2, 3)},   // us's own view
		{"eu", "eu", ptrs(5, 6, nil)}, // eu's own view, shifted onto the grid; it ends a step early
		{"ap", "us", ptrs(0, 0, 0)},   // unreachable: us's view of it (nothing booked)
		{"sa", "us", ptrs(0, 0, 4)},   // not watched, in us's view only
	}
	if len(sv.Lines) != len(want) {
		t.Fatalf("lines %+v", sv.Lines)
	}
	for i, w := range want {
		l := sv.Lines[i]
		if l.Region != w.region || l.Source != w.source || fmtPtrs(l.Values) != fmtPtrs(w.values) {
			t.Errorf("line %d: %s from %s %s, want %s from %s %s", i, l.Region, l.Source, fmtPtrs(l.Values), w.region, w.source, fmtPtrs(w.values))
		}
	}
	if got := fmtPtrs(sv.Total); got != "[6 8 null]" {
		t.Errorf("total %s, want [6 8 null]", got)
	}
	if !sv.Approx || sv.Final || sv.Errors["ap"] == "" || len(sv.Errors) != 1 {
		t.Errorf("approx %v final %v errors %v: ap's line is another's view, so approx", sv.Approx, sv.Final, sv.Errors)
	}

	// A request every region refuses is the regions' refusal, not a 502,
	// even with ap unreachable.
	st, raw = dashDo(t, d, "GET", "/api/series?step=7x")
	if st != http.StatusBadRequest || !strings.Contains(raw["error"].(string), "bad_time") {
		t.Errorf("step=7x: %d %v", st, raw)
	}
	if st, raw := dashDo(t, d, "GET", "/api/series?kind=views"); st != http.StatusBadRequest {
		t.Errorf("kind=views: %d %v", st, raw)
	}
}

func TestMergeSeries(t *testing.T) {
	targets := []Target{{Region: "us"}, {Region: "eu"}}
	view := func(approx, final bool, times []int64, regions map[string][]int64) seriesRead {
		vals := make([]int64, len(times))
		return seriesRead{s: api.Series{Kind: "likes", Step: "10s", Times: times, Approx: approx, Final: final,
			Series: []api.SeriesOfKey{{Key: "*", Values: vals, Regions: regions}}}}
	}
	grid := []int64{fakeT, fakeT + 10_000}

	// Both read, both final: final, every line its own, the total summed.
	sv, err := mergeSeries(targets, []seriesRead{
		view(false, true, grid, map[string][]int64{"us": {1, 2}, "eu": {9, 9}}),
		view(false, true, grid, map[string][]int64{"eu": {3, 4}}),
	})
	if err != nil || sv.Approx || !sv.Final || fmtPtrs(sv.Lines[0].Values) != "[1 2]" || fmtPtrs(sv.Lines[1].Values) != "[3 4]" ||
		fmtPtrs(sv.Total) != "[4 6]" || len(sv.Errors) != 0 {
		t.Errorf("both final: %+v %v", sv, err)
	}
	// eu's read ends a step later: its times are the grid, us's line is
	// shifted onto it and has no newest point.
	sv, _ = mergeSeries(targets, []seriesRead{
		view(false, true, grid, map[string][]int64{"us": {1, 2}}),
		view(false, true, []int64{fakeT + 10_000, fakeT + 20_000}, map[string][]int64{"eu": {3, 4}}),
	})
	if sv.Times[0] != fakeT+10_000 || fmtPtrs(sv.Lines[0].Values) != "[2 null]" || fmtPtrs(sv.Lines[1].Values) != "[3 4]" || fmtPtrs(sv.Total) != "[5 null]" {
		t.Errorf("eu newer: times %v, us %s, eu %s, total %s", sv.Times, fmtPtrs(sv.Lines[0].Values), fmtPtrs(sv.Lines[1].Values), fmtPtrs(sv.Total))
	}
	// A source that may still move makes the merge approx, not final.
	sv, _ = mergeSeries(targets, []seriesRead{
		view(false, true, grid, nil),
		view(true, true, grid, nil),
	})
	if !sv.Approx || sv.Final || fmtPtrs(sv.Total) != "[0 0]" {
		t.Errorf("eu approx: approx %v final %v total %s", sv.Approx, sv.Final, fmtPtrs(sv.Total))
	}
	// A read whose arrays do not line up counts as failed: eu's line is
	// us's view of it.
	broken := view(false, true, grid, map[string][]int64{"eu": {3}})
	sv, _ = mergeSeries(targets, []seriesRead{view(false, true, grid, map[string][]int64{"eu": {7, 8}}), broken})
	if l := sv.Lines[1]; l.Source != "us" || fmtPtrs(l.Values) != "[7 8]" || !sv.Approx || !strings.Contains(sv.Errors["eu"], "1 values for 2 times") {
		t.Errorf("malformed eu: %+v, errors %v", l, sv.Errors)
	}
	// A read of another step cannot share the grid: eu's line is us's view.
	other := view(false, true, grid, map[string][]int64{"eu": {3, 4}})
	other.s.Step = "1m"
	sv, _ = mergeSeries(targets, []seriesRead{view(false, true, grid, map[string][]int64{"eu": {7, 8}}), other})
	if l := sv.Lines[1]; l.Source != "us" || fmtPtrs(l.Values) != "[7 8]" || !sv.Approx || !strings.Contains(sv.Errors["eu"], "step 1m, not 10s") {
		t.Errorf("eu of step 1m: %+v, errors %v", l, sv.Errors)
	}
	// Nothing read: the reads' errors.
	_, err = mergeSeries(targets, []seriesRead{{err: errors.New("refused")}, {err: &statusError{503, "503 not_ready"}}})
	if err == nil || !strings.Contains(err.Error(), "us: refused") || !strings.Contains(err.Error(), "eu: 503 not_ready") || readsStatus(err) != http.StatusBadGateway {
		t.Errorf("none read: %v", err)
	}
	_, err = mergeSeries(targets, []seriesRead{{err: &statusError{400, "400 bad_time"}}, {err: &statusError{404, "404 no_window"}}})
	if readsStatus(err) != http.StatusBadGateway {
		t.Errorf("different refusals: %d", readsStatus(err))
	}
}

// The trending list: the asked region's replica first, each item split by
// region over the list's own range.
func TestDashboardTrending(t *testing.T) {
	d, fakes := fakeDashboard(t)
	us, eu := fakes[0], fakes[1]

	st, raw := dashDo(t, d, "GET", "/api/trending")
	if st != http.StatusOK {
		t.Fatalf("trending: %d %v", st, raw)
	}
	tv := decodeAs[TrendingView](t, raw)
	wantItems := []TrendingRow{
		{Item: "v1", Count: 30, Regions: map[string]int64{"us": 20, "eu": 7, "ap": 3}, Meta: &api.TypeMeta{Type: "v1", Owner: "media", Status: "inactive"}},
		{Item: "v2", Count: 12, Regions: map[string]int64{"us": 11, "sa": 1}},
	}
	if tv.Source != "us" || tv.Region != "" || tv.Window != "10m" || !reflect.DeepEqual(tv.Items, wantItems) ||
		tv.Candidates != 3 || tv.Capacity != 128 || !tv.From.Equal(fakeFrom) || !tv.To.Equal(fakeTo) {
		t.Errorf("all regions: %+v", tv)
	}
	if want := []string{"us", "eu", "ap", "sa"}; !reflect.DeepEqual(tv.Regions, want) {
		t.Errorf("columns %v, want %v", tv.Regions, want)
	}
	if !tv.Approx || tv.Final { // v2's split said approx
		t.Errorf("approx %v final %v", tv.Approx, tv.Final)
	}
	from, to := strconv.FormatInt(fakeT, 10), strconv.FormatInt(fakeT+600_000, 10)
	reads := us.windowReads()
	if len(reads) != 3 || reads[0] != "/v1/trending?kind=likes&n=10&window=10m&with=meta" ||
		!strings.HasPrefix(reads[1], "/v1/likes/v") || !strings.HasSuffix(reads[1], "/window?from="+from+"&to="+to) {
		t.Errorf("us was asked %q", reads)
	}
	if got := eu.windowReads(); len(got) != 0 {
		t.Errorf("us answered, yet eu was asked %q", got)
	}

	// region=eu: eu's own replica is asked first, though us comes first.
	_, raw = dashDo(t, d, "GET", "/api/trending?region=eu")
	tv = decodeAs[TrendingView](t, raw)
	if tv.Source != "eu" || tv.Region != "eu" || len(tv.Items) != 1 || tv.Items[0].Item != "eu-pick" ||
		!reflect.DeepEqual(tv.Items[0].Regions, map[string]int64{"eu": 9}) || tv.Approx || len(tv.Errors) != 0 {
		t.Errorf("region=eu: %+v", tv)
	}
	if got := eu.windowReads(); len(got) != 2 || got[0] != "/v1/trending?kind=likes&n=10&region=eu&window=10m&with=meta" {
		t.Errorf("eu was asked %q", got)
	}

	// region=ap: ap is down, so us's view of what ap booked; an item
	// whose split fails says so and makes the list approx.
	_, raw = dashDo(t, d, "GET", "/api/trending?region=ap")
	tv = decodeAs[TrendingView](t, raw)
	if tv.Source != "us" || tv.Region != "ap" || tv.Errors["ap"] == "" || len(tv.Items) != 2 ||
		tv.Items[0].Regions["ap"] != 3 || tv.Items[1].Regions != nil || !strings.Contains(tv.Items[1].Error, "503") || !tv.Approx {
		t.Errorf("region=ap: %+v", tv)
	}

	// window=all has no range, so no split.
	before := len(us.windowReads())
	_, raw = dashDo(t, d, "GET", "/api/trending?window=all")
	tv = decodeAs[TrendingView](t, raw)
	if tv.From != nil || len(tv.Items) != 2 || tv.Items[0].Regions != nil || tv.Approx || len(us.windowReads()) != before+1 {
		t.Errorf("window=all: %+v", tv)
	}

	// A refused request is passed on from the first region; no other is
	// asked.
	before = len(eu.windowReads())
	st, raw = dashDo(t, d, "GET", "/api/trending?window=7x")
	if st != http.StatusBadRequest || !strings.Contains(raw["error"].(string), "us: 400 bad_time") || len(eu.windowReads()) != before {
		t.Errorf("window=7x: %d %v", st, raw)
	}
	for _, target := range []string{"/api/trending?region=mars", "/api/trending?kind=views"} {
		if st, raw := dashDo(t, d, "GET", target); st < 400 || st >= 500 || raw["error"] == nil {
			t.Errorf("%s: %d %v", target, st, raw)
		}
	}
}

// Nobody answers: a 502 naming every region.
func TestDashboardTrendingNoRegion(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	d := New(Config{Regions: []Target{{Region: "us", URL: down.URL}, {Region: "eu", URL: down.URL}}})
	t.Cleanup(d.closeIdle)
	st, raw := dashDo(t, d, "GET", "/api/trending")
	if msg, _ := raw["error"].(string); st != http.StatusBadGateway || !strings.Contains(msg, "us: ") || !strings.Contains(msg, "eu: ") {
		t.Errorf("trending: %d %v", st, raw)
	}
	if st, raw := dashDo(t, d, "GET", "/api/series"); st != http.StatusBadGateway {
		t.Errorf("series: %d %v", st, raw)
	}
}

// The page carries the chart and the trending list, polls their routes,
// and loads nothing from elsewhere (it must work offline).
func TestDashboardPageHasChartAndTrending(t *testing.T) {
	d, _ := fakeDashboard(t)
	req := httptest.NewRequest("GET", "/", nil)
	req.Host = "127.0.0.1:8080"
	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, req)
	page, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`id="chart"`, `id="legend"`, `id="chartbadge"`, "<svg", "/api/series?", "last=10m&step=10s",
		`id="trendlist"`, `id="trendtabs"`, `id="trendbadge"`, "/api/trending?", "window=10m&n=10",
		"TREND_MS = 2000", `pill("warn", "approx"`, `pill("ok", "final"`,
	} {
		if !strings.Contains(string(page), want) {
			t.Errorf("page lacks %q", want)
		}
	}
	for _, bad := range []string{"<script src", `src="http`, `href="http`, "@import", "cdn"} {
		if strings.Contains(strings.ToLower(string(page)), strings.ToLower(bad)) {
			t.Errorf("page loads something from elsewhere: %q", bad)
		}
	}
}
