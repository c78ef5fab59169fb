package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/internal/dashboard"
)

func TestDashboardFlag(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{nil, "127.0.0.1:8080"},
		{[]string{"--port", "0"}, "127.0.0.1:0"}, // any free ports: the dashboard too
		{[]string{"--port", "0", "--dashboard", "127.0.0.1:9999"}, "127.0.0.1:9999"},
		{[]string{"--dashboard", "127.0.0.1:8080", "--port", "0"}, "127.0.0.1:8080"}, // given: kept
		{[]string{"--dashboard", ""}, ""},
		{[]string{"--dashboard", ":7000"}, ":7000"},
	}
	for _, c := range cases {
		lc, err := parseLocal(c.args, noEnv, io.Discard)
		if err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		if got := lc.Dashboard.listenAddr(lc.Port); got != c.want {
			t.Errorf("%q: dashboard on %q, want %q", c.args, got, c.want)
		}
	}
	if _, err := parseLocal([]string{"--dashboard", "8080"}, noEnv, io.Discard); err == nil || !strings.Contains(err.Error(), "host:port") {
		t.Errorf("--dashboard 8080: %v", err)
	}
	var help strings.Builder
	_, _ = parseLocal([]string{"-h"}, noEnv, &help)
	if !strings.Contains(help.String(), "-dashboard addr") || !strings.Contains(help.String(), "(default 127.0.0.1:8080)") {
		t.Errorf("help: %s", help.String())
	}
}

// The dashboard of a real local deployment, driven end to end: a like at
// one region shows in every region's card, a cut link shows in the links.
func TestLocalDashboardEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three regions")
	}
	t.Parallel()
	out := startLocal(t, "--dashboard", "127.0.0.1:0", "--admin-token", "sesame").out
	dashLine := regexp.MustCompile(`(?m)^dashboard: (http://127\.0\.0\.1:\d+)$`)
	var base string
	testkit.WaitFor(t, 10*time.Second, func() error {
		if m := dashLine.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
			return nil
		}
		return fmt.Errorf("no dashboard line in %q", out)
	})
	post := func(path string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest("POST", base+path, nil)
		req.Header.Set(dashboard.Header, "1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != 200 {
			t.Fatalf("POST %s: %d %v %v", path, resp.StatusCode, v, err)
		}
		return v
	}
	overview := func() dashboard.Overview {
		t.Helper()
		resp, err := http.Get(base + "/api/overview?item=post1&counter=views")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var ov dashboard.Overview
		if err := json.NewDecoder(resp.Body).Decode(&ov); err != nil {
			t.Fatal(err)
		}
		return ov
	}

	// Writes wait for recovery from peers: the status shows when.
	testkit.WaitFor(t, 30*time.Second, func() error {
		for _, r := range overview().Regions {
			if r.Status == nil || !r.Status.Accepting {
				return fmt.Errorf("%s not accepting writes: %+v %v", r.Region, r.Status, r.Errors)
			}
		}
		return nil
	})
	if l := post("/api/like?region=us&item=post1&user=alice"); l["count"] != 1.0 {
		t.Fatalf("like: %v", l)
	}
	if b := post("/api/burst?region=eu&item=post1&n=20"); b["ok"] != 20.0 {
		t.Fatalf("burst: %v", b)
	}
	testkit.WaitFor(t, 20*time.Second, func() error {
		ov := overview()
		if len(ov.Regions) != 3 || len(ov.Links) != 3 || ov.LinksError != "" {
			return fmt.Errorf("overview: %+v", ov)
		}
		for _, r := range ov.Regions {
			if !r.Reachable || r.Likes == nil || r.Likes.Count != 21 || r.Likes.Approx || r.Convergence == nil || !r.Convergence.Converged ||
				r.Status == nil || r.Counter == nil {
				return fmt.Errorf("%s: reachable %v, likes %+v, convergence %+v, errors %v", r.Region, r.Reachable, r.Likes, r.Convergence, r.Errors)
			}
		}
		return nil
	})

	// The chart: each region's line from its own replica, the likes it
	// booked (1 at us, 20 at eu) in the last 10 minutes; the trending list
	// ranks post1 with its split by region.
	get := func(path string, v any) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		var sv dashboard.SeriesView
		get("/api/series?last=10m&step=10s", &sv)
		sums := map[string]int64{}
		for _, l := range sv.Lines {
			if l.Source != l.Region || len(l.Values) != len(sv.Times) {
				return fmt.Errorf("line %+v on %d times", l, len(sv.Times))
			}
			for _, v := range l.Values {
				if v != nil {
					sums[l.Region] += *v
				}
			}
		}
		if len(sv.Lines) != 3 || sums["us"] != 1 || sums["eu"] != 20 || sums["ap"] != 0 || sv.Step != "10s" || len(sv.Times) != 60 || len(sv.Errors) != 0 {
			return fmt.Errorf("series: sums %v, step %s, %d times, errors %v", sums, sv.Step, len(sv.Times), sv.Errors)
		}
		return nil
	})
	testkit.WaitFor(t, 10*time.Second, func() error {
		var all, eu dashboard.TrendingView
		get("/api/trending?window=10m&n=10", &all)
		get("/api/trending?window=10m&n=10&region=eu", &eu)
		if len(all.Items) != 1 || all.Items[0].Item != "post1" || all.Items[0].Count != 21 || all.Source != "us" ||
			all.Items[0].Regions["us"] != 1 || all.Items[0].Regions["eu"] != 20 || strings.Join(all.Regions, ",") != "us,eu,ap" {
			return fmt.Errorf("trending: %+v", all)
		}
		if len(eu.Items) != 1 || eu.Items[0].Count != 20 || eu.Source != "eu" || eu.Region != "eu" {
			return fmt.Errorf("trending in eu: %+v", eu)
		}
		return nil
	})

	// Cut and heal through the dashboard (it holds the admin token).
	if l := post("/api/links/us/eu?up=false"); l["up"] != false {
		t.Fatalf("cut: %v", l)
	}
	for _, l := range overview().Links {
		if (l.A == "us" && l.B == "eu" || l.A == "eu" && l.B == "us") == l.Up {
			t.Errorf("after cutting us-eu: %+v", l)
		}
	}
	if l := post("/api/links/eu/us?up=true"); l["up"] != true {
		t.Fatalf("heal: %v", l)
	}

	// The page itself.
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), "/api/overview") ||
		!strings.Contains(string(page), "/api/series?") || !strings.Contains(string(page), "/api/trending?") {
		t.Fatalf("page: %d", resp.StatusCode)
	}
}
