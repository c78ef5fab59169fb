package route_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/route"
	"github.com/tally-dev/tally/shard"
)

// call is one message a handTransport carries, answered by the test.
type call struct {
	replica string
	req     route.Request
	reply   chan callReply
}

type callReply struct {
	data []byte
	err  error
}

// handTransport hands each message to the test, which answers it.
type handTransport struct{ calls chan call }

func (h handTransport) Request(ctx context.Context, replica string, data []byte) ([]byte, error) {
	req, err := route.UnmarshalRequest(data)
	if err != nil {
		return nil, err
	}
	c := call{replica: replica, req: req, reply: make(chan callReply, 1)}
	select {
	case h.calls <- c:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case r := <-c.reply:
		return r.data, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// batchBench is a sender, us-1, sending to a shard it does not hold, on a
// handTransport, one message in flight per holder.
type batchBench struct {
	t       *testing.T
	snd     *route.Sender
	calls   chan call
	shard   int
	holders []string
}

func newBatchBench(t *testing.T, tweak ...func(*route.SenderConfig)) *batchBench {
	m, err := shard.Assign("us", []string{"us-1", "us-2", "us-3"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	s, held := 0, m.Held("us-1")
	for held.Has(s) {
		s++
	}
	b := &batchBench{t: t, calls: make(chan call), shard: s, holders: m.Preferred(s)}
	cfg := route.SenderConfig{Self: "us-1", Map: func() shard.Map { return m },
		Transport: handTransport{calls: b.calls}, InFlight: 1}
	for _, f := range tweak {
		f(&cfg)
	}
	b.snd = route.NewSender(cfg)
	return b
}

// sent is how one Send ended.
type sent struct {
	ans route.Answer
	by  string
	err error
}

// send starts a Send of a like of item and returns where it ends.
func (b *batchBench) send(item string) chan sent { return b.sendWithin(item, 10*time.Second) }

// sendWithin is send with a deadline d from now.
func (b *batchBench) sendWithin(item string, d time.Duration) chan sent {
	out := make(chan sent, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		a, by, err := b.snd.Send(ctx, route.Request{Kind: route.KindOps, Shard: b.shard, Ops: []route.Op{{Kind: route.OpLike, Key: item, User: "u"}}})
		out <- sent{a, by, err}
	}()
	return out
}

// queue starts Sends of items one after the other, each once the one
// before waits for holder h: the order they wait in is theirs.
func (b *batchBench) queue(h string, items ...string) []chan sent {
	var out []chan sent
	for _, it := range items {
		n := b.snd.Waiting(h)
		out = append(out, b.send(it))
		for b.snd.Waiting(h) != n+1 {
			time.Sleep(time.Millisecond)
		}
	}
	return out
}

func (b *batchBench) next() call {
	select {
	case c := <-b.calls:
		return c
	case <-time.After(10 * time.Second):
		b.t.Fatal("no message sent")
		return call{}
	}
}

// served is the answer of a holder to req: its items, named.
func served(holder string, req route.Request) route.Answer {
	return route.Answer{Kind: route.Served, Body: []byte(holder + " liked " + req.Ops[0].Key)}
}

func reply(c call, a route.Answer) { c.reply <- callReply{data: a.Marshal()} }

func replyBatch(c call, as ...route.Answer) {
	reply(c, route.Answer{Kind: route.Answers, Body: route.MarshalAnswers(as)})
}

func items(req route.Request) string {
	var out []string
	for _, r := range req.Batch {
		out = append(out, r.Ops[0].Key)
	}
	return strings.Join(out, ",")
}

// While a request to a holder is in flight, the next ones wait, and go
// as one batch when it comes back, in the order they came; each is
// answered with its own answer: one served, one refused by the holder
// (it goes on to the next holder, having been applied nowhere), one the
// holder did not answer (it may have been applied: a timeout, never
// tried elsewhere).
func TestSenderBatchesWhileInFlight(t *testing.T) {
	b := newBatchBench(t)
	first, second := b.holders[0], b.holders[1]
	a := b.send("a")
	c := b.next()
	if c.replica != first || c.req.Kind != route.KindOps {
		t.Fatalf("the first request went alone to %s: kind %d", c.replica, c.req.Kind)
	}
	waiting := b.queue(first, "b", "c", "d")
	reply(c, served(first, c.req))

	batch := b.next()
	if batch.replica != first || batch.req.Kind != route.KindBatch || items(batch.req) != "b,c,d" {
		t.Fatalf("to %s, kind %d, items %s; want a batch of b,c,d to %s", batch.replica, batch.req.Kind, items(batch.req), first)
	}
	replyBatch(batch, served(first, batch.req.Batch[0]), route.Answer{Kind: route.NotServed, Reason: "shard not held"}, route.Answer{})
	// c, refused, goes on alone to the other holder.
	c = b.next()
	if c.replica != second || c.req.Kind != route.KindOps || c.req.Ops[0].Key != "c" {
		t.Fatalf("after the refusal: to %s, kind %d; want c alone to %s", c.replica, c.req.Kind, second)
	}
	reply(c, served(second, c.req))

	want := []string{
		"a: served by " + first + ": " + first + " liked a",
		"b: served by " + first + ": " + first + " liked b",
		"c: served by " + second + ": " + second + " liked c",
		"d: failed, may have applied",
	}
	for i, ch := range append([]chan sent{a}, waiting...) {
		r := <-ch
		got := fmt.Sprintf("%c: served by %s: %s", 'a'+i, r.by, r.ans.Body)
		if r.err != nil {
			if errors.Is(r.err, route.ErrNoHolder) || !errors.Is(r.err, context.DeadlineExceeded) {
				t.Errorf("%c: %v; want a timeout that may have applied", 'a'+i, r.err)
			}
			got = fmt.Sprintf("%c: failed, may have applied", 'a'+i)
		}
		if got != want[i] {
			t.Errorf("got %q, want %q", got, want[i])
		}
	}
}

// A holder down when a batch reaches it applied none of its requests:
// each goes on to the next holder, and is served there. A holder that
// lets a batch time out may have applied any: each request fails as a
// timeout, is tried nowhere else, and the holder is tried last for a
// while.
func TestSenderBatchToAHolderDownOrStuck(t *testing.T) {
	for _, how := range []string{"down", "stuck"} {
		t.Run(how, func(t *testing.T) {
			b := newBatchBench(t)
			first, second := b.holders[0], b.holders[1]
			a := b.send("a")
			c := b.next()
			waiting := b.queue(first, "b", "c", "d")
			reply(c, served(first, c.req))
			if r := <-a; r.err != nil || r.by != first {
				t.Fatalf("a: %s %v", r.by, r.err)
			}
			batch := b.next()
			if batch.req.Kind != route.KindBatch || items(batch.req) != "b,c,d" {
				t.Fatalf("kind %d, items %s; want a batch of b,c,d", batch.req.Kind, items(batch.req))
			}
			if how == "stuck" {
				batch.reply <- callReply{err: fmt.Errorf("no answer in time: %w", context.DeadlineExceeded)}
				for i, ch := range waiting {
					if r := <-ch; !errors.Is(r.err, context.DeadlineExceeded) || errors.Is(r.err, route.ErrNoHolder) {
						t.Errorf("%c: %s %v; want a timeout that may have applied", 'b'+i, r.by, r.err)
					}
				}
				if !b.snd.Suspected(first) {
					t.Errorf("%s let a batch time out and is not suspected", first)
				}
				select {
				case c := <-b.calls:
					t.Fatalf("a request of a batch that may have applied was sent again, to %s", c.replica)
				default:
				}
				return
			}
			batch.reply <- callReply{err: route.ErrNoResponders}
			// The other holder serves whatever comes, alone or batched.
			done := make(chan struct{})
			defer close(done)
			go func() {
				for {
					select {
					case c := <-b.calls:
						if c.replica != second {
							t.Errorf("after %s was down: a message to %s", first, c.replica)
						}
						if c.req.Kind != route.KindBatch {
							reply(c, served(c.replica, c.req))
							continue
						}
						as := make([]route.Answer, len(c.req.Batch))
						for i := range c.req.Batch {
							as[i] = served(c.replica, c.req.Batch[i])
						}
						replyBatch(c, as...)
					case <-done:
						return
					}
				}
			}()
			for i, ch := range waiting {
				item := string(rune('b' + i))
				if r := <-ch; r.err != nil || r.by != second || string(r.ans.Body) != second+" liked "+item {
					t.Errorf("%s: %s %q %v; want served by %s", item, r.by, r.ans.Body, r.err, second)
				}
			}
		})
	}
}

// Requests one after another, none in flight when the next comes, each
// go alone as before batching: nothing waits at low load.
func TestSenderSendsAloneAtLowLoad(t *testing.T) {
	b := newBatchBench(t)
	for _, it := range []string{"a", "b", "c"} {
		ch := b.send(it)
		c := b.next()
		if c.req.Kind != route.KindOps || c.req.Ops[0].Key != it {
			t.Fatalf("%s went as kind %d", it, c.req.Kind)
		}
		reply(c, served(c.replica, c.req))
		if r := <-ch; r.err != nil {
			t.Fatal(r.err)
		}
	}
}

// A batch holds at most BatchBytes of requests: the rest wait for the
// next message; one left alone goes as its own request.
func TestSenderBatchBound(t *testing.T) {
	one := (&route.Request{Kind: route.KindOps, From: "us-1", Shard: 1, DeadlineMs: time.Now().UnixMilli(),
		Ops: []route.Op{{Kind: route.OpLike, Key: "b", User: "u"}}}).Marshal()
	b := newBatchBench(t, func(c *route.SenderConfig) { c.BatchBytes = 2*len(one) + 2 })
	first := b.holders[0]
	a := b.send("a")
	c := b.next()
	waiting := b.queue(first, "b", "c", "d")
	reply(c, served(first, c.req))
	c = b.next()
	if c.req.Kind != route.KindBatch || items(c.req) != "b,c" {
		t.Fatalf("kind %d, items %s; want a batch of b,c", c.req.Kind, items(c.req))
	}
	replyBatch(c, served(first, c.req.Batch[0]), served(first, c.req.Batch[1]))
	c = b.next()
	if c.req.Kind != route.KindOps || c.req.Ops[0].Key != "d" {
		t.Fatalf("then kind %d; want d alone", c.req.Kind)
	}
	reply(c, served(first, c.req))
	for i, ch := range append([]chan sent{a}, waiting...) {
		if r := <-ch; r.err != nil || string(r.ans.Body) != first+" liked "+string(rune('a'+i)) {
			t.Errorf("%c: %q %v", 'a'+i, r.ans.Body, r.err)
		}
	}
}

// A request whose deadline passes while it waits leaves the queue unsent:
// a timeout, and the message that comes back sends nothing for it.
func TestSenderDropsARequestPastItsDeadlineUnsent(t *testing.T) {
	b := newBatchBench(t)
	first := b.holders[0]
	a := b.send("a")
	c := b.next()
	late := b.sendWithin("b", 50*time.Millisecond)
	r := <-late
	if !errors.Is(r.err, context.DeadlineExceeded) || !strings.Contains(r.err.Error(), "queued for "+first) {
		t.Fatalf("b: %v; want a timeout while queued", r.err)
	}
	if n := b.snd.Waiting(first); n != 0 {
		t.Fatalf("%d still waiting", n)
	}
	reply(c, served(first, c.req))
	if r := <-a; r.err != nil {
		t.Fatal(r.err)
	}
	select {
	case c := <-b.calls:
		t.Fatalf("a message after the only one came back: %+v", c.req)
	case <-time.After(50 * time.Millisecond):
	}
}

// Answers to a batch that do not match it (too few, or a single
// request's answer) were served, so each request may have applied: each
// fails, and none is sent elsewhere.
func TestSenderBatchWithAnswersThatDoNotMatch(t *testing.T) {
	for name, bad := range map[string]func(call){
		"too few": func(c call) { replyBatch(c, served(c.replica, c.req.Batch[0])) },
		"one":     func(c call) { reply(c, route.Answer{Kind: route.Served, Body: []byte("x")}) },
	} {
		t.Run(name, func(t *testing.T) {
			b := newBatchBench(t)
			first := b.holders[0]
			a := b.send("a")
			c := b.next()
			waiting := b.queue(first, "b", "c")
			reply(c, served(first, c.req))
			<-a
			bad(b.next())
			for i, ch := range waiting {
				if r := <-ch; r.err == nil || errors.Is(r.err, route.ErrNoHolder) || errors.Is(r.err, route.ErrNotServed) {
					t.Errorf("%c: %q %v; want a failure that may have applied", 'b'+i, r.ans.Body, r.err)
				}
			}
			select {
			case c := <-b.calls:
				t.Fatalf("a request that may have applied was sent again, to %s", c.replica)
			case <-time.After(20 * time.Millisecond):
			}
		})
	}
}
