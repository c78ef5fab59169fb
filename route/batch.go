// Batching at the sender: requests for one holder that come while
// messages to it are in flight wait, and go together as one message
// (KindBatch) when one comes back.

package route

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// holderQueue is how many messages to one holder are in flight, and the
// requests waiting for one to come back.
type holderQueue struct {
	inFlight int
	waiting  []*queuedAsk
}

// queuedAsk is one request waiting in a holderQueue. done is closed once
// it is answered (ans, err), or once it is to send a batch, lead, itself
// among them: the one of the batch whose deadline is the latest sends it,
// so no goroutine but the callers' own is needed.
type queuedAsk struct {
	ctx      context.Context
	deadline time.Time
	data     []byte
	done     chan struct{}
	lead     []*queuedAsk
	ans      Answer
	err      error
}

// queue is h's holderQueue; s.mu is held.
func (s *Sender) queue(h string) *holderQueue {
	q := s.queues[h]
	if q == nil {
		q = &holderQueue{}
		s.queues[h] = q
	}
	return q
}

// queued is Ask of a request that may be batched: it goes at once, alone,
// while fewer than InFlight messages to h are in flight and none waits;
// else it waits for one to come back.
func (s *Sender) queued(ctx context.Context, h string, data []byte) (Answer, error) {
	s.mu.Lock()
	q := s.queue(h)
	if q.inFlight < s.cfg.InFlight && len(q.waiting) == 0 {
		q.inFlight++
		s.mu.Unlock()
		a, err := s.ask(ctx, h, data)
		s.back(h)
		return a, err
	}
	d, _ := ctx.Deadline()
	w := &queuedAsk{ctx: ctx, deadline: d, data: data, done: make(chan struct{})}
	q.waiting = append(q.waiting, w)
	s.mu.Unlock()
	select {
	case <-w.done:
	case <-ctx.Done():
		s.mu.Lock()
		waiting := slices.Contains(q.waiting, w)
		if waiting {
			q.waiting = slices.DeleteFunc(q.waiting, func(x *queuedAsk) bool { return x == w })
		}
		s.mu.Unlock()
		if waiting {
			return Answer{}, fmt.Errorf("queued for %s: %w", h, ctx.Err())
		}
		<-w.done // taken into a batch: told at once whether it sends it
		if w.lead == nil {
			return Answer{}, fmt.Errorf("batched for %s: %w", h, ctx.Err()) // sent: it may have been applied
		}
	}
	if w.lead != nil {
		s.send(h, w)
		if err := ctx.Err(); err != nil {
			return Answer{}, fmt.Errorf("batched for %s: %w", h, err)
		}
	}
	return w.ans, w.err
}

// Waiting is how many requests for holder h wait for a message to it to
// come back.
func (s *Sender) Waiting(h string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.queues[h]; q != nil {
		return len(q.waiting)
	}
	return 0
}

// back counts a message to h come back, and has the requests waiting for
// it sent: the first ones, up to MaxBatch and BatchBytes, as one batch.
func (s *Sender) back(h string) {
	s.mu.Lock()
	q := s.queues[h]
	q.inFlight--
	var leader *queuedAsk
	if len(q.waiting) > 0 && q.inFlight < s.cfg.InFlight {
		n, size := 0, 0
		for n < len(q.waiting) && n < MaxBatch && (n == 0 || size+len(q.waiting[n].data) <= s.cfg.BatchBytes) {
			size += len(q.waiting[n].data)
			n++
		}
		batch := slices.Clone(q.waiting[:n])
		q.waiting = slices.Delete(q.waiting, 0, n)
		q.inFlight++
		leader = batch[0]
		for _, w := range batch[1:] {
			if w.deadline.After(leader.deadline) {
				leader = w
			}
		}
		leader.lead = batch
	}
	s.mu.Unlock()
	if leader != nil {
		close(leader.done)
	}
}

// send sends leader.lead, a batch of requests for h, as one message
// (alone as its own), under the latest of their deadlines, and answers
// each; a failure of the message is each request's.
func (s *Sender) send(h string, leader *queuedAsk) {
	defer s.back(h)
	batch := leader.lead
	// The leader's own cancellation does not stop the others' message:
	// its deadline, the latest, bounds it.
	ctx, cancel := context.WithDeadline(context.WithoutCancel(leader.ctx), leader.deadline)
	defer cancel()
	if len(batch) == 1 {
		leader.ans, leader.err = s.ask(ctx, h, leader.data)
		return
	}
	items := make([][]byte, len(batch))
	earliest := leader.deadline
	for i, w := range batch {
		items[i] = w.data
		if w.deadline.Before(earliest) {
			earliest = w.deadline
		}
	}
	answers, err := s.askBatch(ctx, h, MarshalBatch(s.cfg.Self, earliest.UnixMilli(), items), len(batch))
	for i, w := range batch {
		switch {
		case err != nil:
			w.err = err
		case answers[i].Kind == NotServed:
			w.err = Refusal(answers[i].Reason)
		case answers[i].Kind == Unanswered:
			w.err = fmt.Errorf("%w: the holder answered its batch but not this request", ErrUnanswered)
		default:
			w.ans = answers[i]
		}
		if w != leader {
			close(w.done)
		}
	}
}

// ErrUnanswered is what Ask returns (wrapped) for a request of a batch
// the holder gave no answer to (Unanswered): it may have been applied. It
// wraps context.DeadlineExceeded, as the request sent alone would have
// timed out.
var ErrUnanswered = fmt.Errorf("no answer: %w", context.DeadlineExceeded)

// askBatch sends a batch of n requests to h and decodes its n answers. An
// error is every request's: one wrapping ErrNotServed or ErrNoResponders
// says none was applied.
func (s *Sender) askBatch(ctx context.Context, h string, data []byte, n int) ([]Answer, error) {
	b, err := s.cfg.Transport.Request(ctx, h, data)
	if err != nil {
		return nil, err
	}
	a, err := UnmarshalAnswer(b)
	if err != nil {
		return nil, fmt.Errorf("the answer to a batch: %w", err)
	}
	switch a.Kind {
	case NotServed:
		return nil, Refusal(a.Reason)
	case Answers:
	default:
		return nil, fmt.Errorf("%w: a batch answered as one request", ErrMalformed)
	}
	answers, err := UnmarshalAnswers(a.Body)
	if err == nil && len(answers) != n {
		err = fmt.Errorf("%w: %d answers to %d requests", ErrMalformed, len(answers), n)
	}
	if err != nil {
		return nil, fmt.Errorf("the answers to a batch: %w", err)
	}
	return answers, nil
}
