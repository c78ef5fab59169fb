package route_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/tally-dev/tally/route"
	"github.com/tally-dev/tally/shard"
)

// The scripts under testdata/route drive Senders over an in-memory
// transport on a clock the test owns:
//
//	map replicas=us-1,us-2,us-3 copies=2   the region's map
//	holders shard=N                        its holders, and the order a sender tries them
//	pick from=R holders=A,B                a shard R does not hold whose holders are A and B
//	state R down|not-ready|not-held|stuck|ok   how replica R takes requests
//	send from=R shard=N                    who was asked, and how it ended
//	walk from=R shard=N [primary] [self]   the same by Sender.Walk: only the
//	                                       first preferred holder (primary),
//	                                       R itself among the holders, run
//	                                       "locally" as its state says (self)
//	tick D                                 the clock moves D
func TestSenderScripts(t *testing.T) {
	datadriven.Walk(t, "../testdata/route", func(t *testing.T, path string) {
		e := &scriptEnv{now: time.Unix(1_800_000_000, 0), states: map[string]string{}, senders: map[string]*route.Sender{}}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string { return e.handle(t, d) })
	})
}

type scriptEnv struct {
	m       shard.Map
	now     time.Time
	states  map[string]string // replica -> how it takes requests ("" ok)
	senders map[string]*route.Sender
	asked   []string
}

func (e *scriptEnv) handle(t *testing.T, d *datadriven.TestData) string {
	arg := func(key string) string {
		for _, a := range d.CmdArgs {
			if a.Key == key && len(a.Vals) > 0 {
				return strings.Join(a.Vals, ",")
			}
		}
		d.Fatalf(t, "%s needs %s=", d.Cmd, key)
		return ""
	}
	shardArg := func() int {
		var s int
		if _, err := fmt.Sscan(arg("shard"), &s); err != nil {
			d.Fatalf(t, "shard: %v", err)
		}
		return s
	}
	switch d.Cmd {
	case "map":
		var copies int
		fmt.Sscan(arg("copies"), &copies)
		m, err := shard.Assign("us", strings.Split(arg("replicas"), ","), copies)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		e.m = m
		return "ok"
	case "holders":
		s := shardArg()
		return fmt.Sprintf("holders %s; tried in the order %s", strings.Join(e.m.Holders(s), " "), strings.Join(e.m.Preferred(s), " "))
	case "pick":
		from, want := arg("from"), arg("holders")
		held := e.m.Held(from)
		for s := range shard.Global {
			if !held.Has(s) && strings.Join(e.m.Preferred(s), ",") == want {
				return fmt.Sprintf("shard %d", s)
			}
		}
		return "none"
	case "state":
		if len(d.CmdArgs) != 2 {
			d.Fatalf(t, "state R HOW")
		}
		e.states[d.CmdArgs[0].Key] = d.CmdArgs[1].Key
		return "ok"
	case "tick":
		if len(d.CmdArgs) != 1 {
			d.Fatalf(t, "tick D")
		}
		dur, err := time.ParseDuration(d.CmdArgs[0].Key)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		e.now = e.now.Add(dur)
		return "ok"
	case "send", "walk":
		from, s := arg("from"), shardArg()
		snd := e.senders[from]
		if snd == nil {
			snd = route.NewSender(route.SenderConfig{Self: from, Map: func() shard.Map { return e.m },
				Transport: e, Now: func() time.Time { return e.now }})
			e.senders[from] = snd
		}
		e.asked = nil
		ctx, cancel := context.WithDeadline(context.Background(), e.now.Add(10*time.Second))
		defer cancel()
		req := route.Request{Kind: route.KindOps, From: from, Shard: s, Ops: []route.Op{{Kind: route.OpLike, Key: "x", User: "u"}}}
		var a route.Answer
		var by string
		var err error
		if d.Cmd == "send" {
			a, by, err = snd.Send(ctx, req)
		} else {
			w := route.Walk{Primary: d.HasArg("primary"), WithSelf: d.HasArg("self")}
			by, err = snd.Walk(s, w, func(h string) error {
				if h == from { // run here: no transport
					e.asked = append(e.asked, h+"(here)")
					b, err := e.answer(h, req)
					if err != nil {
						return err
					}
					if b.Kind == route.NotServed {
						return route.Refusal(b.Reason)
					}
					a = b
					return nil
				}
				var err error
				a, err = snd.Ask(ctx, h, req.Marshal())
				return err
			})
		}
		out := "asked " + strings.Join(e.asked, " ") + "\n"
		switch {
		case errors.Is(err, route.ErrNoHolder):
			return out + "no holder: nothing applied: " + err.Error()
		case err != nil:
			return out + "failed, may have applied: " + err.Error()
		}
		return out + fmt.Sprintf("served by %s: %s", by, a.Body)
	}
	d.Fatalf(t, "unknown command %s", d.Cmd)
	return ""
}

// Request is the in-memory transport: each replica answers as its state
// says.
func (e *scriptEnv) Request(_ context.Context, replica string, data []byte) ([]byte, error) {
	e.asked = append(e.asked, replica)
	req, err := route.UnmarshalRequest(data)
	if err != nil {
		return nil, err
	}
	a, err := e.answer(replica, req)
	if err != nil {
		return nil, err
	}
	return a.Marshal(), nil
}

// answer is how replica answers req, as its state says.
func (e *scriptEnv) answer(replica string, req route.Request) (route.Answer, error) {
	var a route.Answer
	switch e.states[replica] {
	case "down":
		return a, route.ErrNoResponders
	case "stuck":
		return a, fmt.Errorf("no answer in time: %w", context.DeadlineExceeded)
	case "not-ready":
		a = route.Answer{Kind: route.NotServed, Reason: "not accepting writes yet"}
	case "not-held":
		a = route.Answer{Kind: route.NotServed, Reason: fmt.Sprintf("shard %d is not held here", req.Shard)}
	default:
		held := e.m.Held(replica)
		if !held.Has(req.Shard) {
			a = route.Answer{Kind: route.NotServed, Reason: fmt.Sprintf("shard %d is not held here", req.Shard)}
		} else {
			a = route.Answer{Kind: route.Served, Body: []byte("from " + req.From)}
		}
	}
	return a, nil
}
