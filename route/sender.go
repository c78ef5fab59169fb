package route

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tally-dev/tally/shard"
)

// Transport carries one encoded Request to a replica of the region and
// brings back its encoded Answer (node's is NATS request-reply on the
// replica's Subject; tests use an in-memory one).
type Transport interface {
	Request(ctx context.Context, replica string, data []byte) ([]byte, error)
}

// ErrNoResponders is what a Transport returns when nobody takes requests
// at the replica (it is down, or not subscribed): nothing was applied.
var ErrNoResponders = errors.New("route: no responders")

// ErrNoHolder is what Send returns (wrapped) when no holder of the shard
// served the request: each was down or answered NotServed, so nothing was
// applied.
var ErrNoHolder = errors.New("no replica holding the shard is up")

// DefaultSuspectFor is how long a holder that let a request time out is
// tried after the shard's other holders (SenderConfig.SuspectFor).
const DefaultSuspectFor = 5 * time.Second

// SenderConfig configures a Sender.
type SenderConfig struct {
	// Self is the sending replica: never sent to.
	Self string
	// Map is the region's shard map in force. Required.
	Map func() shard.Map
	// Transport carries requests. Required.
	Transport Transport
	// Now is the clock of the suspicions. Default time.Now.
	Now func() time.Time
	// SuspectFor: see DefaultSuspectFor.
	SuspectFor time.Duration
	// InFlight is how many messages to one holder Ask keeps in flight
	// before requests for it queue and go together as one batch
	// (KindBatch) when one comes back. Default DefaultInFlight; -1: no
	// batching, every request its own message.
	InFlight int
	// BatchBytes bounds a batch's encoded requests. Default
	// DefaultBatchBytes.
	BatchBytes int
}

// DefaultInFlight is SenderConfig.InFlight's default: at low load, with
// fewer requests than that to one holder at once, each goes at once as
// its own message, with no delay added.
const DefaultInFlight = 2

// DefaultBatchBytes is SenderConfig.BatchBytes's default, well under the
// 1 MiB a NATS server takes in one message by default.
const DefaultBatchBytes = 256 << 10

// Sender sends requests for a shard to one of its holders: in the map's
// preferred order (shard.Map.Preferred), holders that let a request time
// out lately last. A holder that is down or answers NotServed applied
// nothing, so the next one is tried; any other failure may have applied
// a write and ends the search (the caller answers "timeout", never
// "nothing applied").
type Sender struct {
	cfg      SenderConfig
	mu       sync.Mutex
	suspects map[string]time.Time // holder -> tried last until then
	queues   map[string]*holderQueue
}

// NewSender returns a Sender.
func NewSender(cfg SenderConfig) *Sender {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.SuspectFor == 0 {
		cfg.SuspectFor = DefaultSuspectFor
	}
	if cfg.InFlight == 0 {
		cfg.InFlight = DefaultInFlight
	}
	if cfg.BatchBytes == 0 {
		cfg.BatchBytes = DefaultBatchBytes
	}
	return &Sender{cfg: cfg, suspects: map[string]time.Time{}, queues: map[string]*holderQueue{}}
}

// ErrNotServed is what a Try returns (wrapped, with the reason) when its
// holder applied nothing and said so: it does not hold the shard, is not
// ready, or is not open. The walk goes on to the next holder.
var ErrNotServed = errors.New("not served")

// Refusal is the error a Try returns for a holder that applied nothing
// for reason.
func Refusal(reason string) error { return fmt.Errorf("%w: %s", ErrNotServed, reason) }

// Order is whom a request for shard s goes to, in turn, Self left out.
func (s *Sender) Order(sh int) []string { return s.order(sh, Walk{}) }

// Walk says which holders of a shard a request may go to.
type Walk struct {
	// Primary: only the shard's first preferred holder, which every
	// replica of the region agrees on, so that what must be decided in
	// one place (a purchase's fence) is.
	Primary bool
	// WithSelf: Self is one of the holders tried (the caller's Try runs
	// the request locally for it); by default Self is left out.
	WithSelf bool
}

func (s *Sender) order(sh int, w Walk) []string {
	pref := s.cfg.Map().Preferred(sh)
	if w.Primary && len(pref) > 1 {
		pref = pref[:1]
	}
	out := make([]string, 0, len(pref))
	var late []string
	now := s.cfg.Now()
	s.mu.Lock()
	for _, h := range pref {
		switch until, ok := s.suspects[h]; {
		case h == s.cfg.Self:
			if w.WithSelf {
				out = append(out, h)
			}
		case ok && now.Before(until):
			late = append(late, h)
		default:
			out = append(out, h)
		}
	}
	s.mu.Unlock()
	return append(out, late...)
}

// Try is one holder's attempt at a request: nil when the holder served
// it; an error wrapping ErrNotServed or ErrNoResponders when the holder
// applied nothing (the walk goes on); any other error may have applied it
// (the walk ends, and the caller answers "timeout", never "nothing
// applied").
type Try func(holder string) error

// Walk calls try for the holders of shard sh in turn (Order, or as w
// says), until one serves, and returns who did. This is the one place
// where the region's routing rule is applied: the next holder is tried
// only where the last one applied nothing, a holder that let a request
// time out is tried last for a while (SenderConfig.SuspectFor), and one
// that served is trusted again. An error wrapping ErrNoHolder means no
// holder served: nothing was applied.
func (s *Sender) Walk(sh int, w Walk, try Try) (string, error) {
	var tried []string
	for _, h := range s.order(sh, w) {
		err := try(h)
		switch {
		case err == nil:
			if h != s.cfg.Self {
				s.trust(h)
			}
			return h, nil
		case errors.Is(err, ErrNoResponders):
			tried = append(tried, h+": down")
			continue
		case errors.Is(err, ErrNotServed):
			tried = append(tried, h+": "+strings.TrimPrefix(err.Error(), ErrNotServed.Error()+": "))
			continue
		case errors.Is(err, context.DeadlineExceeded) && h != s.cfg.Self:
			s.suspect(h) // stopped or slow: try the others first for a while
		}
		return h, fmt.Errorf("holder %s: %w", h, err)
	}
	return "", fmt.Errorf("shard %d: %w (%s)", sh, ErrNoHolder, strings.Join(tried, "; "))
}

// Send sends req, its From set to Self, to a holder of req.Shard that
// serves it (Walk), under ctx (whose deadline, if any, goes along), and
// returns the answer and who served it.
func (s *Sender) Send(ctx context.Context, req Request) (Answer, string, error) {
	req.From = s.cfg.Self
	if d, ok := ctx.Deadline(); ok {
		req.DeadlineMs = d.UnixMilli()
	}
	data := req.Marshal()
	var ans Answer
	h, err := s.Walk(req.Shard, Walk{}, func(h string) error {
		a, err := s.Ask(ctx, h, data)
		if err == nil {
			ans = a
		}
		return err
	})
	return ans, h, err
}

// Ask sends one encoded request to holder h and decodes its answer; an
// answer of NotServed is an error wrapping ErrNotServed.
//
// Requests of kind KindOps under a deadline are batched (batch.go): with
// SenderConfig.InFlight messages to h in flight, the request waits for
// one to come back and goes with the others waiting then, in one message
// (KindBatch). Each keeps its own deadline, at the holder too, and is
// answered on its own as if it went alone.
func (s *Sender) Ask(ctx context.Context, h string, data []byte) (Answer, error) {
	if _, ok := ctx.Deadline(); !ok || s.cfg.InFlight < 0 || len(data) < 2 || Kind(data[1]) != KindOps {
		return s.ask(ctx, h, data)
	}
	return s.queued(ctx, h, data)
}

// AskAlone is Ask, the request never batched: for one the holder may
// take long to answer (a like's history, which it gathers from its
// peers), which would hold back the answers of a batch's others.
func (s *Sender) AskAlone(ctx context.Context, h string, data []byte) (Answer, error) {
	return s.ask(ctx, h, data)
}

// ask sends one encoded request to h as its own message.
func (s *Sender) ask(ctx context.Context, h string, data []byte) (Answer, error) {
	b, err := s.cfg.Transport.Request(ctx, h, data)
	if err != nil {
		return Answer{}, err
	}
	a, err := UnmarshalAnswer(b)
	if err != nil {
		return Answer{}, err
	}
	if a.Kind == NotServed {
		return Answer{}, Refusal(a.Reason)
	}
	return a, nil
}

// Suspected reports whether holder h let a request time out lately: it is
// tried after the shard's other holders until then.
func (s *Sender) Suspected(h string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	until, ok := s.suspects[h]
	return ok && s.cfg.Now().Before(until)
}

// Suspect marks h as having let a request time out; Trust clears it.
func (s *Sender) Suspect(h string) { s.suspect(h) }

// Trust clears a suspicion of h: it answered.
func (s *Sender) Trust(h string) { s.trust(h) }

func (s *Sender) suspect(h string) {
	s.mu.Lock()
	s.suspects[h] = s.cfg.Now().Add(s.cfg.SuspectFor)
	s.mu.Unlock()
}

func (s *Sender) trust(h string) {
	s.mu.Lock()
	if len(s.suspects) > 0 {
		delete(s.suspects, h)
	}
	s.mu.Unlock()
}
