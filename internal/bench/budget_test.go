package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestBudgetOverspendArithmetic(t *testing.T) {
	start := budgetState{Granted: 1000, Spent: 0, Remaining: 1000}
	for _, c := range []struct {
		name      string
		succeeded int64
		start     budgetState
		end       budgetState
		want      int64
	}{
		{"every spend accounted for", 600, start, budgetState{Granted: 1000, Spent: 600, Remaining: 400}, 0},
		{"lost updates: acknowledged, not taken off", 650, start, budgetState{Granted: 1000, Spent: 600, Remaining: 400}, 50},
		{"taken off, never acknowledged (failed requests)", 590, start, budgetState{Granted: 1000, Spent: 600, Remaining: 400}, -10},
		{"exhausted exactly", 1000, start, budgetState{Granted: 1000, Spent: 1000, Remaining: 0}, 0},
		// The budget's history before the level does not count.
		{"a budget used before", 100, budgetState{Granted: 500, Spent: 200, Remaining: 300},
			budgetState{Granted: 500, Spent: 300, Remaining: 200}, 0},
		// A grant during the level raises remaining, not what was used.
		{"granted more meanwhile", 100, start, budgetState{Granted: 1500, Spent: 100, Remaining: 1400}, 0},
	} {
		if got := overspend(c.succeeded, c.start, c.end); got != c.want {
			t.Errorf("%s: overspend %d, want %d", c.name, got, c.want)
		}
		r := &budgetLevelResult{budgetCounts: budgetCounts{Spent: c.succeeded}, Start: c.start, End: c.end}
		if r.Overspend() != c.want {
			t.Errorf("%s: result's Overspend %d, want %d", c.name, r.Overspend(), c.want)
		}
	}
}

func TestBudgetsAgree(t *testing.T) {
	a := budgetState{Granted: 10, Spent: 3, Remaining: 7, Rights: map[string]int64{"us-1": 4, "eu-1": 3}}
	if budgetsAgree(nil) {
		t.Error("no regions agree")
	}
	if !budgetsAgree([]budgetState{a}) || !budgetsAgree([]budgetState{a, a, a}) {
		t.Error("equal states do not agree")
	}
	b := a
	b.Spent, b.Remaining = 4, 6
	if budgetsAgree([]budgetState{a, a, b}) {
		t.Error("a region behind agrees")
	}
	// Seen in CI: us and eu each spent 1 the other had not heard of, so
	// both read spent 3 of 10, with the rights left in different places.
	// Taking that as agreement reported 2 acknowledged spends as lost.
	us, eu := a, a
	us.Rights = map[string]int64{"us-1": 3, "eu-1": 4}
	eu.Rights = map[string]int64{"us-1": 4, "eu-1": 3}
	if budgetsAgree([]budgetState{us, eu}) {
		t.Error("regions that each miss the other's last spend agree")
	}
	c := a
	c.Unreconciled = 1
	if budgetsAgree([]budgetState{c, c}) {
		t.Error("regions with a spend still to reconcile agree")
	}
}

func TestClassifySpend(t *testing.T) {
	for _, c := range []struct {
		code    int
		body    string
		want    spendOutcome
		wantErr string
	}{
		{200, `{"key":"k","spent":1,"remaining":9,"rights":{},"duplicate":false}`, spendOK, ""},
		{200, `{"key":"k","spent":1,"remaining":9,"duplicate":true}`, spendDuplicate, ""},
		{409, `{"error":"no","code":"budget_exhausted","key":"k","remaining":0}`, spendExhausted, ""},
		{409, `{"error":"no","code":"rights_elsewhere","key":"k","remaining":5}`, spendElsewhere, ""},
		{409, `{"error":"no","code":"frozen"}`, spendRefused, `code "frozen"`},
		{409, `busy`, spendFailed, "not JSON"},
		{500, `{"error":"disk"}`, spendFailed, "500 Internal Server Error"},
	} {
		got, err := classifySpend(c.code, []byte(c.body))
		if got != c.want || (c.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("%d %s: %v, %v; want %v, %q", c.code, c.body, got, err, c.want, c.wantErr)
		}
	}
}

func TestParseBudgetBench(t *testing.T) {
	env := func(string) string { return "" }
	cfg, err := parseBudgetBench(nil, env, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Regions != 1 || len(cfg.URLs) != 0 || !slices.Equal(cfg.Clients, []int{1, 16, 64}) || cfg.Budget != defaultBudget ||
		cfg.Duration != 10*time.Second || cfg.Backoff != 2*time.Millisecond || cfg.Exhaust || cfg.flavor() != "1-replica" {
		t.Errorf("defaults: %+v", cfg)
	}
	cfg, err = parseBudgetBench([]string{"--exhaust", "--regions", "3", "--clients", "4, 8"}, env, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Budget != defaultExhaustBudget || cfg.Duration != 2*time.Minute || cfg.flavor() != "3-regions" || !slices.Equal(cfg.Clients, []int{4, 8}) {
		t.Errorf("--exhaust --regions 3: %+v", cfg)
	}
	cfg, err = parseBudgetBench([]string{"--exhaust", "--budget", "50", "--duration", "5s"}, env, nil)
	if err != nil || cfg.Budget != 50 || cfg.Duration != 5*time.Second {
		t.Errorf("--exhaust with --budget and --duration given: %+v, %v", cfg, err)
	}
	cfg, err = parseBudgetBench([]string{"--url", "http://a:1/, http://b:2", "--flavor", "taskset-1core"},
		func(k string) string { return map[string]string{envWriteToken: "s3cret"}[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.URLs, " ") != "http://a:1 http://b:2" || cfg.Token != "s3cret" || cfg.flavor() != "taskset-1core" {
		t.Errorf("--url list: %+v", cfg)
	}
	cfg, _ = parseBudgetBench([]string{"--url", "http://a:1,http://b:2,http://c:3"}, env, nil)
	if cfg.flavor() != "3-urls" {
		t.Errorf("flavor of three URLs: %q", cfg.flavor())
	}
	if got := strings.Join(budgetRegions(5), ","); got != "us,eu,ap,r4,r5" {
		t.Errorf("budgetRegions(5) = %s", got)
	}
}

func TestBudgetReport(t *testing.T) {
	cfg := defaultBudgetBenchConfig()
	cfg.Flavor = "3-regions"
	res := &budgetLevelResult{
		Clients: 16, Key: "bench.x.c16",
		budgetCounts: budgetCounts{Spent: 20000, Elsewhere: 30, Exhausted: 2, Errors: 1, FirstError: "POST x: 503"},
		Elapsed:      4 * time.Second,
		Start:        budgetState{Granted: 100000, Remaining: 100000},
		End:          budgetState{Granted: 100000, Spent: 19990, Remaining: 80010},
		Settled:      15 * time.Millisecond,
	}
	// 1 ms is recorded as its bucket's upper bound, 1.008 ms.
	for range 99 {
		res.Latency.Record(time.Millisecond)
	}
	res.Latency.Record(40 * time.Millisecond)
	if got, want := budgetCSVRow("tally", cfg.flavor(), res), "tally,3-regions,16,5000.0,1.008,1.008,10,32"; strings.Join(got, ",") != want {
		t.Errorf("csv row %q, want %q", strings.Join(got, ","), want)
	}
	dir := t.TempDir()
	cfg.CSV = filepath.Join(dir, "out.csv")
	var out strings.Builder
	rep, err := newBudgetReporter(cfg, "somewhere", &out)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.begin(); err != nil {
		t.Fatal(err)
	}
	if err := rep.level(res); err != nil {
		t.Fatal(err)
	}
	if err := rep.end([]*budgetLevelResult{res}); err != nil {
		t.Fatal(err)
	}
	if err := rep.close(); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, re := range []string{
		`(?m)^clients +spent +spends/s +p50 +p99 +max +exhausted +elsewhere +errors +remaining +overspend$`,
		`(?m)^ +16 +20000 +5000 +1\.01ms +1\.01ms +40\.\d\dms +2 +30 +1 +80010 +10$`,
		`overspend is not exact; first: POST x: 503`,
		`the budget ran out before the level's end`,
		`somewhere`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("output lacks %s:\n%s", re, text)
		}
	}
	b, err := os.ReadFile(cfg.CSV)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil || len(rows) != 2 || strings.Join(rows[0], ",") != strings.Join(budgetCSVHeader, ",") ||
		strings.Join(rows[1], ",") != "tally,3-regions,16,5000.0,1.008,1.008,10,32" {
		t.Errorf("csv file %q, %v", b, err)
	}
}

// fakeBudgets serves the budget routes of several regions that share one
// store, the way the spec describes them: rights to a budget sit with one
// region, and a spend elsewhere moves them to the asker and is refused
// with rights_elsewhere. lose makes it forget every lose-th spend it
// acknowledges (a lost update), which the bench must report as overspend.
type fakeBudgets struct {
	mu      sync.Mutex
	budgets map[string]*fakeBudget
	lose    int
	spends  int
}

type fakeBudget struct {
	granted, spent int64
	holder         int
}

func startFakeBudgets(t *testing.T, regions, lose int) []string {
	t.Helper()
	f := &fakeBudgets{budgets: map[string]*fakeBudget{}, lose: lose}
	var urls []string
	for i := range regions {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /readyz", func(http.ResponseWriter, *http.Request) {})
		mux.HandleFunc("POST /v1/budgets/{key}/{op}", func(w http.ResponseWriter, r *http.Request) { f.post(w, r, i) })
		mux.HandleFunc("GET /v1/budgets/{key}", f.get)
		s := httptest.NewServer(mux)
		t.Cleanup(s.Close)
		urls = append(urls, s.URL)
	}
	return urls
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fakeBudgets) post(w http.ResponseWriter, r *http.Request, region int) {
	var req struct {
		By int64 `json:"by"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.By < 1 {
		reply(w, 400, map[string]any{"error": "bad body"})
		return
	}
	key := r.PathValue("key")
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.budgets[key]
	switch r.PathValue("op") {
	case "grant":
		if b == nil {
			b = &fakeBudget{}
			f.budgets[key] = b
		}
		b.granted += req.By
		reply(w, 200, map[string]any{"key": key, "granted": b.granted, "remaining": b.granted - b.spent, "rights": b.granted - b.spent})
	case "spend":
		switch {
		case b == nil || b.granted-b.spent < req.By:
			reply(w, 409, map[string]any{"error": "budget exhausted", "code": "budget_exhausted", "key": key, "remaining": 0})
		case b.holder != region:
			b.holder = region
			reply(w, 409, map[string]any{"error": "rights elsewhere", "code": "rights_elsewhere", "key": key, "remaining": b.granted - b.spent})
		default:
			f.spends++
			if f.lose == 0 || f.spends%f.lose != 0 {
				b.spent += req.By
			}
			reply(w, 200, map[string]any{"key": key, "spent": req.By, "remaining": b.granted - b.spent, "duplicate": false})
		}
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeBudgets) get(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.budgets[key]
	if b == nil {
		reply(w, 404, map[string]any{"error": "no such budget"})
		return
	}
	reply(w, 200, map[string]any{"key": key, "granted": b.granted, "spent": b.spent, "remaining": b.granted - b.spent,
		"rights": map[string]int64{}, "local_rights": 0})
}

// Against three fake regions: clients spread over them, retry after
// rights_elsewhere, and every acknowledged spend is accounted for.
func TestBudgetBenchAgainstFake(t *testing.T) {
	cfg := defaultBudgetBenchConfig()
	cfg.URLs = startFakeBudgets(t, 3, 0)
	cfg.Clients, cfg.Duration, cfg.Budget = []int{1, 6}, 200*time.Millisecond, 1_000_000
	cfg.CSV = filepath.Join(t.TempDir(), "b.csv")
	var out strings.Builder
	res, err := runBudgetBench(context.Background(), cfg, Env{}, &out, &lockedBuilder{})
	if err != nil {
		t.Fatalf("%v\n%s", err, &out)
	}
	if len(res) != 2 {
		t.Fatalf("results %+v", res)
	}
	for _, r := range res {
		if r.Spent == 0 || r.Errors != 0 || r.Overspend() != 0 || r.Latency.Count() != uint64(r.Spent) ||
			r.End.Spent != r.Spent || r.Start.Granted != cfg.Budget {
			t.Errorf("%d clients: %+v", r.Clients, r)
		}
		if r.Clients == 6 && r.Elsewhere == 0 {
			t.Errorf("6 clients over 3 regions were never told rights_elsewhere: %+v", r)
		}
	}
	if res[0].Key == res[1].Key {
		t.Errorf("levels share budget %s", res[0].Key)
	}
	b, _ := os.ReadFile(cfg.CSV)
	if lines := strings.Split(strings.TrimSpace(string(b)), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[2], "tally,3-urls,6,") ||
		!strings.HasSuffix(lines[2], ",0,"+strconv.FormatInt(res[1].Refused(), 10)) {
		t.Errorf("csv:\n%s", b)
	}
}

// --exhaust spends the budget to the last unit, and a server that loses
// updates is caught: the command fails and names the overspend.
func TestBudgetBenchExhaust(t *testing.T) {
	for _, c := range []struct {
		lose int
		want string
	}{{0, "exhausted: exactly the 300 granted were spent"}, {10, "overspent by"}} {
		urls := startFakeBudgets(t, 2, c.lose)
		code, stdout, stderr := runArgs(t, "bench", "budget", "--url", strings.Join(urls, ","), "--exhaust", "--budget", "300",
			"--clients", "1,4", "--duration", "20s")
		if !strings.Contains(stdout+stderr, c.want) {
			t.Errorf("lose %d: exit %d, no %q in\n%s%s", c.lose, code, c.want, stdout, stderr)
		}
		if (c.lose == 0) != (code == 0) {
			t.Errorf("lose %d: exit %d\n%s%s", c.lose, code, stdout, stderr)
		}
		if c.lose == 0 && !regexp.MustCompile(`(?m)^ +4 +300 +\d+ .* 4 +\d+ +0 +0 +0$`).MatchString(stdout) {
			t.Errorf("no row of 4 clients that spent 300, each told exhausted once, 0 left, 0 overspent:\n%s", stdout)
		}
	}
}

// The real routes on an in-process replica: every level spends its
// budget to the last unit and no further, and the data directory goes.
func TestBenchBudgetInProcess(t *testing.T) {
	code, stdout, stderr := runArgs(t, "bench", "budget", "--exhaust", "--budget", "500", "--clients", "1,4", "--duration", "30s")
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
	}
	for _, c := range []string{"1", "4"} {
		if !regexp.MustCompile(`(?m)^ +` + c + ` +500 +\d+ .* ` + c + ` +0 +0 +0 +0$`).MatchString(stdout) {
			t.Errorf("no row of %s clients that spent all 500, each told exhausted, none left or overspent:\n%s", c, stdout)
		}
	}
	if strings.Count(stdout, "exhausted: exactly the 500 granted were spent") != 2 {
		t.Errorf("not every level spent exactly its budget:\n%s", stdout)
	}
	m := regexp.MustCompile(`data (\S+)\)`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no data dir in output:\n%s", stdout)
	}
	if _, err := os.Stat(m[1]); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("data dir %s left behind: %v", m[1], err)
	}
}

// Two regions in process: clients at the region that was not granted the
// budget are told rights_elsewhere, retry, and spend; the regions agree
// and nothing is overspent.
func TestBenchBudgetRegions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a two-region deployment")
	}
	t.Parallel()
	cfg := defaultBudgetBenchConfig()
	cfg.Regions, cfg.Clients, cfg.Duration, cfg.Budget = 2, []int{4}, 500*time.Millisecond, 1_000_000
	var out strings.Builder
	res, err := runBudgetBench(context.Background(), cfg, Env{}, &out, &lockedBuilder{})
	if err != nil {
		t.Fatalf("%v\n%s", err, &out)
	}
	r := res[0]
	if r.Spent == 0 || r.Errors != 0 || r.Overspend() != 0 || r.Elsewhere == 0 || r.End.Spent != r.Spent {
		t.Errorf("%+v\n%s", r, &out)
	}
	if !strings.Contains(out.String(), "in-process regions us http://") || !strings.Contains(out.String(), ", eu http://") {
		t.Errorf("output does not name the regions:\n%s", &out)
	}
}
