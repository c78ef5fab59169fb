// The holder's side of a batch of forwarded requests (route.KindBatch).

package node

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/route"
)

// serveBatch serves a batch of forwarded requests and answers each, in
// order (route.Answers): their writes together in one call of the
// writer, so one group commit and one fsync; every other request (reads,
// refusals, one past or near its deadline) as if it came alone, at the
// same time.
func (sr *shardRouter) serveBatch(reqs []route.Request) route.Answer {
	out := make([]route.Answer, len(reqs)) // route.Unanswered until answered
	var writes []int
	var wg sync.WaitGroup
	for i := range reqs {
		if sr.groupable(&reqs[i]) {
			writes = append(writes, i)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if a, ok := sr.serveOne(reqs[i]); ok {
				out[i] = a
			}
		}()
	}
	sr.serveWrites(reqs, writes, out)
	wg.Wait()
	return route.Answer{Kind: route.Answers, Body: route.MarshalAnswers(out)}
}

// groupMargin is the least time a request of a batch must have left
// before its deadline to be applied with others: the group is applied
// under the earliest of their deadlines, so one about to pass would
// fail the others' writes with it. A request with less is served alone.
const groupMargin = 500 * time.Millisecond

// groupable reports whether req is writes only that this replica serves
// now, with groupMargin left before its deadline: what serveWrites
// applies with others.
func (sr *shardRouter) groupable(req *route.Request) bool {
	if sr.do == nil || sr.chaosAckUnapplied || req.Kind != route.KindOps ||
		time.Until(sr.deadline(req)) < groupMargin || sr.notServed(*req) != "" {
		return false
	}
	if reads, ok := readsOnly(req.Ops); reads || !ok {
		return false
	}
	for i := range req.Ops {
		if regionOp(&req.Ops[i]).Kind == 0 {
			return false
		}
	}
	return true
}

// serveWrites applies the writes of reqs[i] for each i of idx in one
// call of the writer, under the earliest of their deadlines (a request
// whose sender has answered "timeout" is never applied after), and
// answers each in out. When the writer refuses the call whole, having
// applied nothing (a key not held here, not accepting writes), each
// request is served on its own, and says which. When the writer may or
// may not have applied them, none is answered: each sender answers
// "timeout".
func (sr *shardRouter) serveWrites(reqs []route.Request, idx []int, out []route.Answer) {
	if len(idx) == 0 {
		return
	}
	var ops []region.Op
	deadline := sr.deadline(&reqs[idx[0]])
	for _, i := range idx {
		if d := sr.deadline(&reqs[i]); d.Before(deadline) {
			deadline = d
		}
		for j := range reqs[i].Ops {
			ops = append(ops, regionOp(&reqs[i].Ops[j]))
		}
	}
	ctx, cancel := context.WithDeadline(sr.ctx, deadline)
	defer cancel()
	res, err := sr.do(ctx, ops)
	switch {
	case errors.Is(err, region.ErrNotHeld), errors.Is(err, region.ErrNotReady):
		var wg sync.WaitGroup
		for _, i := range idx {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if a, ok := sr.serveOne(reqs[i]); ok {
					out[i] = a
				}
			}()
		}
		wg.Wait()
		return
	case err == nil && len(res) != len(ops):
		err = errors.New("the writer's results do not match the operations")
		fallthrough
	case err != nil:
		sr.log.Warn("forwarded batch of writes", "requests", len(idx), "ops", len(ops), "error", err)
		return
	}
	k := 0
	for _, i := range idx {
		rs := make([]route.Result, len(reqs[i].Ops))
		for j := range rs {
			rs[j] = wireResult(&res[k+j])
		}
		k += len(rs)
		out[i] = route.Answer{Kind: route.Served, Body: route.MarshalResults(rs)}
	}
}
