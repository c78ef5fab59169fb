package httpapi

import (
	"context"
	"net/http"
	"reflect"
	"testing"

	"github.com/tally-dev/tally/region"
	tallyroute "github.com/tally-dev/tally/route"
	"github.com/tally-dev/tally/shard"
)

// A replica answers a gathered read from its own keys, and a question it
// cannot answer with the code its own API would answer, which the asker
// leaves out.
func TestAnswerQuestion(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.do(http.MethodPut, "/v1/likes/clip/ann", "").ok(t)
	e.do(http.MethodPut, "/v1/likes/clip/bob", "").ok(t)
	e.do(http.MethodPut, "/v1/likes/video/ann", "").ok(t)
	ask := func(q tallyroute.Question) tallyroute.Reply { return e.srv.AnswerQuestion(context.Background(), &q) }
	all := shard.All()

	tr := ask(tallyroute.Question{Asked: tallyroute.AskTrending, Family: byte(region.KindLikes), N: 10, SpanMs: 600_000})
	if tr.Code != "" || len(tr.Items) != 2 || !reflect.DeepEqual(tr.Items[0], tallyroute.ReplyItem{Key: "clip", Count: 2}) || tr.Candidates != 2 {
		t.Errorf("trending: %+v", tr)
	}
	ul := ask(tallyroute.Question{Asked: tallyroute.AskUserLikes, Key: "ann", N: 1})
	if ul.Code != "" || len(ul.Items) != 1 || ul.Items[0].Key != "clip" || ul.Items[0].HLC == 0 || !ul.More {
		t.Errorf("user likes: %+v", ul)
	}
	var videoOnly shard.Set
	videoOnly.Add(shard.Of("video"))
	fd := ask(tallyroute.Question{Asked: tallyroute.AskFeed, Shards: videoOnly, Key: "bob", Keys: []string{"clip", "video"}})
	if fd.Code != "" || len(fd.Items) != 1 || !reflect.DeepEqual(fd.Items[0], tallyroute.ReplyItem{Key: "video", Count: 1}) {
		t.Errorf("feed of the asked shards only: %+v", fd)
	}
	if h := ask(tallyroute.Question{Asked: tallyroute.AskHolding}); h.Code != "" || h.Holding != nil {
		t.Errorf("an unsharded replica's holding: %+v", h)
	}

	for name, c := range map[string]struct {
		q    tallyroute.Question
		code string
	}{
		"unknown read":     {tallyroute.Question{Asked: 200}, "invalid"},
		"trending family":  {tallyroute.Question{Asked: tallyroute.AskTrending, Family: 9, N: 10}, "invalid"},
		"trending n 0":     {tallyroute.Question{Asked: tallyroute.AskTrending, Family: byte(region.KindLikes)}, "invalid"},
		"trending zone":    {tallyroute.Question{Asked: tallyroute.AskTrending, Family: byte(region.KindLikes), N: 1, Zone: "mars"}, "unknown_region"},
		"user likes id":    {tallyroute.Question{Asked: tallyroute.AskUserLikes, Key: "a b", N: 1}, "invalid"},
		"user likes limit": {tallyroute.Question{Asked: tallyroute.AskUserLikes, Key: "ann"}, "invalid"},
		"feed item":        {tallyroute.Question{Asked: tallyroute.AskFeed, Shards: all, Key: "ann", Keys: []string{"a/b"}}, "invalid"},
		"type unknown":     {tallyroute.Question{Asked: tallyroute.AskTypeTotal, Family: byte(region.KindCounters), Key: "nope"}, "not_found"},
	} {
		if r := ask(c.q); r.Code != c.code || r.Msg == "" || r.Items != nil {
			t.Errorf("%s: %+v, want code %s", name, r, c.code)
		}
	}

	e.do(http.MethodPut, "/v1/types/video", `{"owner":"media"}`).ok(t)
	e.do(http.MethodPost, "/v1/counters/video:a/incr", `{"by":2}`).ok(t)
	tt := ask(tallyroute.Question{Asked: tallyroute.AskTypeTotal, Family: byte(region.KindCounters), Key: "video"})
	if tt.Code != "" || len(tt.Shards) != 1 || tt.Shards[0].Keys != 1 ||
		len(tt.Shards[0].Vector) != 1 || tt.Shards[0].Vector[0].P != 2 {
		t.Errorf("type total: %+v", tt)
	}
	tw := ask(tallyroute.Question{Asked: tallyroute.AskTypeWindow, Family: byte(region.KindCounters), Key: "video", FromMs: 5, ToMs: 5})
	if tw.Code != "bad_time" {
		t.Errorf("type window of no time: %+v", tw)
	}
}
