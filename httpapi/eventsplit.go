package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/shard"
)

// In a sharded region a batch of events may name keys of shards this
// replica does not hold. postSplitEvents applies the events of the shards
// it holds here, in one commit, and sends the others to their holders as
// typed operations (Shards.Apply, the path of a single like or
// increment): one sub-batch per set of holders (each replica of the set
// holds every shard of the sub-batch, so one hop serves it, in one commit
// there), all at once. The answer has every event's result in request
// order, as one replica's would; an event whose holders did not take it
// carries why (shard_unavailable: not applied; timeout: maybe applied).
// A cashback writes three keys: it is applied where all three are held,
// and one whose keys lie on shards no single holder set covers runs as a
// cross-shard purchase (Config.Purchases, package purchase). The batch is
// then several commits rather than one, as it would be if the client had
// sent a batch to each holder.

// holdsAll reports whether this replica holds every key of ops.
func (s *Server) holdsAll(ops []region.Op) bool {
	for i := range ops {
		if !s.holdsOp(&ops[i]) {
			return false
		}
	}
	return true
}

// holdsOp reports whether this replica holds every key o writes.
func (s *Server) holdsOp(o *region.Op) bool {
	if o.Kind == region.OpBlock || o.Kind == region.OpUnblock {
		return true // block flags live on shard.Global
	}
	h := s.cfg.Shards.Holds(shard.Of(o.Item))
	if o.Kind == region.OpCashback {
		h = h && s.cfg.Shards.Holds(shard.Of(o.Merchant)) && s.cfg.Shards.Holds(shard.Of(o.User))
	}
	return h
}

// holderSet is who holds every key of o, as a comparable name of the
// set, and a shard they all hold; "" when no replica of
// the region holds every key (a cashback over several shards).
func holderSet(m shard.Map, o *region.Op) (string, int) {
	s := shard.Of(o.Item)
	if o.Kind == region.OpCashback && !m.SameHolders(s, shard.Of(o.Merchant), shard.Of(o.User)) {
		return "", 0
	}
	return strings.Join(m.Holders(s), ","), s
}

// forwardGroup is the events of a batch one holder set serves.
type forwardGroup struct {
	shard int   // a shard every replica of the set holds
	ops   []int // indexes into the batch's ops
}

func (s *Server) postSplitEvents(w http.ResponseWriter, r *http.Request, b *eventsBatch, n int) error {
	// The event each op came from: the events not rejected, in order.
	event := make([]int, 0, len(b.ops))
	errs := b.errs
	for i := range n {
		if len(errs) > 0 && errs[0].event == i {
			errs = errs[1:]
			continue
		}
		event = append(event, i)
	}
	results := make([]api.EventResult, n)
	for _, e := range b.errs {
		results[e.event] = rejectedEvent(e.err)
	}
	m := s.cfg.Shards.Map()
	var local, crossed []int
	groups := map[string]*forwardGroup{}
	for i := range b.ops {
		o := &b.ops[i]
		if s.holdsOp(o) {
			local = append(local, i)
			continue
		}
		set, sh := holderSet(m, o)
		if set == "" && s.cfg.Purchases != nil {
			crossed = append(crossed, i) // a cashback across shards
			continue
		}
		if set == "" {
			results[event[i]] = rejectedEvent(newError(http.StatusMisdirectedRequest, frontdoor.CodeShardNotHeld,
				"a cashback whose keys are on shards no replica of this region holds together: send it where all three are held (GET /v1/shards)"))
			continue
		}
		g := groups[set]
		if g == nil {
			g = &forwardGroup{shard: sh}
			groups[set] = g
		}
		g.ops = append(g.ops, i)
	}
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Go(func() {
			// Each group writes the results of its own events only.
			for k, res := range s.forwardEvents(r, b, g) {
				results[event[g.ops[k]]] = res
			}
		})
	}
	for _, i := range crossed {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
			defer cancel()
			res, err := s.cfg.Purchases.Cashback(ctx, b.ops[i])
			if err != nil {
				results[event[i]] = rejectedEvent(s.classify(r, err))
			} else {
				results[event[i]] = appliedEvent(&b.ops[i], &res)
			}
		})
	}
	if len(local) > 0 {
		ops := make([]region.Op, len(local))
		for k, i := range local {
			ops[k] = b.ops[i]
		}
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
		res, err := s.rep.Do(ctx, ops)
		cancel()
		for k, i := range local {
			switch {
			case err != nil:
				results[event[i]] = rejectedEvent(s.classify(r, err))
			case res[k].Err != nil:
				results[event[i]] = rejectedEvent(s.classify(r, res[k].Err))
			default:
				results[event[i]] = appliedEvent(&b.ops[i], &res[k])
			}
		}
	}
	wg.Wait()
	out := api.EventsResult{Results: results}
	for i := range results {
		if results[i].OK {
			out.Applied++
		} else {
			out.Rejected++
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// maxSubBatchBytes bounds the operations of one typed request of a
// sub-batch, well under NATS' default max_payload (1 MiB): an import's
// derived idempotency keys make a typed increment longer than its line,
// so a sub-batch of a large body goes in several requests.
const maxSubBatchBytes = 256 << 10

// opBytes is about what o takes on the wire (route.Op's encoding), a
// little more.
func opBytes(o *region.Op) int {
	n := 32 + len(o.Item) + len(o.User) + len(o.Merchant) + len(o.IdemKey)
	for _, id := range o.IDs {
		n += len(id) + 2
	}
	return n
}

// chunks cuts ops into runs, in order, of at most max bytes each by
// opBytes (an op larger than max is a run of its own).
func chunks(ops []region.Op, max int) [][]region.Op {
	var out [][]region.Op
	start, size := 0, 0
	for i := range ops {
		n := opBytes(&ops[i])
		if i > start && size+n > max {
			out = append(out, ops[start:i])
			start, size = i, 0
		}
		size += n
	}
	if start < len(ops) {
		out = append(out, ops[start:])
	}
	return out
}

// forwardEvents runs a group's events at a holder of its shards, sent as
// typed operations (Shards.Apply, as a single like or increment is; an
// import's as backfills), and returns their results in the group's order:
// each as the holder's own batch answer has it. When no holder took them
// each says so (shard_unavailable: nothing applied); when one did not
// answer in time each says that (timeout: maybe applied), never applied.
// A large group goes in several requests (maxSubBatchBytes), one after
// another, so its events apply in their order.
func (s *Server) forwardEvents(r *http.Request, b *eventsBatch, g *forwardGroup) []api.EventResult {
	ops := make([]region.Op, len(g.ops))
	for k, i := range g.ops {
		ops[k] = b.ops[i]
	}
	out := make([]api.EventResult, 0, len(ops))
	for _, run := range chunks(ops, maxSubBatchBytes) {
		out = append(out, s.forwardRun(r, g.shard, run)...)
	}
	return out
}

// forwardRun is forwardEvents of one request's operations.
func (s *Server) forwardRun(r *http.Request, sh int, ops []region.Op) []api.EventResult {
	out := make([]api.EventResult, len(ops))
	res, by, err := s.cfg.Shards.Apply(r.Context(), sh, ops, false)
	if err == nil && len(res) != len(ops) {
		err = fmt.Errorf("the holder of shard %d answered %d results for %d events", sh, len(res), len(ops))
	}
	if err != nil {
		e := s.classify(r, err) // this replica's own writer's answer (a map that changed under the batch)
		if by != s.cfg.Replica.ID() {
			e = s.classify(r, forwardError(sh, err))
		}
		for k := range out {
			out[k] = rejectedEvent(e)
		}
		return out
	}
	for k := range res {
		if res[k].Err != nil {
			out[k] = rejectedEvent(s.classify(r, res[k].Err))
		} else {
			out[k] = appliedEvent(&ops[k], &res[k])
		}
	}
	return out
}

func rejectedEvent(e *apiError) api.EventResult {
	return api.EventResult{Error: e.Msg, Code: e.Code}
}

// appliedEvent is the result of o, applied with result r, as
// appendEventsAnswer renders it: a toggle, and a like or unlike with an
// idempotency key, say the state they left (liked).
func appliedEvent(o *region.Op, r *region.Result) api.EventResult {
	out := api.EventResult{OK: true, Value: r.Value, Changed: r.Changed, Duplicate: r.Duplicate, Approx: r.Approx}
	if o.Kind == region.OpToggle || o.IdemKey != "" && (o.Kind == region.OpLike || o.Kind == region.OpUnlike) {
		liked := r.Liked
		out.Liked = &liked
	}
	if r.Approx && r.Counted != 0 {
		c := r.Counted
		out.Counted = &c
	}
	return out
}
