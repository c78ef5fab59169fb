package node

import (
	"context"
	"sync"
	"time"

	"github.com/tally-dev/tally/httpapi"
	"github.com/tally-dev/tally/route"
)

// Gathered reads, typed (route.KindQuestion): the entry replica asks
// every other replica of the region a route.Question at once, each
// answers a route.Reply from the shards it holds, and the entry replica
// merges them (httpapi). A replica that does not answer within the
// gather's bound is left out, and the read says partial.

// answerer answers a gathered read from this replica's shards
// (httpapi.Server.AnswerQuestion).
type answerer interface {
	AnswerQuestion(ctx context.Context, q *route.Question) route.Reply
}

// serveQuestion answers a gathered read with the API's answerer, under
// the sender's deadline.
func (sr *shardRouter) serveQuestion(req route.Request, deadline time.Time) route.Answer {
	qa := sr.api
	if qa == nil || req.Question == nil {
		return route.Answer{Kind: route.NotServed, Reason: "no gathered reads here"}
	}
	ctx, cancel := context.WithDeadline(sr.ctx, deadline)
	defer cancel()
	r := qa.AnswerQuestion(ctx, req.Question)
	return route.Answer{Kind: route.Served, Body: route.MarshalReply(&r)}
}

// gatherTimeout bounds how long a gathered read waits for the region's
// other replicas: a replica that does not answer by then is left out,
// and the read says partial.
const gatherTimeout = 2 * time.Second

// Ask asks q of every other replica of the region at once and returns
// the replies that came within gatherTimeout; a replica that did not
// answer, refused, or failed the read is left out.
func (sr *shardRouter) Ask(ctx context.Context, q route.Question) []httpapi.Replied {
	ctx, cancel := context.WithTimeout(ctx, min(sr.timeout, gatherTimeout))
	defer cancel()
	deadline, _ := ctx.Deadline()
	req := route.Request{Kind: route.KindQuestion, From: sr.self, Shard: -1, DeadlineMs: deadline.UnixMilli(), Question: &q}
	data := req.Marshal()
	var (
		mu  sync.Mutex
		out []httpapi.Replied
		wg  sync.WaitGroup
	)
	for _, replica := range sr.Map().Replicas() {
		if replica == sr.self {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := sr.sender.Ask(ctx, replica, data)
			var r route.Reply
			if err == nil {
				r, err = route.UnmarshalReply(a.Body)
			}
			if err == nil && r.Code != "" {
				err = codeErr(r.Code, r.Msg)
			}
			if err != nil {
				sr.log.Debug("gathered read left a replica out", "replica", replica, "asked", q.Asked, "error", err)
				return // left out: the read says partial
			}
			mu.Lock()
			out = append(out, httpapi.Replied{Replica: replica, Reply: r})
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}
