package dashboard_test

import (
	"context"
	"errors"
	"fmt"
	"html"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/internal/dashboard"
	"github.com/tally-dev/tally/internal/deploy"
)

// The page itself, rendered by headless Chromium, over a real sharded
// deployment (two regions of three replicas, copies 2, as `tallyd local
// --regions us,eu --replicas 3 --copies 2` runs), checked panel by panel
// against the counts the test wrote: each region drawn once with its three
// replicas inside, its head reading the true likes (5, not 15) and its
// shard states; the converged summary; every replica's card; the chart's
// lines and the trending list's columns one a region, each with the likes
// booked there; the budget panel one row a region with the true grant and
// spends; the milestone totals and the link matrix one a region. A
// missing Chromium skips, except under CI=true (.ci/run installs it),
// where it fails.
func TestPageInChromiumShowsTrueTotals(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a sharded deployment and a browser")
	}
	browser := findChromium()
	if browser == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no Chromium installed under CI: install the Debian package chromium (.ci/run does): sudo apt-get install chromium")
		}
		t.Skip("no Chromium installed (apt-get install chromium; under CI=true this fails)")
	}
	cfg := deploy.DefaultConfig()
	cfg.Regions, cfg.Replicas, cfg.Copies = []string{"us", "eu"}, 3, 2
	cfg.DataDir = t.TempDir()
	d, err := deploy.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = d.Close(ctx)
	})
	urls := d.URLs()
	var targets []dashboard.Target
	at := map[string]string{} // replica -> URL
	for i, c := range d.Configs() {
		targets = append(targets, dashboard.Target{Region: c.Region, Replica: c.Replica, URL: urls[i]})
		at[c.Replica] = urls[i]
	}
	for _, u := range urls {
		testkit.WaitFor(t, time.Minute, func() error {
			if st, _, err := testkit.DoJSON("GET", u+"/readyz", ""); err != nil || st != 200 {
				return fmt.Errorf("%s: %d %v", u, st, err)
			}
			return nil
		})
	}

	// The known counts: 5 likes of post1 spread over the six replicas,
	// booked 3 in us and 2 in eu; views +7 in us and +4 in eu; 100
	// granted to gift-cards in us and 30 spent there.
	const likes, views, granted, spent = 5, 11, 100, 30
	booked := map[string]int{}
	for i := range likes {
		tg := targets[i%len(targets)]
		booked[tg.Region]++
		if st, b, err := testkit.DoJSON("PUT", fmt.Sprintf("%s/v1/likes/post1/viewer%d", tg.URL, i), ""); err != nil || st != 200 {
			t.Fatalf("like %d at %s: %d %v %v", i, tg.Replica, st, b, err)
		}
	}
	for replica, by := range map[string]int{"us-2": 7, "eu-3": views - 7} {
		if st, b, err := testkit.DoJSON("POST", at[replica]+"/v1/counters/views/incr", fmt.Sprintf(`{"by":%d}`, by)); err != nil || st != 200 {
			t.Fatalf("incr at %s: %d %v %v", replica, st, b, err)
		}
	}
	if st, b, err := testkit.DoJSON("POST", at["us-1"]+"/v1/budgets/gift-cards/grant", fmt.Sprintf(`{"by":%d}`, granted)); err != nil || st != 200 {
		t.Fatalf("grant: %d %v %v", st, b, err)
	}
	for i := range spent {
		testkit.WaitFor(t, time.Minute, func() error { // a rights_elsewhere refusal asks the peers: retried as a client would
			st, b, err := testkit.DoJSON("POST", at["us-3"]+"/v1/budgets/gift-cards/spend", `{"by":1}`)
			if err != nil || st != 200 {
				return fmt.Errorf("spend %d: %d %v %v", i, st, b, err)
			}
			return nil
		})
	}
	for _, u := range urls {
		testkit.WaitFor(t, time.Minute, func() error {
			if st, b, err := testkit.DoJSON("GET", u+"/v1/likes/post1", ""); err != nil || st != 200 || b["count"] != float64(likes) || b["approx"] == true {
				return fmt.Errorf("%s reads post1: %d %v %v", u, st, b, err)
			}
			return nil
		})
	}
	// Each region's shard map, as its replicas answer it.
	shardMaps := map[string][2]int{}
	for _, region := range cfg.Regions {
		st, b, err := testkit.DoJSON("GET", at[region+"-1"]+"/v1/shards", "")
		if err != nil || st != 200 {
			t.Fatalf("%s's shards: %d %v %v", region, st, b, err)
		}
		n, _ := b["shards"].(float64)
		if n < 2 || b["copies"] != float64(2) {
			t.Fatalf("%s's shard map %v: want a sharded region, copies 2", region, b)
		}
		shardMaps[region] = [2]int{int(n), 2}
	}

	srv := httptest.NewServer(dashboard.New(dashboard.Config{Regions: targets}))
	defer srv.Close()
	testkit.WaitFor(t, 3*time.Minute, func() error {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
			"--user-data-dir="+t.TempDir(), "--virtual-time-budget=10000", "--dump-dom", srv.URL+"/").Output()
		if err != nil {
			return fmt.Errorf("%s --dump-dom: %v", browser, err)
		}
		// The page as drawn: the script's own text holds the same markup.
		page := regexp.MustCompile(`(?s)<script>.*?</script>`).ReplaceAllString(string(out), "")
		var errs []error
		check := func(what, got, want string) {
			if got != want {
				errs = append(errs, fmt.Errorf("%s reads %q, want %q", what, got, want))
			}
		}

		// Regions as regions, each replica's card inside its own.
		check("the page's region boxes", fmt.Sprint(regexp.MustCompile(`<section class="region[^"]*" data-region="([^"]*)"`).FindAllStringSubmatch(page, -1)),
			fmt.Sprint(func() (m [][]string) {
				for _, r := range cfg.Regions {
					m = append(m, []string{`<section class="region sharded" data-region="` + r + `"`, r})
				}
				return m
			}()))
		for _, region := range cfg.Regions {
			box := element(page, `data-region="`+region+`"`)
			var cards []string
			for _, m := range regexp.MustCompile(`id="card-([^"]+)"`).FindAllStringSubmatch(box, -1) {
				cards = append(cards, m[1])
			}
			check(region+"'s replica cards", fmt.Sprint(cards), fmt.Sprint(cfg.ReplicaIDs(region)))
			sh := shardMaps[region]
			check(region+"'s head", text(element(page, `id="rsum-`+region+`"`)),
				fmt.Sprintf("%d like(s) of post1 · replicas 3 of 3 up · shards %d up (%d × %d copies)", likes, sh[0], sh[0], sh[1]))
			for _, replica := range cfg.ReplicaIDs(region) {
				card := element(page, `id="card-`+replica+`"`)
				check(replica+"'s likes", text(element(card, `class="big"`)), fmt.Sprint(likes))
				check(replica+"'s counter", text(element(card, `class="mid"`)), fmt.Sprint(views))
				check(replica+"'s state", text(element(card, `class="state"`)), "converged")
			}
		}
		check("the summary", text(element(page, `id="summary"`)), fmt.Sprintf("✓ Converged: every region reads %d like(s) of post1, digests match", likes))

		// The chart: a line a region with the likes booked there, and
		// the total.
		var lines []string
		for _, m := range regexp.MustCompile(`data-line="([^"]*)"`).FindAllStringSubmatch(page, -1) {
			lines = append(lines, m[1]+" "+text(element(page, m[0])))
		}
		check("the chart's legend", strings.Join(lines, "; "),
			fmt.Sprintf("us us %d; eu eu %d; total total %d", booked["us"], booked["eu"], likes))

		// Trending: one column a region, post1's split as booked.
		check("the trending list", text(element(page, `id="trendlist"`)),
			fmt.Sprintf("# item likes us eu split 1 post1 %d %d %d", likes, booked["us"], booked["eu"]))

		// The budget: one row a region, each reading the true grant and
		// spends.
		var rows []string
		for _, m := range regexp.MustCompile(`<tr id="budget-([^"]+)"`).FindAllStringSubmatch(page, -1) {
			row := element(page, `id="budget-`+m[1]+`"`)
			rows = append(rows, fmt.Sprintf("%s %s %s %s", m[1], text(element(row, `class="rem"`)), text(element(row, `class="gr"`)), text(element(row, `class="sp"`))))
		}
		check("the budget rows", strings.Join(rows, "; "),
			fmt.Sprintf("us %d %d %d; eu %d %d %d", granted-spent, granted, spent, granted-spent, granted, spent))
		check("the budget badge", text(element(page, `id="budgetbadge"`)), "regions agree")

		// Milestones: a total a region (not one a replica), the same in
		// both.
		ms := text(element(page, `id="msagree"`))
		if m := regexp.MustCompile(`^known in us (\d+) · eu (\d+) all regions agree$`).FindStringSubmatch(ms); m == nil || m[1] != m[2] {
			errs = append(errs, fmt.Errorf("the milestones read %q, want one equal total a region", ms))
		}
		// The link matrix: a row and a column a region.
		var heads []string
		for _, m := range regexp.MustCompile(`<tr><th>([a-z]+)</th>`).FindAllStringSubmatch(element(page, `id="matrix"`), -1) {
			heads = append(heads, m[1])
		}
		check("the link matrix's rows", fmt.Sprint(heads), fmt.Sprint(cfg.Regions))
		return errors.Join(errs...)
	})
}

// findChromium is the first Chromium on PATH, or "".
func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// element is the whole element of page whose start tag holds attr (an
// attribute as written, e.g. id="x"), from its start tag to its matching
// end tag, or "" if there is none.
func element(page, attr string) string {
	i := strings.Index(page, attr)
	if i < 0 {
		return ""
	}
	start := strings.LastIndex(page[:i], "<")
	name := page[start+1:]
	name = name[:strings.IndexAny(name, " \t\n>")]
	open, closing := regexp.MustCompile(`<`+name+`[\s>]`), "</"+name+">"
	depth, pos := 0, start
	for {
		o := open.FindStringIndex(page[pos:])
		c := strings.Index(page[pos:], closing)
		if c < 0 {
			return page[start:]
		}
		if o != nil && o[0] < c {
			depth++
			pos += o[1]
			continue
		}
		depth--
		pos += c + len(closing)
		if depth == 0 {
			return page[start:pos]
		}
	}
}

// text is what s's elements show: tags dropped, entities read, runs of
// white space one space.
func text(s string) string {
	s = regexp.MustCompile(`(?s)<title>.*?</title>|<[^>]+>`).ReplaceAllString(s, " ")
	return strings.ReplaceAll(strings.Join(strings.Fields(html.UnescapeString(s)), " "), " ,", ",")
}
