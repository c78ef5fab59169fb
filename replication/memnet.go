package replication

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
)

// ErrUnreachable is what a MemNetwork request returns when no responder
// is reachable on the subject: none answers it, or the link is cut or lost
// the message.
var ErrUnreachable = errors.New("replication: no reachable responder")

// MemConfig configures a MemNetwork.
type MemConfig struct {
	// Manual keeps published messages in the network until Deliver is
	// called, for tests that script every step. Otherwise a message is
	// delivered before Publish returns. Requests are always answered at
	// once.
	Manual bool
	// Seed seeds the random losses of lossy links.
	Seed uint64
}

// MemNetwork is an in-memory message bus for tests: members join by name,
// and the links between them can be cut, made lossy and healed, each
// direction on its own. Subjects match as in NATS ('*' is one token, '>'
// the rest). A member always reaches itself.
type MemNetwork struct {
	cfg MemConfig

	mu      sync.Mutex // protects the fields below
	rng     *rand.Rand
	loss    map[memLink]float64 // probability a message on the link is lost; absent is 0
	subs    map[*memSub]struct{}
	pending []memMsg // Manual: published, not yet delivered
	// matched caches, per subject, the subscriptions (or responders) it
	// matches, in delivery order: a deployment of many sharded replicas
	// has tens of thousands of subscriptions, and matching every message
	// against each would cost more than what the replicas do with it.
	// Emptied whenever a subscription comes or goes.
	matched map[memMatchKey][]*memSub
}

type memMatchKey struct {
	subject string
	respond bool
}

type memLink struct{ from, to string }

type memSub struct {
	member  string
	pattern []string
	respond bool

	mu      sync.Mutex // one message at a time, as Transport promises
	handler func(subject string, data []byte)
	reply   func(data []byte) []byte
}

type memMsg struct {
	from, subject string
	data          []byte
}

// NewMemNetwork returns a network with every link up.
func NewMemNetwork(cfg MemConfig) *MemNetwork {
	return &MemNetwork{
		cfg:     cfg,
		rng:     rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5851f42d4c957f2d)),
		loss:    make(map[memLink]float64),
		subs:    make(map[*memSub]struct{}),
		matched: make(map[memMatchKey][]*memSub),
	}
}

// Join returns the Transport of member name. Joining again under the same
// name (a restarted replica) is the same member: links keep their state.
func (n *MemNetwork) Join(name string) *MemTransport { return &MemTransport{net: n, name: name} }

// Cut stops messages between a and b, both ways.
func (n *MemNetwork) Cut(a, b string) { n.SetLoss(a, b, 1); n.SetLoss(b, a, 1) }

// CutOneWay stops messages from one member to another; the other way
// still works.
func (n *MemNetwork) CutOneWay(from, to string) { n.SetLoss(from, to, 1) }

// Heal restores the links between a and b, both ways.
func (n *MemNetwork) Heal(a, b string) { n.SetLoss(a, b, 0); n.SetLoss(b, a, 0) }

// HealAll restores every link.
func (n *MemNetwork) HealAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.loss)
}

// SetLoss makes the link from one member to another lose each message
// with probability p (1 cuts it, 0 heals it).
func (n *MemNetwork) SetLoss(from, to string, p float64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p <= 0 {
		delete(n.loss, memLink{from, to})
		return
	}
	n.loss[memLink{from, to}] = p
}

// Pending is how many published messages wait for Deliver.
func (n *MemNetwork) Pending() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.pending)
}

// Deliver delivers every waiting message in the order published, to the
// members reachable at this moment, and returns how many deliveries were
// made (a message reaching three subscribers is three).
func (n *MemNetwork) Deliver() int { return n.deliverPending(false) }

// DeliverReversed is Deliver, last published first.
func (n *MemNetwork) DeliverReversed() int { return n.deliverPending(true) }

func (n *MemNetwork) deliverPending(reverse bool) int {
	n.mu.Lock()
	msgs := n.pending
	n.pending = nil
	n.mu.Unlock()
	total := 0
	for i := range msgs {
		if reverse {
			i = len(msgs) - 1 - i
		}
		total += n.deliver(msgs[i])
	}
	return total
}

// lostLocked rolls whether a message from one member to another is lost.
func (n *MemNetwork) lostLocked(from, to string) bool {
	if from == to {
		return false
	}
	p := n.loss[memLink{from, to}]
	return p >= 1 || p > 0 && n.rng.Float64() < p
}

// matchingLocked are the subscriptions (respond false) or responders
// (respond true) matching subject, sorted by member: map order is random,
// and a fixed order makes scripted runs repeat. The slice is shared:
// callers must not change it.
func (n *MemNetwork) matchingLocked(subject string, respond bool) []*memSub {
	key := memMatchKey{subject, respond}
	if subs, ok := n.matched[key]; ok {
		return subs
	}
	var subs []*memSub
	for s := range n.subs {
		if s.respond == respond && matchSubject(s.pattern, subject) {
			subs = append(subs, s)
		}
	}
	sortSubs(subs)
	n.matched[key] = subs
	return subs
}

func (n *MemNetwork) deliver(m memMsg) int {
	n.mu.Lock()
	var to []*memSub
	for _, s := range n.matchingLocked(m.subject, false) {
		if !n.lostLocked(m.from, s.member) {
			to = append(to, s)
		}
	}
	n.mu.Unlock()
	for _, s := range to {
		s.mu.Lock()
		if s.handler != nil {
			s.handler(m.subject, m.data)
		}
		s.mu.Unlock()
	}
	return len(to)
}

func sortSubs(s []*memSub) {
	slices.SortStableFunc(s, func(a, b *memSub) int { return strings.Compare(a.member, b.member) })
}

func (n *MemNetwork) add(s *memSub) func() error {
	n.mu.Lock()
	n.subs[s] = struct{}{}
	clear(n.matched)
	n.mu.Unlock()
	return func() error {
		n.mu.Lock()
		delete(n.subs, s)
		clear(n.matched)
		n.mu.Unlock()
		// After unsubscribe returns, the handler is not called again.
		s.mu.Lock()
		s.handler, s.reply = nil, nil
		s.mu.Unlock()
		return nil
	}
}

// MemTransport is one member's Transport on a MemNetwork.
type MemTransport struct {
	net  *MemNetwork
	name string
}

// Name is the member's name.
func (t *MemTransport) Name() string { return t.name }

// Publish implements Transport.
func (t *MemTransport) Publish(subject string, data []byte) error {
	m := memMsg{from: t.name, subject: subject, data: append([]byte(nil), data...)}
	if t.net.cfg.Manual {
		t.net.mu.Lock()
		t.net.pending = append(t.net.pending, m)
		t.net.mu.Unlock()
		return nil
	}
	t.net.deliver(m)
	return nil
}

// Subscribe implements Transport.
func (t *MemTransport) Subscribe(subject string, h func(string, []byte)) (func() error, error) {
	p, err := parsePattern(subject)
	if err != nil {
		return nil, err
	}
	return t.net.add(&memSub{member: t.name, pattern: p, handler: h}), nil
}

// Respond implements Transport.
func (t *MemTransport) Respond(subject string, h func([]byte) []byte) (func() error, error) {
	p, err := parsePattern(subject)
	if err != nil {
		return nil, err
	}
	return t.net.add(&memSub{member: t.name, pattern: p, respond: true, reply: h}), nil
}

// Request implements Transport: the first responder in name order whose
// links both ways pass the message answers at once.
func (t *MemTransport) Request(ctx context.Context, subject string, data []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("request %s: %w", subject, err)
	}
	n := t.net
	n.mu.Lock()
	var to *memSub
	for _, s := range n.matchingLocked(subject, true) {
		if !n.lostLocked(t.name, s.member) && !n.lostLocked(s.member, t.name) {
			to = s
			break
		}
	}
	n.mu.Unlock()
	if to == nil {
		return nil, fmt.Errorf("request %s: %w", subject, ErrUnreachable)
	}
	to.mu.Lock()
	defer to.mu.Unlock()
	if to.reply == nil { // unsubscribed meanwhile
		return nil, fmt.Errorf("request %s: %w", subject, ErrUnreachable)
	}
	return to.reply(append([]byte(nil), data...)), nil
}

func parsePattern(subject string) ([]string, error) {
	toks := strings.Split(subject, ".")
	for i, tok := range toks {
		if tok == "" || tok == ">" && i != len(toks)-1 {
			return nil, fmt.Errorf("bad subject %q", subject)
		}
	}
	return toks, nil
}

// matchSubject reports whether subject matches pattern, NATS style.
func matchSubject(pattern []string, subject string) bool {
	toks := strings.Split(subject, ".")
	for i, p := range pattern {
		if p == ">" {
			return len(toks) > i
		}
		if i >= len(toks) || p != "*" && p != toks[i] {
			return false
		}
	}
	return len(toks) == len(pattern)
}
