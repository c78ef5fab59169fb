package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/shard"
)

// In a sharded region a batch of events may name keys of shards this
// replica does not hold. postSplitEvents applies the events of the shards
// it holds here, in one commit, and forwards the others to their holders:
// one sub-batch per set of holders (each replica of the set holds every
// shard of the sub-batch, so one hop serves it), all at once. The answer
// has every event's result in request order, as one replica's would; an
// event whose holders did not answer carries the forwarding error
// (shard_unavailable: not applied; timeout: maybe applied). A cashback
// writes three keys: it is applied where all three are held, and one
// whose keys lie on shards no single holder set covers runs as a
// cross-shard purchase (Config.Purchases, package purchase). The batch is then several commits rather than one, as
// it would be if the client had sent a batch to each holder.

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
// set, and a shard whose queue group reaches them; "" when no replica of
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
				results[event[i]] = appliedEvent(&res)
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
				results[event[i]] = appliedEvent(&res[k])
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

// forwardEvents sends a group's events, as NDJSON, to its holders, and
// returns their results in the group's order.
func (s *Server) forwardEvents(r *http.Request, b *eventsBatch, g *forwardGroup) []api.EventResult {
	var body []byte
	for _, i := range g.ops {
		body = append(body, b.body[b.spans[i][0]:b.spans[i][1]]...)
		body = append(body, '\n')
	}
	fr := r.Clone(r.Context())
	fr.Header.Set("Content-Type", "application/x-ndjson")
	fr.Header.Set("Content-Length", strconv.Itoa(len(body)))
	fr.ContentLength = int64(len(body))
	rec := NewRecorder()
	failed := func(e *apiError) []api.EventResult {
		out := make([]api.EventResult, len(g.ops))
		for k := range out {
			out[k] = rejectedEvent(e)
		}
		return out
	}
	if err := s.cfg.Shards.Forward(rec, fr, body, g.shard); err != nil {
		return failed(s.classify(r, forwardError(g.shard, err)))
	}
	var ans api.EventsResult
	if rec.Status() != http.StatusOK || json.Unmarshal(rec.Body(), &ans) != nil || len(ans.Results) != len(g.ops) {
		var e api.Error
		if json.Unmarshal(rec.Body(), &e) != nil || e.Code == "" {
			e = api.Error{Error: "the holder of shard " + strconv.Itoa(g.shard) + " answered http " + strconv.Itoa(rec.Status()), Code: frontdoor.CodeInternal}
		}
		return failed(&apiError{Status: rec.Status(), Code: e.Code, Msg: e.Error})
	}
	return ans.Results
}

func rejectedEvent(e *apiError) api.EventResult {
	return api.EventResult{Error: e.Msg, Code: e.Code}
}

func appliedEvent(r *region.Result) api.EventResult {
	out := api.EventResult{OK: true, Value: r.Value, Changed: r.Changed, Duplicate: r.Duplicate, Approx: r.Approx}
	if r.Approx && r.Counted != 0 {
		c := r.Counted
		out.Counted = &c
	}
	return out
}
