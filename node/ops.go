package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/route"
)

// Typed operations between the replicas of a sharded region
// (route.KindOps): an entry replica hands region operations to the router
// (shardRouter.Apply), which runs them here when this replica holds their
// shard and otherwise sends them, typed, to a holder that does. No HTTP
// or RESP bytes, no client header: the entry replica checked the client.

// wireErrors are the region errors a typed operation's result carries, by
// the code that names each on the wire (the API's codes where it has one).
var wireErrors = [...]struct {
	code string
	err  error
}{
	{"budget_exhausted", region.ErrBudgetExhausted},
	{"rights_elsewhere", region.ErrRightsElsewhere},
	{"idempotency_mismatch", region.ErrIdempotencyMismatch},
	{"fenced", region.ErrFenced},
	{"bad_request", region.ErrInvalid},
	{"overflow", region.ErrOverflow},
	{"bad_time", region.ErrBadTime},
	{"blocked", region.ErrBlocked},
	{"inactive_type", region.ErrInactiveType},
	{"no_lists", region.ErrNoLists},
	{"no_log", region.ErrNoLog},
	{"no_window", region.ErrNoWindow},
	{"shutting_down", region.ErrClosed},
	{"storage_failed", region.ErrFailed},
}

// errCode is err's wire code; "internal" for an error of no other code.
func errCode(err error) string {
	for _, w := range wireErrors {
		if errors.Is(err, w.err) {
			return w.code
		}
	}
	return "internal"
}

// codeErr is the error a result's code and message stand for, matching
// its region sentinel with errors.Is and reading as the holder's error
// did, so a front door answers it as it answers its own replica's.
func codeErr(code, msg string) error {
	for _, w := range wireErrors {
		if w.code == code {
			return &holderError{err: w.err, msg: msg}
		}
	}
	return fmt.Errorf("the holder failed the operation: %s (%s)", msg, code)
}

// holderError is a region error a holder answered: its message, less
// the "region: " prefix (wireResult), and its sentinel.
type holderError struct {
	err error
	msg string
}

func (e *holderError) Error() string { return "region: " + e.msg }
func (e *holderError) Unwrap() error { return e.err }

// opKinds pairs each typed operation's wire kind with its region kind;
// imp marks a backfill's (region.Op.Import).
var opKinds = [...]struct {
	wire route.OpKind
	op   region.OpKind
	imp  bool
}{
	{route.OpSpend, region.OpSpend, false},
	{route.OpIncr, region.OpIncr, false},
	{route.OpGrant, region.OpGrant, false},
	{route.OpFence, region.OpFence, false},
	{route.OpCashback, region.OpCashback, false},
	{route.OpLike, region.OpLike, false},
	{route.OpUnlike, region.OpUnlike, false},
	{route.OpCallOff, region.OpCallOff, false},
	{route.OpCallOffCredit, region.OpCallOffCredit, false},
	{route.OpToggle, region.OpToggle, false},
	{route.OpUniques, region.OpUniques, false},
	{route.OpImportLike, region.OpLike, true},
	{route.OpImportUnlike, region.OpUnlike, true},
	{route.OpImportIncr, region.OpIncr, true},
	{route.OpImportUniques, region.OpUniques, true},
}

func wireOp(o *region.Op) (route.Op, error) {
	for _, k := range opKinds {
		if k.op == o.Kind && k.imp == o.Import {
			return route.Op{Kind: k.wire, Key: o.Item, User: o.User, Merchant: o.Merchant, Idem: o.IdemKey, By: o.By, AtMs: o.At, List: o.IDs}, nil
		}
	}
	what := "a " + o.Kind.String()
	if o.Import {
		what = "an imported " + o.Kind.String()
	}
	return route.Op{}, fmt.Errorf("%w: %s is not sent to another replica", region.ErrInvalid, what)
}

func regionOp(o *route.Op) region.Op {
	out := region.Op{Item: o.Key, User: o.User, Merchant: o.Merchant, IdemKey: o.Idem, By: o.By, At: o.AtMs, IDs: o.List}
	for _, k := range opKinds {
		if k.wire == o.Kind {
			out.Kind, out.Import = k.op, k.imp
		}
	}
	return out
}

func wireResult(r *region.Result) route.Result {
	out := route.Result{Refused: r.Refused, Value: r.Value, Merchant: r.Merchant, User: r.UserValue, Rights: r.Rights, Duplicate: r.Duplicate,
		Liked: r.Liked, Changed: r.Changed, Approx: r.Approx, Counted: r.Counted}
	if r.Err != nil {
		out.Code, out.Msg = errCode(r.Err), strings.TrimPrefix(r.Err.Error(), "region: ")
	}
	return out
}

func regionResult(r *route.Result) region.Result {
	out := region.Result{Refused: r.Refused, Value: r.Value, Merchant: r.Merchant, UserValue: r.User, Rights: r.Rights, Duplicate: r.Duplicate,
		Liked: r.Liked, Changed: r.Changed, Approx: r.Approx, Counted: r.Counted}
	if r.Code != "" {
		out.Err = codeErr(r.Code, r.Msg)
	}
	return out
}

// Apply runs ops, every one of a key on shard s, at a holder of s, this
// replica among them, by the region's one routing rule
// (route.Sender.Walk): the next holder is tried only where one applied
// nothing (down, not ready, not holding s). With primary, only the first
// preferred holder, which every replica of the region agrees on: what
// must be decided in one place (a purchase's fence) is. It returns their
// results in order. An error wrapping route.ErrNoHolder means no holder
// took them: nothing was applied. Any other error may have applied them.
func (sr *shardRouter) Apply(ctx context.Context, s int, ops []region.Op, primary bool) ([]region.Result, string, error) {
	req := route.Request{Kind: route.KindOps, From: sr.self, Shard: s, Ops: make([]route.Op, len(ops))}
	for i := range ops {
		var err error
		if req.Ops[i], err = wireOp(&ops[i]); err != nil {
			return nil, "", err
		}
	}
	ctx, cancel := sr.withDeadline(ctx, &req)
	defer cancel()
	var data []byte
	var out []region.Result
	h, err := sr.sender.Walk(s, route.Walk{Primary: primary, WithSelf: true}, func(h string) error {
		if h == sr.self {
			if sr.do == nil {
				return route.Refusal("not open")
			}
			res, err := sr.do(ctx, ops)
			if errors.Is(err, region.ErrNotHeld) || errors.Is(err, region.ErrNotReady) {
				return route.Refusal(err.Error())
			}
			out = res
			return err
		}
		rs, err := sr.askOps(ctx, h, &req, &data, false)
		if err != nil {
			return err
		}
		out = make([]region.Result, len(rs))
		for i := range rs {
			out[i] = regionResult(&rs[i])
		}
		return nil
	})
	if err != nil {
		return nil, h, err
	}
	return out, h, nil
}

// serveOps runs forwarded typed operations with the writer, under the
// sender's deadline. ok is false when nothing may be answered: the writer
// may or may not have applied them (the sender's timeout says so).
func (sr *shardRouter) serveOps(req route.Request, deadline time.Time) (route.Answer, bool) {
	if reads, ok := readsOnly(req.Ops); !ok {
		return badOps("a request of reads and writes together"), true
	} else if reads && hasHistory(req.Ops) {
		return sr.serveHistory(req, deadline), true
	} else if reads && hasKind(req.Ops, route.OpUniqueRead) {
		return sr.serveUniques(req), true
	} else if reads && hasWindow(req.Ops) {
		return sr.serveWindows(req), true
	} else if reads {
		return sr.serveReads(req), true
	}
	if sr.do == nil {
		return route.Answer{Kind: route.NotServed, Reason: "not open"}, true
	}
	ops := make([]region.Op, len(req.Ops))
	for i := range req.Ops {
		ops[i] = regionOp(&req.Ops[i])
		if ops[i].Kind == 0 {
			return badOps("unknown operation"), true
		}
	}
	ctx, cancel := context.WithDeadline(sr.ctx, deadline)
	defer cancel()
	res, err := sr.do(ctx, ops)
	switch {
	case errors.Is(err, region.ErrNotHeld), errors.Is(err, region.ErrNotReady):
		return route.Answer{Kind: route.NotServed, Reason: err.Error()}, true
	case err != nil:
		sr.log.Warn("forwarded operations", "ops", len(ops), "error", err)
		return route.Answer{}, false
	}
	out := make([]route.Result, len(res))
	for i := range res {
		out[i] = wireResult(&res[i])
	}
	return route.Answer{Kind: route.Served, Body: route.MarshalResults(out)}, true
}

// badOps answers a request of operations the holder refuses whole.
func badOps(why string) route.Answer {
	return route.Answer{Kind: route.Served, Body: route.MarshalResults([]route.Result{{Code: "bad_request", Msg: why}})}
}

// readsOnly reports whether ops are all reads; ok is false when they mix
// reads and writes.
func readsOnly(ops []route.Op) (reads, ok bool) {
	n := 0
	for i := range ops {
		if ops[i].Kind.Read() {
			n++
		}
	}
	return n > 0, n == 0 || n == len(ops)
}

// serveReads answers forwarded reads from this replica's view
// (route.Read); a failed read fails each result with its code.
func (sr *shardRouter) serveReads(req route.Request) route.Answer {
	if sr.rep == nil {
		return route.Answer{Kind: route.NotServed, Reason: "not open"}
	}
	out, err := route.ReadFrom(sr.source(), req.Ops)
	if err != nil {
		out = make([]route.Result, len(req.Ops))
		for i := range out {
			out[i].Code, out[i].Msg = errCode(err), strings.TrimPrefix(err.Error(), "region: ")
		}
	}
	return route.Answer{Kind: route.Served, Body: route.MarshalResults(out)}
}

// source is what this replica answers reads from: the replica, and its
// replication's staleness for the view reads and gathering of a like's
// history.
func (sr *shardRouter) source() route.Source {
	src := route.Source{Replica: sr.rep}
	if sr.stale != nil {
		src.Staleness, src.Historian = sr.stale, sr.stale
	}
	return src
}

// hasHistory reports whether ops hold an OpHistory.
func hasHistory(ops []route.Op) bool { return hasKind(ops, route.OpHistory) }

// hasKind reports whether ops hold an operation of kind k.
func hasKind(ops []route.Op, k route.OpKind) bool {
	for i := range ops {
		if ops[i].Kind == k {
			return true
		}
	}
	return false
}

// serveHistory answers a forwarded OpHistory, alone in its request, with
// the history this replica gathers (route.ReadHistory), under the
// sender's deadline; a failed read is its code.
func (sr *shardRouter) serveHistory(req route.Request, deadline time.Time) route.Answer {
	if len(req.Ops) != 1 {
		return route.Answer{Kind: route.Served, Body: route.MarshalHistory(&route.History{Code: "bad_request", Msg: "a like's history is read alone"})}
	}
	if sr.rep == nil {
		return route.Answer{Kind: route.NotServed, Reason: "not open"}
	}
	ctx, cancel := context.WithDeadline(sr.ctx, deadline)
	defer cancel()
	var out route.History
	h, err := route.ReadHistoryOp(ctx, sr.source(), &req.Ops[0])
	if err != nil {
		out.Code, out.Msg = errCode(err), strings.TrimPrefix(err.Error(), "region: ")
	} else {
		out.PairHistory = h
	}
	return route.Answer{Kind: route.Served, Body: route.MarshalHistory(&out)}
}

// History reads the history of user's like of item (or part), on shard
// s, the newest limit actions of each replica, at a holder of s, this
// replica among them (route.Sender.Walk), and returns it and who
// answered it; a read that failed at the holder is its error.
func (sr *shardRouter) History(ctx context.Context, s int, item, user string, limit int) (region.PairHistory, string, error) {
	op := route.HistoryOp(item, user, limit)
	req := route.Request{Kind: route.KindOps, From: sr.self, Shard: s, Ops: []route.Op{op}}
	ctx, cancel := sr.withDeadline(ctx, &req)
	defer cancel()
	var data []byte
	var out region.PairHistory
	var failed error // the holder's answer that the read failed
	h, err := sr.sender.Walk(s, route.Walk{WithSelf: true}, func(h string) error {
		if h == sr.self {
			if sr.rep == nil {
				return route.Refusal("not open")
			}
			var err error
			out, err = route.ReadHistoryOp(ctx, sr.source(), &op)
			return err
		}
		if data == nil {
			data = req.Marshal()
		}
		a, err := sr.sender.AskAlone(ctx, h, data) // gathered from the holder's peers: never held in a batch
		if err != nil {
			return err
		}
		got, err := route.UnmarshalHistory(a.Body)
		if err != nil {
			return fmt.Errorf("its answer for shard %d: %w", s, err)
		}
		if got.Code != "" {
			failed = codeErr(got.Code, got.Msg) // served: its error reads as the holder's own
			return nil
		}
		out = got.PairHistory
		return nil
	})
	if err == nil {
		err = failed
	}
	if err != nil {
		return region.PairHistory{}, h, err
	}
	return out, h, nil
}

// Read answers reads (route.OpKind.Read), every one of a key on shard s,
// at a holder of s, this replica among them, by the region's one routing
// rule (route.Sender.Walk), and returns their results in order and who
// answered them; a read that failed at the holder is the error.
func (sr *shardRouter) Read(ctx context.Context, s int, ops []route.Op) ([]route.Result, string, error) {
	req := route.Request{Kind: route.KindOps, From: sr.self, Shard: s, Ops: ops}
	ctx, cancel := sr.withDeadline(ctx, &req)
	defer cancel()
	var data []byte
	var out []route.Result
	var failed error // the holder's answer that the reads failed
	h, err := sr.sender.Walk(s, route.Walk{WithSelf: true}, func(h string) error {
		if h == sr.self {
			if sr.rep == nil {
				return route.Refusal("not open")
			}
			var err error
			out, err = route.ReadFrom(sr.source(), ops)
			return err
		}
		rs, err := sr.askOps(ctx, h, &req, &data, true)
		if err != nil {
			return err
		}
		for i := range rs {
			if rs[i].Code != "" {
				failed = codeErr(rs[i].Code, rs[i].Msg) // served: its error reads as the holder's own
				return nil
			}
		}
		out = rs
		return nil
	})
	if err == nil {
		err = failed
	}
	if err != nil {
		return nil, h, err
	}
	return out, h, nil
}

// askOps sends req, a request of typed operations, to holder h (encoding
// it into *data once, for every holder tried) and decodes the results:
// one per operation, or, for reads, one refusal standing for them all.
// An answer that does not decode is an error that never says "nothing
// applied": it was served, so a write may have applied.
func (sr *shardRouter) askOps(ctx context.Context, h string, req *route.Request, data *[]byte, reads bool) ([]route.Result, error) {
	if *data == nil {
		*data = req.Marshal()
	}
	a, err := sr.sender.Ask(ctx, h, *data)
	if err != nil {
		return nil, err
	}
	rs, err := route.UnmarshalResults(a.Body)
	if err == nil && len(rs) != len(req.Ops) && !(reads && len(rs) == 1 && rs[0].Code != "") {
		err = fmt.Errorf("%d results for %d operations", len(rs), len(req.Ops))
	}
	if err != nil {
		return nil, fmt.Errorf("its answer for shard %d: %w", req.Shard, err)
	}
	return rs, nil
}

// withDeadline bounds ctx by the router's timeout and stamps req with
// that deadline, which the holder keeps to (shardRouter.handle).
func (sr *shardRouter) withDeadline(ctx context.Context, req *route.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, sr.timeout)
	if d, ok := ctx.Deadline(); ok {
		req.DeadlineMs = d.UnixMilli()
	}
	return ctx, cancel
}

// purchaseRouter is the router as package purchase takes it.
type purchaseRouter struct{ sr *shardRouter }

func (p purchaseRouter) Apply(ctx context.Context, s int, ops []region.Op, primary bool) ([]region.Result, error) {
	res, _, err := p.sr.Apply(ctx, s, ops, primary)
	return res, err
}
