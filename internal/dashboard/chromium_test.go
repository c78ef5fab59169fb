package dashboard_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/dashboard"
	"github.com/tally-dev/tally/internal/deploy"
	"github.com/tally-dev/tally/internal/testkit"
)

// The page itself, rendered by headless Chromium, over a real sharded
// deployment (a region of three replicas, copies 2, as `tallyd local
// --regions us --replicas 3 --copies 2` runs): 5 likes of post1 show as 5
// in the region's head and in the converged summary, not 15 (the region's
// replicas summed). Skipped where no Chromium is installed (.ci/run
// installs it).
func TestPageInChromiumShowsTrueTotals(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a sharded deployment and a browser")
	}
	var browser string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			browser = p
			break
		}
	}
	if browser == "" {
		t.Skip("no Chromium installed (apt-get install chromium)")
	}
	cfg := deploy.DefaultConfig()
	cfg.Regions, cfg.Replicas, cfg.Copies, cfg.Milestones = []string{"us"}, 3, 2, ""
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
	for i, c := range d.Configs() {
		targets = append(targets, dashboard.Target{Region: c.Region, Replica: c.Replica, URL: urls[i]})
	}
	for _, u := range urls {
		testkit.WaitFor(t, time.Minute, func() error {
			if st, _, err := testkit.DoJSON("GET", u+"/readyz", ""); err != nil || st != 200 {
				return fmt.Errorf("%s: %d %v", u, st, err)
			}
			return nil
		})
	}
	for i := range 5 {
		u := urls[i%len(urls)]
		if st, b, err := testkit.DoJSON("PUT", fmt.Sprintf("%s/v1/likes/post1/viewer%d", u, i), ""); err != nil || st != 200 {
			t.Fatalf("like %d at %s: %d %v %v", i, u, st, b, err)
		}
	}
	for _, u := range urls {
		testkit.WaitFor(t, time.Minute, func() error {
			if st, b, err := testkit.DoJSON("GET", u+"/v1/likes/post1", ""); err != nil || st != 200 || b["count"] != float64(5) || b["approx"] == true {
				return fmt.Errorf("%s reads post1: %d %v %v", u, st, b, err)
			}
			return nil
		})
	}
	srv := httptest.NewServer(dashboard.New(dashboard.Config{Regions: targets}))
	defer srv.Close()

	summary := regexp.MustCompile(`(?s)<div id="summary"[^>]*>(.*?)</div>`)
	region := regexp.MustCompile(`(?s)id="rsum-(us)"[^>]*>(.*?)</`)
	tags := regexp.MustCompile(`<[^>]+>`)
	testkit.WaitFor(t, 2*time.Minute, func() error {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
			"--user-data-dir="+t.TempDir(), "--virtual-time-budget=10000", "--dump-dom", srv.URL+"/").Output()
		if err != nil {
			return fmt.Errorf("%s --dump-dom: %v", browser, err)
		}
		page := string(out)
		m := summary.FindStringSubmatch(page)
		if m == nil {
			return fmt.Errorf("no summary in the page: %.300s", page)
		}
		text := strings.Join(strings.Fields(tags.ReplaceAllString(m[1], "")), " ")
		if !strings.Contains(text, "every region reads 5 like(s) of post1") {
			return fmt.Errorf("summary says %q, want every region reading 5", text)
		}
		seen := map[string]string{}
		for _, r := range region.FindAllStringSubmatch(page, -1) {
			seen[r[1]] = strings.TrimSpace(tags.ReplaceAllString(r[2], ""))
		}
		for _, name := range []string{"us"} {
			if seen[name] != "5" {
				return fmt.Errorf("region %s's head shows %q, want 5 (all: %v)", name, seen[name], seen)
			}
		}
		return nil
	})
}
