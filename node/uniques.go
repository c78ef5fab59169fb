package node

import (
	"context"
	"fmt"
	"strings"

	"github.com/tally-dev/tally/route"
)

// A unique count's read at a holder (route.OpUniqueRead): GET
// /v1/uniques/{key} and GET /v1/uniques?keys= of a shard this replica
// does not hold, parsed at the entry replica and answered here in
// route.Uniques' own encoding.

// regionOf maps this replica and each peer it has heard from to its
// region, as the HTTP API names the replicas of a read.
func (sr *shardRouter) regionOf() map[string]string {
	m := map[string]string{sr.rep.ID(): sr.rep.Region()}
	if sr.stale != nil {
		for _, p := range sr.stale.Peers() {
			if p.Region != "" {
				m[p.Replica] = p.Region
			}
		}
	}
	return m
}

// serveUniques answers a forwarded OpUniqueRead, alone in its request,
// from this replica's view (route.ReadUniques); a failed read is its
// code.
func (sr *shardRouter) serveUniques(req route.Request) route.Answer {
	if len(req.Ops) != 1 {
		return route.Answer{Kind: route.Served, Body: route.MarshalUniques(&route.Uniques{Code: "bad_request", Msg: "a unique count is read alone"})}
	}
	if sr.rep == nil {
		return route.Answer{Kind: route.NotServed, Reason: "not open"}
	}
	u, err := route.ReadUniques(sr.source(), &req.Ops[0], req.Shard, sr.regionOf())
	if err != nil {
		u = route.Uniques{Code: errCode(err), Msg: strings.TrimPrefix(err.Error(), "region: ")}
	}
	return route.Answer{Kind: route.Served, Body: route.MarshalUniques(&u)}
}

// Uniques reads q, a unique count of keys all on shard s, at a holder of
// s, this replica among them (route.Sender.Walk), and returns the answer
// and who gave it; a read that failed at the holder is its error.
func (sr *shardRouter) Uniques(ctx context.Context, s int, q route.UniqueQuery) (route.Uniques, string, error) {
	op := route.UniqueReadOp(q)
	req := route.Request{Kind: route.KindOps, From: sr.self, Shard: s, Ops: []route.Op{op}}
	ctx, cancel := sr.withDeadline(ctx, &req)
	defer cancel()
	var data []byte
	var out route.Uniques
	var failed error // the holder's answer that the read failed, as its replica's error
	h, err := sr.sender.Walk(s, route.Walk{WithSelf: true}, func(h string) error {
		if h == sr.self {
			if sr.rep == nil {
				return route.Refusal("not open")
			}
			var err error
			out, err = route.ReadUniques(sr.source(), &op, s, sr.regionOf())
			return err
		}
		if data == nil {
			data = req.Marshal()
		}
		a, err := sr.sender.Ask(ctx, h, data)
		if err != nil {
			return err
		}
		got, err := route.UnmarshalUniques(a.Body)
		if err != nil {
			return fmt.Errorf("its answer for shard %d: %w", s, err)
		}
		if got.Code != "" {
			// Served: its error reads as the holder's replica's, not
			// wrapped in the walk's "holder h:".
			failed = codeErr(got.Code, got.Msg)
			return nil
		}
		out = got
		return nil
	})
	if err == nil {
		err = failed
	}
	if err != nil {
		return route.Uniques{}, h, err
	}
	return out, h, nil
}
