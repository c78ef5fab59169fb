package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/milestone"
)

// listFeed is a region's view of the milestone stream, fixed: the feed
// itself is tested against real JetStream in package milestone.
type listFeed []milestone.Event

func (f listFeed) Events() []milestone.Event { return append([]milestone.Event(nil), f...) }
func (f listFeed) Synced() (bool, error)     { return true, nil }

func TestGetMilestones(t *testing.T) {
	var feed listFeed
	for i := 1; i <= 5; i++ {
		n := uint64(1)
		for range i {
			n *= 10
		}
		feed = append(feed, milestone.Event{Sequence: "likes", Number: n, Item: "post", User: fmt.Sprintf("u%d", i),
			Region: "us", Replica: "us-1", Time: time.Unix(int64(i), 0).UTC()})
	}
	e := newEnv(t, envOpts{api: func(c *Config) { c.Milestones = feed }})
	numbers := func(body map[string]any) []string {
		var out []string
		for _, m := range body["milestones"].([]any) {
			out = append(out, m.(map[string]any)["number"].(json.Number).String())
		}
		return out
	}
	for _, c := range []struct {
		query string
		want  string
	}{
		{"", "[10 100 1000 10000 100000]"},
		{"?limit=2", "[10000 100000]"}, // the newest
		{"?limit=5", "[10 100 1000 10000 100000]"},
		{"?limit=99", "[10 100 1000 10000 100000]"},
		{"?limit=0", "[]"},
	} {
		body := e.do("GET", "/v1/milestones"+c.query, "").ok(t)
		if got := fmt.Sprint(numbers(body)); got != c.want {
			t.Errorf("%s: numbers %s, want %s", c.query, got, c.want)
		}
		if body["total"] != json.Number("5") || body["synced"] != true {
			t.Errorf("%s: total %v, synced %v; want 5, true", c.query, body["total"], body["synced"])
		}
	}
	for _, q := range []string{"?limit=-1", "?limit=x", "?limit=1&limit=2", "?limit=100001", "?limit=1e3"} {
		e.do("GET", "/v1/milestones"+q, "").isError(t, http.StatusBadRequest, frontdoor.CodeBadRequest)
	}

	empty := newEnv(t, envOpts{api: func(c *Config) { c.Milestones = listFeed(nil) }})
	if r := empty.do("GET", "/v1/milestones", ""); r.status != 200 || r.raw != "{\"milestones\":[],\"total\":0,\"synced\":true}\n" {
		t.Errorf("no milestones yet: %d %q", r.status, r.raw)
	}

	off := newEnv(t, envOpts{})
	off.do("GET", "/v1/milestones", "").isError(t, http.StatusNotFound, frontdoor.CodeNotFound)
}
