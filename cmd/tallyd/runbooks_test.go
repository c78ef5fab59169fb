package main

import (
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// Every alert of deploy/prometheus/alerts.yml links its own runbook: a
// level-3 section under docs/operations.md's "## Runbooks", listed in
// that section's contents. A renamed heading or a new alert without a
// runbook fails here, not in an on-call engineer's browser.
func TestAlertRunbooks(t *testing.T) {
	raw := readDoc(t, "../../deploy/prometheus/alerts.yml")
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal([]byte(raw), &file); err != nil {
		t.Fatalf("deploy/prometheus/alerts.yml: %v", err)
	}
	urls := map[string]string{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				urls[r.Alert] = r.Annotations["runbook_url"]
			}
		}
	}
	// The line-wise reading of the metric checks must see the same alerts.
	for name := range alertRules(t, raw) {
		if _, ok := urls[name]; !ok {
			t.Errorf("alert %s: the YAML parse misses it", name)
		}
	}
	if len(urls) < 15 {
		t.Fatalf("only %d alerts in deploy/prometheus/alerts.yml: the parse is broken", len(urls))
	}

	doc := readDoc(t, "../../docs/operations.md")
	runbooks, contents := runbookSections(t, doc)
	byAnchor := map[string]string{}
	prefix := ""
	for name, u := range urls {
		if u == "" {
			t.Errorf("alert %s has no runbook_url annotation", name)
			continue
		}
		pu, err := url.Parse(u)
		if err != nil || pu.Scheme != "https" || !strings.HasSuffix(pu.Path, "/docs/operations.md") || pu.Fragment == "" {
			t.Errorf("alert %s: runbook_url %q is not https://.../docs/operations.md#ANCHOR (%v)", name, u, err)
			continue
		}
		// One prefix for all, so that a team serving the docs elsewhere
		// replaces it once.
		p, _, _ := strings.Cut(u, "#")
		if prefix == "" {
			prefix = p
		} else if p != prefix {
			t.Errorf("alert %s: runbook_url %q does not start with %q as the others do", name, u, prefix)
		}
		anchor := pu.Fragment
		if !runbooks[anchor] {
			t.Errorf("alert %s: runbook_url's anchor #%s is no section under docs/operations.md's ## Runbooks", name, anchor)
		}
		if !contents[anchor] {
			t.Errorf("alert %s: ## Runbooks' contents list does not link #%s", name, anchor)
		}
		if other, dup := byAnchor[anchor]; dup {
			t.Errorf("alerts %s and %s share the runbook #%s: each gets its own", other, name, anchor)
		}
		byAnchor[anchor] = name
	}
	for anchor := range runbooks {
		if _, ok := byAnchor[anchor]; !ok {
			t.Errorf("docs/operations.md's runbook #%s belongs to no alert of deploy/prometheus/alerts.yml", anchor)
		}
	}
}

// runbookSections are the anchors of the level-3 headings under
// "## Runbooks" (GitHub's, computed over the whole document so that
// duplicates get their suffixes), and the anchors the section's text
// before its first such heading links to.
func runbookSections(t *testing.T, doc string) (sections, contents map[string]bool) {
	t.Helper()
	sections, contents = map[string]bool{}, map[string]bool{}
	inRunbooks, sawHeading, found := false, false, false
	link := regexp.MustCompile(`\]\(#([^)\s]+)\)`)
	for _, h := range markdownHeadings(doc) {
		switch {
		case h.level <= 2:
			inRunbooks = h.level == 2 && h.text == "Runbooks"
			found = found || inRunbooks
			if inRunbooks {
				for _, m := range link.FindAllStringSubmatch(h.body, -1) {
					contents[m[1]] = true
				}
			}
		case inRunbooks && h.level == 3:
			sawHeading = true
			sections[h.anchor] = true
		}
	}
	if !found {
		t.Fatal("docs/operations.md has no ## Runbooks section")
	}
	if !sawHeading {
		t.Fatal("docs/operations.md's ## Runbooks has no ### section")
	}
	return sections, contents
}

type mdHeading struct {
	level        int
	text, anchor string
	body         string // the text up to the next heading
}

var atxHeading = regexp.MustCompile(`^(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$`)

// markdownHeadings are doc's ATX headings outside fenced code blocks,
// with the anchors GitHub gives them.
func markdownHeadings(doc string) []mdHeading {
	var out []mdHeading
	seen := map[string]int{}
	fence := ""
	for _, line := range strings.Split(doc, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]+" \t") == "" {
				fence = ""
			}
		} else if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			for len(fence) < len(trimmed) && trimmed[len(fence)] == fence[0] {
				fence += fence[:1]
			}
		} else if m := atxHeading.FindStringSubmatch(line); m != nil {
			a := githubAnchor(m[2])
			if n := seen[a]; n > 0 {
				seen[a] = n + 1
				a += "-" + strconv.Itoa(n)
			} else {
				seen[a] = 1
			}
			out = append(out, mdHeading{level: len(m[1]), text: m[2], anchor: a})
			continue
		}
		if len(out) > 0 && fence == "" {
			out[len(out)-1].body += line + "\n"
		}
	}
	return out
}

// githubAnchor is the anchor GitHub gives a heading: lower case, every
// character but letters, digits, spaces, hyphens and underscores
// dropped, spaces made hyphens. (Duplicates get -1, -2, ...:
// markdownHeadings adds those.)
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func TestGitHubAnchors(t *testing.T) {
	doc := "# Operating tally\n" +
		"## `/v1/status` and `/v1/convergence`\n" +
		"```sh\n# not a heading\n```\n" +
		"### TallyReplicaDown\n" +
		"## Numbered sequences ##\n" +
		"## Numbered sequences\n" +
		"#no heading\n" +
		"### Hot items: 2^62, ok?\n"
	var got []string
	for _, h := range markdownHeadings(doc) {
		got = append(got, strconv.Itoa(h.level)+" "+h.anchor)
	}
	want := []string{
		"1 operating-tally",
		"2 v1status-and-v1convergence",
		"3 tallyreplicadown",
		"2 numbered-sequences",
		"2 numbered-sequences-1",
		"3 hot-items-262-ok",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("headings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The dashboard's Redis front door panels use the RESP server's metrics
// as resp/metrics.go declares them, and draw every one of them: a metric
// renamed there, or a new one without a panel, fails here without
// starting a replica (TestMetricNamesMatchAReplica checks all panels
// against a running one).
func TestDashboardRESPPanels(t *testing.T) {
	src := readDoc(t, "../../resp/metrics.go")
	decl := regexp.MustCompile(`prometheus\.New(Counter|CounterVec|Gauge|GaugeVec|GaugeFunc|Histogram|HistogramVec)\(prometheus\.\w+Opts\{\s*Name:\s*"(tally_resp_[a-z0-9_]+)"`)
	declared := map[string]string{}
	for _, m := range decl.FindAllStringSubmatch(src, -1) {
		typ := strings.ToLower(strings.TrimSuffix(strings.TrimSuffix(m[1], "Vec"), "Func"))
		declared[m[2]] = typ
	}
	if n := len(regexp.MustCompile(`Name:\s*"tally_resp_`).FindAllString(src, -1)); n != len(declared) || n < 5 {
		t.Fatalf("resp/metrics.go names %d tally_resp_ metrics, the parse found %d: %v", n, len(declared), declared)
	}

	drawn := map[string]bool{}
	for where, exprs := range dashboardExprs(t, readDoc(t, "../../deploy/grafana/tally.json")) {
		for _, e := range exprs {
			for _, n := range promqlMetrics(e) {
				if !strings.HasPrefix(n, "tally_resp_") {
					continue
				}
				if !isExported(declared, n) {
					t.Errorf("%s uses %s, which resp/metrics.go does not declare (in %q)", where, n, e)
				}
				base := n
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(n, s); ok && declared[b] == "histogram" {
						base = b
					}
				}
				drawn[base] = true
			}
		}
	}
	for name := range declared {
		if !drawn[name] {
			t.Errorf("resp/metrics.go declares %s, which no panel of deploy/grafana/tally.json draws", name)
		}
	}
}
