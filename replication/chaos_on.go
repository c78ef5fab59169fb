//go:build chaos

package replication

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

// The chaos build (`go build -tags chaos`) reads two environment variables:
//
//   - TALLY_CHAOS_NET=drop=0.1,dup=0.1,delay=30ms[,seed=N]: every message
//     published over NATS (the fast path: deltas and heartbeats) is dropped
//     with probability drop, otherwise sent twice with probability dup, and
//     each copy is held back a random time in [0, delay), which reorders
//     them. Anti-entropy requests are left alone.
//   - TALLY_CHAOS_BUG=gossip-increments: the fast path publishes how much
//     each own entry grew since the last flush instead of its absolute
//     value, and receivers add that to their copy of the sender's entry
//     instead of max-merging: the design's cardinal sin (DESIGN §5), which
//     counts duplicated messages twice and races anti-entropy.
//
// Without them the chaos build behaves like a normal one.
var (
	chaosBug  = os.Getenv("TALLY_CHAOS_BUG")
	netFaults = mustParseChaosNet(os.Getenv("TALLY_CHAOS_NET"))
)

// publish sends one message through the fault injector, if one is set.
func (t *NATS) publish(subject string, data []byte) error {
	if netFaults == nil {
		return t.nc.Publish(subject, data)
	}
	return netFaults.publish(t.nc, subject, data)
}

// chaosGossip holds, for the gossip-increments bug, the own entries as last
// published. Owned by the flusher goroutine.
type chaosGossip struct {
	sent map[outVec]crdt.PN
}

// outgoing turns absolute own entries into growth since the last flush.
func (g *chaosGossip) outgoing(vecs []OwnEntry) []OwnEntry {
	if chaosBug != "gossip-increments" {
		return vecs
	}
	if g.sent == nil {
		g.sent = make(map[outVec]crdt.PN)
	}
	for i, v := range vecs {
		k := outVec{v.Kind, v.Item}
		last := g.sent[k]
		g.sent[k] = v.PN
		vecs[i].PN = crdt.PN{P: v.PN.P - min(last.P, v.PN.P), N: v.PN.N - min(last.N, v.PN.N)}
	}
	return vecs
}

// incoming adds a received increment to the local copy of the sender's
// entry; the result is then max-merged, which keeps the sum.
func (*chaosGossip) incoming(rep *region.Replica, sender string, e OwnEntry) crdt.PN {
	if chaosBug != "gossip-increments" {
		return e.PN
	}
	var rd region.Read
	var err error
	if e.Kind == storage.Likes {
		rd, err = rep.Likes(e.Item)
	} else {
		rd, err = rep.Counter(e.Item)
	}
	if err != nil {
		return e.PN
	}
	cur := rd.Vector.Get(sender)
	return crdt.PN{P: cur.P + e.PN.P, N: cur.N + e.PN.N}
}

// chaosNet drops, duplicates and delays published messages. Delayed copies
// wait in a queue drained by one goroutine, which runs only while the queue
// is not empty (so at most delay at a time): the injector owns it, and no
// goroutine outlives the last delayed message.
type chaosNet struct {
	drop, dup float64
	delay     time.Duration

	mu      sync.Mutex // protects rng, queue, running
	rng     *rand.Rand
	queue   delayQueue
	running bool
	wake    chan struct{} // a message was queued
	wg      sync.WaitGroup
}

type delayedMsg struct {
	due     time.Time
	nc      *nats.Conn
	subject string
	data    []byte
}

// mustParseChaosNet parses TALLY_CHAOS_NET; empty means no faults. A
// malformed value stops the process at start: it is a test setup error.
func mustParseChaosNet(spec string) *chaosNet {
	if spec == "" {
		return nil
	}
	f, err := parseChaosNet(spec)
	if err != nil {
		panic(fmt.Sprintf("TALLY_CHAOS_NET=%q: %v", spec, err))
	}
	return f
}

func parseChaosNet(spec string) (*chaosNet, error) {
	f := &chaosNet{wake: make(chan struct{}, 1)}
	seed := rand.Uint64()
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return nil, fmt.Errorf("%q: want key=value", kv)
		}
		var err error
		switch k {
		case "drop":
			f.drop, err = parseProb(v)
		case "dup":
			f.dup, err = parseProb(v)
		case "delay":
			f.delay, err = time.ParseDuration(v)
			if err == nil && f.delay < 0 {
				err = fmt.Errorf("negative delay %s", v)
			}
		case "seed":
			seed, err = strconv.ParseUint(v, 10, 64)
		default:
			err = fmt.Errorf("unknown key %q (want drop, dup, delay, seed)", k)
		}
		if err != nil {
			return nil, err
		}
	}
	f.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return f, nil
}

func parseProb(v string) (float64, error) {
	p, err := strconv.ParseFloat(v, 64)
	if err == nil && (p < 0 || p > 1) {
		err = fmt.Errorf("probability %s outside [0, 1]", v)
	}
	return p, err
}

func (f *chaosNet) publish(nc *nats.Conn, subject string, data []byte) error {
	f.mu.Lock()
	if f.rng.Float64() < f.drop {
		f.mu.Unlock()
		return nil
	}
	copies := 1
	if f.rng.Float64() < f.dup {
		copies = 2
	}
	if f.delay <= 0 {
		f.mu.Unlock()
		for range copies {
			if err := nc.Publish(subject, data); err != nil {
				return err
			}
		}
		return nil
	}
	now := time.Now()
	for range copies {
		d := time.Duration(f.rng.Int64N(int64(f.delay)))
		heap.Push(&f.queue, &delayedMsg{due: now.Add(d), nc: nc, subject: subject, data: append([]byte(nil), data...)})
	}
	if !f.running {
		f.running = true
		f.wg.Add(1)
		go f.deliver()
	}
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
	return nil
}

// deliver publishes queued messages when they are due and returns once the
// queue is empty.
func (f *chaosNet) deliver() {
	defer f.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		f.mu.Lock()
		if f.queue.Len() == 0 {
			f.running = false
			f.mu.Unlock()
			return
		}
		next := f.queue[0]
		wait := time.Until(next.due)
		if wait <= 0 {
			heap.Pop(&f.queue)
		}
		f.mu.Unlock()
		if wait <= 0 {
			_ = next.nc.Publish(next.subject, next.data) // a lost message is what this is for
			continue
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-f.wake: // an earlier message may have been queued
			timer.Stop()
		}
	}
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
