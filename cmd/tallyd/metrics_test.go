package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/internal/deploy"
)

// The metric names that docs/operations.md lists, the Grafana dashboard
// and the alert rules use are the ones a running replica exports: a
// renamed or removed metric fails here, not in an operator's dashboard or
// in an alert that silently never fires.
func TestMetricNamesMatchAReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a two-region deployment")
	}
	t.Parallel()
	exported := scrapeMetricTypes(t)

	t.Run("docs/operations.md", func(t *testing.T) {
		listed := docMetrics(t, readDoc(t, "../../docs/operations.md"))
		for name := range exported {
			if strings.HasPrefix(name, "tally_") && !listed[name] {
				t.Errorf("%s is exported but not in docs/operations.md's metric table", name)
			}
		}
		for name := range listed {
			if _, ok := exported[name]; !ok {
				t.Errorf("docs/operations.md lists %s, which a replica does not export", name)
			}
		}
	})
	t.Run("docs/operations.md alerts", func(t *testing.T) {
		doc := readDoc(t, "../../docs/operations.md")
		inDoc := map[string]bool{}
		for _, m := range regexp.MustCompile("(?m)^\\| `(Tally[A-Za-z]+)` \\|").FindAllStringSubmatch(doc, -1) {
			inDoc[m[1]] = true
		}
		rules := alertRules(t, readDoc(t, "../../deploy/prometheus/alerts.yml"))
		for name := range rules {
			if !inDoc[name] {
				t.Errorf("alert %s is not in docs/operations.md's alert table", name)
			}
		}
		for name := range inDoc {
			if _, ok := rules[name]; !ok {
				t.Errorf("docs/operations.md lists alert %s, which deploy/prometheus/alerts.yml lacks", name)
			}
		}
	})
	t.Run("deploy/grafana/tally.json", func(t *testing.T) {
		exprs := dashboardExprs(t, readDoc(t, "../../deploy/grafana/tally.json"))
		checkExprs(t, exported, exprs, nil, 40)
	})
	t.Run("deploy/prometheus/alerts.yml", func(t *testing.T) {
		rules := alertRules(t, readDoc(t, "../../deploy/prometheus/alerts.yml"))
		// up is the series Prometheus adds for every scrape target.
		checkExprs(t, exported, rules, map[string]bool{"up": true}, 15)
	})
}

// scrapeMetricTypes starts regions us and eu (a replica each, milestones
// on, so that every part of a replica runs), writes through us-1 and
// returns what us-1's /metrics declares: every metric's name and type.
func scrapeMetricTypes(t *testing.T) map[string]string {
	t.Helper()
	cfg := deploy.DefaultConfig()
	cfg.Regions, cfg.DataDir, cfg.RESP = []string{"us", "eu"}, t.TempDir(), true
	d, err := deploy.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	urls := d.URLs()
	for _, u := range urls {
		testkit.WaitFor(t, 60*time.Second, func() error {
			if st, _, err := testkit.DoJSON("GET", u+"/readyz", ""); err != nil || st != 200 {
				return fmt.Errorf("%s not ready: %d %v", u, st, err)
			}
			return nil
		})
	}
	for _, w := range []struct{ method, path, body string }{
		{"PUT", "/v1/likes/post1/alice", ""},
		{"POST", "/v1/counters/views/incr", `{"by":2}`},
		{"POST", "/v1/budgets/b1/grant", `{"by":1}`},
		{"POST", "/v1/budgets/b1/spend", `{"by":1}`},
	} {
		if st, b, err := testkit.DoJSON(w.method, urls[0]+w.path, w.body); err != nil || st != 200 {
			t.Fatalf("%s %s: %d %v %v", w.method, w.path, st, b, err)
		}
	}
	// A RESP command and an unknown one: the RESP metrics by command and
	// by error code have a series.
	rc, err := net.Dial("tcp", d.RESPAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	_ = rc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := rc.Write([]byte("PING\r\nNOSUCH\r\n")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(rc)
	if line, err := br.ReadString('\n'); err != nil || line != "+PONG\r\n" {
		t.Fatalf("RESP PING: %q %v", line, err)
	}
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "-ERR unknown command") {
		t.Fatalf("RESP NOSUCH: %q %v", line, err)
	}
	_ = rc.Close()
	res, err := http.Get(urls[0] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	types := map[string]string{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]] = f[3]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(types) < 50 {
		t.Fatalf("only %d metrics on /metrics: %v", len(types), types)
	}
	return types
}

// docMetrics are the metric names of the table under docs/operations.md's
// "## Metrics": every name in backquotes in a row's first cell, labels
// stripped.
func docMetrics(t *testing.T, doc string) map[string]bool {
	t.Helper()
	_, sec, ok := strings.Cut(doc, "\n## Metrics\n")
	if !ok {
		t.Fatal("docs/operations.md has no ## Metrics section")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	names := map[string]bool{}
	name := regexp.MustCompile("`(tally_[a-z0-9_]+)(\\{[a-z_,]*\\})?`")
	for _, line := range strings.Split(sec, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.Contains(cells[1], "`tally_") {
			continue
		}
		for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
			names[m[1]] = true
		}
	}
	if len(names) < 50 {
		t.Fatalf("only %d metrics in docs/operations.md's table: the parse is broken", len(names))
	}
	return names
}

// dashboardExprs are the PromQL expressions of the dashboard's panels, by
// panel and target, and the metric of each label_values query of its
// variables.
func dashboardExprs(t *testing.T, raw string) map[string][]string {
	t.Helper()
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
			Panels []json.RawMessage `json:"panels"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal([]byte(raw), &dash); err != nil {
		t.Fatalf("deploy/grafana/tally.json: %v", err)
	}
	out := map[string][]string{}
	for _, p := range dash.Panels {
		if len(p.Panels) > 0 {
			t.Fatalf("panel %q nests panels (a collapsed row): expand it so that its expressions are checked", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Expr == "" {
				t.Fatalf("panel %q target %s has no expr", p.Title, tg.RefID)
			}
			key := fmt.Sprintf("panel %q %s", p.Title, tg.RefID)
			out[key] = append(out[key], tg.Expr)
		}
	}
	labelValues := regexp.MustCompile(`label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,`)
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		var s string
		if json.Unmarshal(v.Query, &s) != nil {
			if err := json.Unmarshal(v.Query, &q); err != nil {
				t.Fatalf("variable %s: query %s: %v", v.Name, v.Query, err)
			}
			s = q.Query
		}
		m := labelValues.FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("variable %s: %q is not label_values(METRIC, LABEL): the test cannot check it", v.Name, s)
		}
		out["variable "+v.Name] = []string{m[1]}
	}
	return out
}

// alertRules are the expressions of alerts.yml by alert name. Each expr
// must be on one line, so that this line-wise reading finds them all.
func alertRules(t *testing.T, raw string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	alert := regexp.MustCompile(`^\s*- alert:\s*(\S+)\s*$`)
	expr := regexp.MustCompile(`^\s*expr:\s*(.*?)\s*$`)
	cur := ""
	for i, line := range strings.Split(raw, "\n") {
		if m := alert.FindStringSubmatch(line); m != nil {
			cur = m[1]
			if _, dup := out[cur]; dup {
				t.Fatalf("alerts.yml:%d: alert %s twice", i+1, cur)
			}
			out[cur] = nil
		} else if m := expr.FindStringSubmatch(line); m != nil {
			if cur == "" || out[cur] != nil {
				t.Fatalf("alerts.yml:%d: an expr outside an alert, or a second one", i+1)
			}
			if m[1] == "" || strings.ContainsAny(m[1][:1], "|>") {
				t.Fatalf("alerts.yml:%d: write alert %s's expr on one line", i+1, cur)
			}
			out[cur] = []string{m[1]}
		}
	}
	for name, exprs := range out {
		if len(exprs) == 0 {
			t.Fatalf("alert %s has no expr", name)
		}
	}
	return out
}

// checkExprs checks every metric name each expression uses against
// exported (for a histogram, its _bucket, _sum and _count series), names
// in also allowed, and that the expressions use at least min names in
// all.
func checkExprs(t *testing.T, exported map[string]string, exprs map[string][]string, also map[string]bool, min int) {
	t.Helper()
	used := map[string]bool{}
	for where, es := range exprs {
		for _, e := range es {
			names := promqlMetrics(e)
			if len(names) == 0 {
				t.Errorf("%s: no metric found in %q", where, e)
			}
			for _, n := range names {
				used[n] = true
				if !also[n] && !isExported(exported, n) {
					t.Errorf("%s uses %s, which a replica does not export (in %q)", where, n, e)
				}
			}
		}
	}
	if len(used) < min {
		t.Errorf("only %d metric names found in all: the parse is broken (%v)", len(used), used)
	}
}

func isExported(exported map[string]string, name string) bool {
	if _, ok := exported[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if typ := exported[base]; typ == "histogram" || typ == "summary" && suffix != "_bucket" {
				return true
			}
		}
	}
	return false
}

var (
	promqlStrings   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	promqlMatchers  = regexp.MustCompile(`\{[^}]*\}`)
	promqlRanges    = regexp.MustCompile(`\[[^\]]*\]`)
	promqlGrouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlTokens    = regexp.MustCompile(`[A-Za-z0-9_:.$]+(\s*\()?`)
	promqlKeywords  = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan", "atan2"}
	promqlIdentHead = regexp.MustCompile(`^[A-Za-z_:]`)
)

// promqlMetrics are the metric names expr selects, sorted: identifiers
// that are not functions or keywords, outside strings, label matchers,
// ranges and grouping clauses.
func promqlMetrics(expr string) []string {
	e := promqlStrings.ReplaceAllString(expr, `""`)
	e = promqlMatchers.ReplaceAllString(e, " ")
	e = promqlRanges.ReplaceAllString(e, " ")
	e = promqlGrouping.ReplaceAllString(e, " ")
	seen := map[string]bool{}
	for _, m := range promqlTokens.FindAllStringSubmatch(e, -1) {
		tok := strings.TrimRight(m[0], " \t\n(")
		if m[1] != "" || !promqlIdentHead.MatchString(tok) || slices.Contains(promqlKeywords, strings.ToLower(tok)) {
			continue // a function or aggregation, a number or a duration, a keyword
		}
		seen[tok] = true
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// The metric names of PromQL expressions, as the checks above read them.
func TestPromQLMetrics(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`up{job="tally"} == 0`, []string{"up"}},
		{`histogram_quantile(0.99, sum by (job, instance, le) (rate(tally_commit_seconds_bucket{instance=~"$instance"}[$__rate_interval]))) > 0.1`,
			[]string{"tally_commit_seconds_bucket"}},
		{`tally_events_unpublished > 0 and increase(tally_events_published_total[10m]) == 0`,
			[]string{"tally_events_published_total", "tally_events_unpublished"}},
		{`predict_linear(a_bytes[6h], 24 * 3600) < 0 or b{x="y {z}", w='a}'} offset 5m`, []string{"a_bytes", "b"}},
		{`sum without (peer) (x) / on (instance) group_left (sequence) y > bool 1e9`, []string{"x", "y"}},
		{`absent(up{job="tally"})`, []string{"up"}},
	} {
		if got := promqlMetrics(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("promqlMetrics(%q) = %v, want %v", tc.expr, got, tc.want)
		}
	}
}

// A histogram's series count as its name; a counter's do not.
func TestIsExported(t *testing.T) {
	exported := map[string]string{"h": "histogram", "s": "summary", "c": "counter"}
	for name, want := range map[string]bool{
		"h": true, "h_bucket": true, "h_sum": true, "h_count": true,
		"s_sum": true, "s_count": true, "s_bucket": false,
		"c": true, "c_bucket": false, "c_count": false, "x": false, "x_bucket": false,
	} {
		if got := isExported(exported, name); got != want {
			t.Errorf("isExported(%s) = %v, want %v", name, got, want)
		}
	}
}
