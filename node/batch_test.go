package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/route"
	"github.com/tally-dev/tally/shard"
)

// heldAndNot is two shards of m: one replica holds and one it does not,
// and a key on each.
func heldAndNot(t *testing.T, m shard.Map, replica string) (held, notHeld int, heldKey, otherKey string) {
	t.Helper()
	hs := m.Held(replica)
	held, notHeld = -1, -1
	for i := 0; (heldKey == "" || otherKey == "") && i < 100000; i++ {
		k := fmt.Sprintf("k%d", i)
		s := shard.Of(k)
		switch {
		case hs.Has(s) && heldKey == "":
			held, heldKey = s, k
		case !hs.Has(s) && otherKey == "":
			notHeld, otherKey = s, k
		}
	}
	if heldKey == "" || otherKey == "" {
		t.Fatal("no keys found")
	}
	return held, notHeld, heldKey, otherKey
}

// recordingWriter is a writer that refuses a batch with a key not held
// (as region.Replica.Do, having applied nothing), refuses an operation
// of By < 0 on its own, applies the others, and records each call.
type recordingWriter struct {
	mu    sync.Mutex
	holds func(int) bool
	calls [][]string // each call's keys
}

func (w *recordingWriter) do(_ context.Context, ops []region.Op) ([]region.Result, error) {
	for i := range ops {
		if !w.holds(shard.Of(ops[i].Item)) {
			return nil, fmt.Errorf("%w: %q", region.ErrNotHeld, ops[i].Item)
		}
	}
	w.mu.Lock()
	var keys []string
	for i := range ops {
		keys = append(keys, ops[i].Item)
	}
	w.calls = append(w.calls, keys)
	w.mu.Unlock()
	res := make([]region.Result, len(ops))
	for i := range ops {
		if ops[i].By < 0 {
			res[i].Err = region.ErrInvalid
		} else {
			res[i].Value = ops[i].By
		}
	}
	return res, nil
}

func (w *recordingWriter) done() [][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([][]string(nil), w.calls...)
}

// incr is a forwarded request of one increment of key by n, on shard s,
// with deadline d.
func incr(s int, key string, n int64, d time.Time) route.Request {
	return route.Request{Kind: route.KindOps, From: "us-1", Shard: s, DeadlineMs: d.UnixMilli(),
		Ops: []route.Op{{Kind: route.OpIncr, Key: key, By: n}}}
}

// answers decodes a batch's answers, one line each.
func answers(t *testing.T, a route.Answer) []string {
	t.Helper()
	if a.Kind != route.Answers {
		t.Fatalf("answer of kind %d to a batch", a.Kind)
	}
	as, err := route.UnmarshalAnswers(a.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(as))
	for i, x := range as {
		switch x.Kind {
		case route.Unanswered:
			out[i] = "unanswered"
		case route.NotServed:
			out[i] = "not served: " + x.Reason
		default:
			rs, err := route.UnmarshalResults(x.Body)
			if err != nil {
				t.Fatal(err)
			}
			var parts []string
			for _, r := range rs {
				if r.Code != "" {
					parts = append(parts, "refused "+r.Code)
				} else {
					parts = append(parts, fmt.Sprint(r.Value))
				}
			}
			out[i] = "served: " + strings.Join(parts, ",")
		}
	}
	return out
}

// A holder applies a batch's writes in one call of its writer, in order,
// and answers every request of the batch in order: a write refused on
// its own is that request's answer and the others are applied; a
// request for a shard not held here is NotServed and applied nowhere; a
// request that came past its deadline is unanswered (its sender has
// answered "timeout"), and one near it is applied alone, so that its
// deadline bounds no other's; reads and writes together are refused as
// alone.
func TestHolderAppliesABatchInOneCall(t *testing.T) {
	_, m := threeReplicas(t)
	s, other, key, otherKey := heldAndNot(t, m, "us-2")
	sr := newShardRouter("us", "us-2", m, nil, nil, nil, 5*time.Second, hclog.NewNullLogger())
	w := &recordingWriter{holds: sr.Holds}
	sr.do = w.do
	now := time.Now()
	later := now.Add(5 * time.Second)
	mixed := incr(s, key, 1, later)
	mixed.Ops = append(mixed.Ops, route.Op{Kind: route.OpGet, Key: key})
	batch := route.Request{Kind: route.KindBatch, From: "us-1", Shard: -1, DeadlineMs: later.UnixMilli(), Batch: []route.Request{
		incr(s, key, 1, later),
		incr(other, otherKey, 2, later),
		incr(s, key, -3, later),
		incr(s, key, 4, now.Add(-time.Second)),
		mixed,
		incr(s, key, 5, later),
		incr(s, key, 6, now.Add(groupMargin/2)),
	}}
	a, ok := sr.handle(batch.Marshal())
	if !ok {
		t.Fatal("the batch was not answered")
	}
	got := answers(t, a)
	want := []string{
		"served: 1",
		fmt.Sprintf("not served: shard %d is not held here", other),
		"served: refused bad_request",
		"unanswered",
		"served: refused bad_request",
		"served: 5",
		"served: 6",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("answers:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var sizes []int
	for _, c := range w.done() {
		sizes = append(sizes, len(c))
	}
	if slices.Sort(sizes); fmt.Sprint(sizes) != "[1 3]" {
		t.Fatalf("writer calls of %v operations; want one of the three writes served together, and the one near its deadline alone", sizes)
	}
}

// When the writer refuses a batch's writes whole, having applied none (a
// request whose key is on a shard not held here, whatever shard it says),
// each request is served on its own: that one is NotServed, the others
// applied.
func TestHolderServesABatchAloneWhenTheWriterRefusesItWhole(t *testing.T) {
	_, m := threeReplicas(t)
	s, _, key, otherKey := heldAndNot(t, m, "us-2")
	sr := newShardRouter("us", "us-2", m, nil, nil, nil, 5*time.Second, hclog.NewNullLogger())
	w := &recordingWriter{holds: sr.Holds}
	sr.do = w.do
	later := time.Now().Add(5 * time.Second)
	batch := route.Request{Kind: route.KindBatch, From: "us-1", Shard: -1, DeadlineMs: later.UnixMilli(), Batch: []route.Request{
		incr(s, key, 1, later),
		incr(s, otherKey, 2, later), // says shard s, but its key is elsewhere
		incr(s, key, 3, later),
	}}
	a, ok := sr.handle(batch.Marshal())
	if !ok {
		t.Fatal("the batch was not answered")
	}
	got := answers(t, a)
	if got[0] != "served: 1" || !strings.HasPrefix(got[1], "not served: region: ") || got[2] != "served: 3" {
		t.Fatalf("answers %q", got)
	}
	if calls := w.done(); len(calls) != 2 {
		t.Fatalf("writer calls %v; want the two writes applied, alone", calls)
	}
}

// gatedWriter applies every operation once open is closed, counting its
// calls and the operations of each.
type gatedWriter struct {
	open  chan struct{}
	calls atomic.Int32
	mu    sync.Mutex
	sizes []int
}

func (g *gatedWriter) do(ctx context.Context, ops []region.Op) ([]region.Result, error) {
	g.calls.Add(1)
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	g.mu.Lock()
	g.sizes = append(g.sizes, len(ops))
	g.mu.Unlock()
	res := make([]region.Result, len(ops))
	for i := range ops {
		res[i].Value = ops[i].By
	}
	return res, nil
}

// Over NATS: while the sender's messages to a holder are in flight
// (route.DefaultInFlight of them), the next forwarded writes wait and
// then go as one batch, which the holder applies in one call of its
// writer; each Apply gets its own result.
func TestForwardedWritesBatchOverNATS(t *testing.T) {
	conn, m := threeReplicas(t)
	s, first, key := keyHeldElsewhere(m, "us-1")
	g := &gatedWriter{open: make(chan struct{})}
	nc := conn()
	holder := newShardRouter("us", first, m, nc, natsTransport{nc: nc, region: "us"}, nil, 5*time.Second, hclog.NewNullLogger())
	holder.do = g.do
	if err := holder.serve(nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(holder.close)
	nc = conn()
	entry := newShardRouter("us", "us-1", m, nc, natsTransport{nc: nc, region: "us"}, nil, 5*time.Second, hclog.NewNullLogger())

	const n = 7
	var wg sync.WaitGroup
	errs := make([]error, n)
	got := make([]int64, n)
	apply := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, by, err := entry.Apply(context.Background(), s, []region.Op{{Kind: region.OpIncr, Item: key, By: int64(i + 1)}}, false)
			if err == nil && by != first {
				err = fmt.Errorf("served by %s", by)
			}
			if err == nil {
				got[i] = res[0].Value
			}
			errs[i] = err
		}()
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s", what)
			}
		}
	}
	for i := range route.DefaultInFlight {
		apply(i)
	}
	waitFor("the messages in flight at the writer", func() bool { return g.calls.Load() == route.DefaultInFlight })
	for i := route.DefaultInFlight; i < n; i++ {
		apply(i)
		waitFor("the request to wait", func() bool { return entry.sender.Waiting(first) == i-route.DefaultInFlight+1 })
	}
	close(g.open)
	wg.Wait()
	for i := range n {
		if errs[i] != nil || got[i] != int64(i+1) {
			t.Errorf("apply %d: %d, %v", i, got[i], errs[i])
		}
	}
	if c := g.calls.Load(); c != route.DefaultInFlight+1 {
		t.Errorf("%d writer calls (of sizes %v); want %d alone and one batch", c, g.sizes, route.DefaultInFlight)
	}
}

// keyHeldElsewhere is the first shard that replica does not hold, its
// preferred holder and a key of it: a write of the key at replica is
// forwarded to the holder.
func keyHeldElsewhere(m shard.Map, replica string) (s int, holder, key string) {
	held := m.Held(replica)
	for held.Has(s) {
		s++
	}
	for i := 0; ; i++ {
		if k := fmt.Sprintf("k%d", i); shard.Of(k) == s {
			return s, m.Preferred(s)[0], k
		}
	}
}
