package node

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/route"
)

// answering answers gathered reads with answer.
type answering struct {
	answer func(ctx context.Context, q *route.Question) route.Reply
}

func (a answering) AnswerQuestion(ctx context.Context, q *route.Question) route.Reply {
	return a.answer(ctx, q)
}

// A gathered read asks every other replica its typed question at once
// and keeps the replies that came within the gather's bound: a replica
// that replies a failure, or does not reply in time, is left out.
func TestAskGathersTypedReplies(t *testing.T) {
	conn, m := threeReplicas(t)
	release := make(chan struct{})
	var stall atomic.Bool        // us-3 does not reply in time
	apis := map[string]answerer{ // us-1 answers none
		"us-2": answering{func(_ context.Context, q *route.Question) route.Reply {
			return route.Reply{Candidates: q.N, Items: []route.ReplyItem{{Key: q.Key + "@us-2", Count: 7}}}
		}},
		"us-3": answering{func(context.Context, *route.Question) route.Reply {
			if stall.Load() { // then a good reply, too late
				select {
				case <-release:
				case <-time.After(5 * time.Second):
				}
				return route.Reply{}
			}
			return route.Reply{Code: "invalid", Msg: "no such read"}
		}},
	}
	routers := map[string]*shardRouter{}
	for _, r := range []string{"us-1", "us-2", "us-3"} {
		nc := conn()
		sr := newShardRouter("us", r, m, nc, natsTransport{nc: nc, region: "us"}, nil, 500*time.Millisecond, hclog.NewNullLogger())
		if err := sr.serve(apis[r]); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sr.close)
		routers[r] = sr
	}
	q := route.Question{Asked: route.AskTrending, Key: "vid", N: 3}
	got := routers["us-1"].Ask(context.Background(), q)
	if len(got) != 1 || got[0].Replica != "us-2" || got[0].Candidates != 3 || len(got[0].Items) != 1 || got[0].Items[0].Key != "vid@us-2" {
		t.Fatalf("replies %+v, want us-2's alone (us-3 failed the read)", got)
	}

	// us-3 does not reply in time: left out when the bound is up.
	stall.Store(true)
	t.Cleanup(func() { close(release) })
	start := time.Now()
	got = routers["us-1"].Ask(context.Background(), q)
	if took := time.Since(start); len(got) != 1 || got[0].Replica != "us-2" || took > 3*time.Second {
		t.Fatalf("replies %+v after %v, want us-2's within the bound", got, took)
	}

	// A replica whose API answers no gathered read says so: not served.
	req := route.Request{Kind: route.KindQuestion, From: "us-2", Shard: -1, Question: &q}
	if a, ok := routers["us-1"].handle(req.Marshal()); !ok || a.Kind != route.NotServed {
		t.Errorf("a question to an API without answers: %+v, %v", a, ok)
	}
}
