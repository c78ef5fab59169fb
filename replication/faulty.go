package replication

import (
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Faults says what a FaultyTransport does to each published message.
// The zero Faults does nothing.
type Faults struct {
	// Drop is the probability that a message is lost.
	Drop float64
	// Dup is the probability that a message not lost is sent twice.
	Dup float64
	// Delay holds each copy back a random time in [0, Delay), which
	// reorders them. Zero sends at once, in order.
	Delay time.Duration
	// Seed seeds the random choices, so that a run can be repeated.
	Seed uint64
}

// None reports whether f leaves every message alone.
func (f Faults) None() bool { return f.Drop == 0 && f.Dup == 0 && f.Delay == 0 }

// Validate reports a probability outside [0, 1] or a negative delay.
func (f Faults) Validate() error {
	for name, p := range map[string]float64{"drop": f.Drop, "dup": f.Dup} {
		if !(p >= 0 && p <= 1) { // also NaN
			return fmt.Errorf("%s probability %v outside [0, 1]", name, p)
		}
	}
	if f.Delay < 0 {
		return fmt.Errorf("negative delay %s", f.Delay)
	}
	return nil
}

// String is f in ParseChaosNet's syntax.
func (f Faults) String() string {
	return fmt.Sprintf("drop=%s,dup=%s,delay=%s,seed=%d",
		strconv.FormatFloat(f.Drop, 'g', -1, 64), strconv.FormatFloat(f.Dup, 'g', -1, 64), f.Delay, f.Seed)
}

// ParseChaosNet parses faults in the syntax of TALLY_CHAOS_NET:
// comma-separated key=value pairs drop=P, dup=P, delay=DURATION and
// seed=N, each optional, e.g. "drop=0.1,dup=0.1,delay=30ms,seed=7". An
// empty spec is no faults; without a seed one is drawn at random.
func ParseChaosNet(spec string) (Faults, error) {
	var f Faults
	if strings.TrimSpace(spec) == "" {
		return f, nil
	}
	seeded := false
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return Faults{}, fmt.Errorf("%q: want key=value", kv)
		}
		var err error
		switch k {
		case "drop":
			f.Drop, err = strconv.ParseFloat(v, 64)
		case "dup":
			f.Dup, err = strconv.ParseFloat(v, 64)
		case "delay":
			f.Delay, err = time.ParseDuration(v)
		case "seed":
			f.Seed, err = strconv.ParseUint(v, 10, 64)
			seeded = true
		default:
			err = fmt.Errorf("unknown key %q (want drop, dup, delay, seed)", k)
		}
		if err != nil {
			return Faults{}, fmt.Errorf("%s: %w", k, err)
		}
	}
	if err := f.Validate(); err != nil {
		return Faults{}, err
	}
	if !seeded {
		f.Seed = rand.Uint64()
	}
	return f, nil
}

// FaultyTransport wraps a Transport and drops, duplicates and delays (so
// reorders) what is published through it, as its Faults say. Requests and
// subscriptions pass through untouched: the fast path is what may lose
// messages, and anti-entropy is what repairs that.
//
// Delayed copies wait in a queue drained by one goroutine, which runs only
// while the queue is not empty: the FaultyTransport owns it, and Close
// stops it.
type FaultyTransport struct {
	inner Transport
	wake  chan struct{} // a message was queued, or Close was called

	mu      sync.Mutex // protects the fields below
	faults  Faults
	rng     *rand.Rand
	queue   delayQueue
	running bool // the delivery goroutine runs
	closed  bool
	wg      sync.WaitGroup // the delivery goroutine; Add only under mu while open
}

// NewFaultyTransport wraps inner with the given faults.
func NewFaultyTransport(inner Transport, f Faults) *FaultyTransport {
	t := &FaultyTransport{inner: inner, wake: make(chan struct{}, 1)}
	t.SetFaults(f)
	return t
}

// SetFaults replaces the faults and reseeds the random choices from f.Seed.
// Messages already delayed keep their delay.
func (t *FaultyTransport) SetFaults(f Faults) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.faults = f
	t.rng = rand.New(rand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15))
}

// Close drops the delayed messages not yet sent, waits for the delivery
// goroutine, and drops everything published afterwards. It does not close
// the inner transport.
func (t *FaultyTransport) Close() {
	t.mu.Lock()
	t.closed = true
	t.queue = nil
	t.mu.Unlock()
	t.signal()
	t.wg.Wait()
}

// Publish implements Transport: the message is dropped, sent once or twice,
// now or later.
func (t *FaultyTransport) Publish(subject string, data []byte) error {
	t.mu.Lock()
	if t.closed || t.rng.Float64() < t.faults.Drop {
		t.mu.Unlock()
		return nil
	}
	copies := 1
	if t.rng.Float64() < t.faults.Dup {
		copies = 2
	}
	if t.faults.Delay <= 0 {
		t.mu.Unlock()
		for range copies {
			if err := t.inner.Publish(subject, data); err != nil {
				return err
			}
		}
		return nil
	}
	now := time.Now()
	data = append([]byte(nil), data...) // the caller may reuse its buffer
	for range copies {
		d := time.Duration(t.rng.Int64N(int64(t.faults.Delay)))
		heap.Push(&t.queue, &delayedMsg{due: now.Add(d), subject: subject, data: data})
	}
	if !t.running {
		t.running = true
		t.wg.Add(1)
		go t.deliver()
	}
	t.mu.Unlock()
	t.signal()
	return nil
}

func (t *FaultyTransport) signal() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// deliver publishes queued messages when they are due and returns once the
// queue is empty.
func (t *FaultyTransport) deliver() {
	defer t.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		t.mu.Lock()
		if t.queue.Len() == 0 {
			t.running = false
			t.mu.Unlock()
			return
		}
		next := t.queue[0]
		wait := time.Until(next.due)
		if wait <= 0 {
			heap.Pop(&t.queue)
		}
		t.mu.Unlock()
		if wait <= 0 {
			_ = t.inner.Publish(next.subject, next.data) // a lost message is what this is for
			continue
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-t.wake: // an earlier message was queued, or Close emptied the queue
			timer.Stop()
		}
	}
}

// Subscribe implements Transport.
func (t *FaultyTransport) Subscribe(subject string, h func(string, []byte)) (func() error, error) {
	return t.inner.Subscribe(subject, h)
}

// Request implements Transport.
func (t *FaultyTransport) Request(ctx context.Context, subject string, data []byte) ([]byte, error) {
	return t.inner.Request(ctx, subject, data)
}

// Respond implements Transport.
func (t *FaultyTransport) Respond(subject string, h func([]byte) []byte) (func() error, error) {
	return t.inner.Respond(subject, h)
}

type delayedMsg struct {
	due     time.Time
	subject string
	data    []byte
}

// delayQueue is a min-heap of messages by due time.
type delayQueue []*delayedMsg

func (q delayQueue) Len() int           { return len(q) }
func (q delayQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q delayQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *delayQueue) Push(x any)        { *q = append(*q, x.(*delayedMsg)) }
func (q *delayQueue) Pop() any {
	old := *q
	m := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return m
}
