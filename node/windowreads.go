package node

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/route"
)

// Windows and series between the replicas of a sharded region: an
// OpWindow or OpSeries, alone in its request, answered in its own
// encoding (route.Windows), which the entry replica renders as this
// replica renders its own.

// windowErrCode is err's wire code: errCode's, and no_window for a range
// no level of the key covers.
func windowErrCode(err error) string {
	if errors.Is(err, region.ErrNoWindow) {
		return "no_window"
	}
	return errCode(err)
}

// windowCodeErr is the error a window answer's code and message stand
// for (codeErr, and no_window).
func windowCodeErr(code, msg string) error {
	if code == "no_window" {
		return &holderError{err: region.ErrNoWindow, msg: msg}
	}
	return codeErr(code, msg)
}

// hasWindow reports whether ops hold an OpWindow or OpSeries.
func hasWindow(ops []route.Op) bool {
	for i := range ops {
		if ops[i].Kind == route.OpWindow || ops[i].Kind == route.OpSeries {
			return true
		}
	}
	return false
}

// windowSource is what this replica reads windows from: the replica, and
// its replication's word on its peers (their staleness, their regions).
func (sr *shardRouter) windowSource() route.WindowSource {
	rep := sr.rep
	src := route.WindowSource{Replica: rep}
	regions := func() map[string]string { return map[string]string{rep.ID(): rep.Region()} }
	if stale := sr.stale; stale != nil {
		src.StaleFor = func(key string) bool {
			if key == "" {
				return stale.Stale()
			}
			return stale.StaleFor(key)
		}
		src.Stale = stale.Stale
		regions = func() map[string]string {
			m := map[string]string{rep.ID(): rep.Region()}
			for _, p := range stale.Peers() {
				if p.Region != "" {
					m[p.Replica] = p.Region
				}
			}
			return m
		}
	}
	src.Regions = regions
	return src
}

// serveWindows answers a forwarded OpWindow or OpSeries, alone in its
// request, from this replica's view (route.ReadWindows); a failed read is
// its code.
func (sr *shardRouter) serveWindows(req route.Request) route.Answer {
	if len(req.Ops) != 1 {
		return route.Answer{Kind: route.Served, Body: route.MarshalWindows(&route.Windows{Code: "bad_request", Msg: "a window or series is read alone"})}
	}
	if sr.rep == nil {
		return route.Answer{Kind: route.NotServed, Reason: "not open"}
	}
	out, err := route.ReadWindows(sr.windowSource(), &req.Ops[0])
	if err != nil {
		out = route.Windows{Code: windowErrCode(err), Msg: strings.TrimPrefix(err.Error(), "region: ")}
	}
	return route.Answer{Kind: route.Served, Body: route.MarshalWindows(&out)}
}

// Windows reads op, an OpWindow or OpSeries of keys on shard s, at a
// holder of s, this replica among them (route.Sender.Walk), and returns
// its answer and who answered it; a read that failed at the holder is
// its error, as the holder's replica returned it.
func (sr *shardRouter) Windows(ctx context.Context, s int, op route.Op) (route.Windows, string, error) {
	if op.Kind != route.OpWindow && op.Kind != route.OpSeries {
		return route.Windows{}, "", fmt.Errorf("%w: operation kind %d is not a window", region.ErrInvalid, op.Kind)
	}
	req := route.Request{Kind: route.KindOps, From: sr.self, Shard: s, Ops: []route.Op{op}}
	ctx, cancel := sr.withDeadline(ctx, &req)
	defer cancel()
	var data []byte
	var out route.Windows
	var failed error // the read's own error, where a holder read it
	h, err := sr.sender.Walk(s, route.Walk{WithSelf: true}, func(h string) error {
		if h == sr.self {
			if sr.rep == nil {
				return route.Refusal("not open")
			}
			var err error
			out, err = route.ReadWindows(sr.windowSource(), &op)
			failed = err
			return err
		}
		if data == nil {
			data = req.Marshal()
		}
		a, err := sr.sender.Ask(ctx, h, data)
		if err != nil {
			return err
		}
		got, err := route.UnmarshalWindows(a.Body)
		if err != nil {
			return fmt.Errorf("its answer for shard %d: %w", s, err)
		}
		if got.Code != "" {
			failed = windowCodeErr(got.Code, got.Msg)
			return failed
		}
		if want := windowsWanted(&op); len(got.Windows) != want {
			return fmt.Errorf("its answer for shard %d: %d windows for %d keys", s, len(got.Windows), want)
		}
		out = got
		return nil
	})
	if err != nil && failed != nil && errors.Is(err, failed) {
		// The holder's refusal, as it answers it itself (a range of too
		// many points is the client's error, not the route's).
		return route.Windows{}, h, failed
	}
	if err != nil {
		return route.Windows{}, h, err
	}
	return out, h, nil
}

// windowsWanted is how many windows op's answer holds: one per key.
func windowsWanted(op *route.Op) int {
	if op.Kind == route.OpWindow {
		return 1
	}
	return len(op.List)
}
