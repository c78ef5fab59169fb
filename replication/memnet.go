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

	mu   sync.Mutex // protects the fields below
	rng  *rand.Rand
	loss map[memLink]float64 // probability a message on the link is lost; absent is 0
	// subs and responders hold the subscriptions by their patterns'
	// tokens, as NATS does: a deployment of many sharded replicas has
	// tens of thousands of subscriptions, and matching every message
	// against each would cost more than what the replicas do with it.
	subs, responders memTrie
	pending          []memMsg // Manual: published, not yet delivered
}

// memTrie is one token of a pattern and the patterns under it.
type memTrie struct {
	next map[string]*memTrie // by the next token, "*" included
	here []*memSub           // patterns that end here
	rest []*memSub           // patterns that go on with ">" here
}

func (t *memTrie) add(pattern []string, s *memSub) {
	for _, tok := range pattern {
		if tok == ">" {
			t.rest = append(t.rest, s)
			return
		}
		if t.next == nil {
			t.next = make(map[string]*memTrie)
		}
		c := t.next[tok]
		if c == nil {
			c = &memTrie{}
			t.next[tok] = c
		}
		t = c
	}
	t.here = append(t.here, s)
}

func (t *memTrie) remove(pattern []string, s *memSub) {
	for _, tok := range pattern {
		if tok == ">" {
			t.rest = slices.DeleteFunc(t.rest, func(x *memSub) bool { return x == s })
			return
		}
		if t = t.next[tok]; t == nil {
			return
		}
	}
	t.here = slices.DeleteFunc(t.here, func(x *memSub) bool { return x == s })
}

// match appends the subscriptions whose patterns match the subject's
// tokens.
func (t *memTrie) match(toks []string, out []*memSub) []*memSub {
	if len(toks) == 0 {
		return append(out, t.here...)
	}
	out = append(out, t.rest...)
	if c := t.next[toks[0]]; c != nil {
		out = c.match(toks[1:], out)
	}
	if c := t.next["*"]; c != nil && toks[0] != "*" {
		out = c.match(toks[1:], out)
	}
	return out
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
		cfg:  cfg,
		rng:  rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5851f42d4c957f2d)),
		loss: make(map[memLink]float64),
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
// and a fixed order makes scripted runs repeat.
func (n *MemNetwork) matchingLocked(subject string, respond bool) []*memSub {
	t := &n.subs
	if respond {
		t = &n.responders
	}
	subs := t.match(strings.Split(subject, "."), nil)
	sortSubs(subs)
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
	t := &n.subs
	if s.respond {
		t = &n.responders
	}
	n.mu.Lock()
	t.add(s.pattern, s)
	n.mu.Unlock()
	return func() error {
		n.mu.Lock()
		t.remove(s.pattern, s)
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

// matchSubject reports whether subject matches pattern, NATS style, as
// the network matches it.
func matchSubject(pattern []string, subject string) bool {
	var t memTrie
	t.add(pattern, &memSub{})
	return len(t.match(strings.Split(subject, "."), nil)) > 0
}
