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
}

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
}

// NewSender returns a Sender.
func NewSender(cfg SenderConfig) *Sender {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.SuspectFor == 0 {
		cfg.SuspectFor = DefaultSuspectFor
	}
	return &Sender{cfg: cfg, suspects: map[string]time.Time{}}
}

// Order is whom a request for shard s goes to, in turn.
func (s *Sender) Order(sh int) []string {
	pref := s.cfg.Map().Preferred(sh)
	out := make([]string, 0, len(pref))
	var late []string
	now := s.cfg.Now()
	s.mu.Lock()
	for _, h := range pref {
		switch until, ok := s.suspects[h]; {
		case h == s.cfg.Self:
		case ok && now.Before(until):
			late = append(late, h)
		default:
			out = append(out, h)
		}
	}
	s.mu.Unlock()
	return append(out, late...)
}

// Send sends req, its From set to Self, to a holder of req.Shard that
// serves it, under ctx (whose deadline, if any, goes along), and returns
// the answer and who served it.
func (s *Sender) Send(ctx context.Context, req Request) (Answer, string, error) {
	req.From = s.cfg.Self
	if d, ok := ctx.Deadline(); ok {
		req.DeadlineMs = d.UnixMilli()
	}
	data := req.Marshal()
	var tried []string
	for _, h := range s.Order(req.Shard) {
		b, err := s.cfg.Transport.Request(ctx, h, data)
		var a Answer
		if err == nil {
			a, err = UnmarshalAnswer(b)
		}
		switch {
		case errors.Is(err, ErrNoResponders):
			tried = append(tried, h+": down")
			continue
		case err != nil:
			if errors.Is(err, context.DeadlineExceeded) {
				s.suspect(h) // stopped or slow: try the others first for a while
			}
			return Answer{}, h, fmt.Errorf("holder %s: %w", h, err)
		case a.Kind == NotServed:
			tried = append(tried, h+": "+a.Reason)
			continue
		}
		s.trust(h)
		return a, h, nil
	}
	return Answer{}, "", fmt.Errorf("%w (%s)", ErrNoHolder, strings.Join(tried, "; "))
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
