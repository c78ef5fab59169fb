package replication

import (
	"context"
	"math"
)

// Steps drives a Replicator by hand, in place of the goroutines Start
// runs: whoever holds it decides when the replica publishes its outbox,
// merges what it received and compares digests with its peers. With a
// MemNetwork in manual mode and a clock that moves only when told, a
// deployment then runs the same way every time (replicationtest's
// scripts). Steps are not safe for concurrent use.
type Steps struct {
	r *Replicator
	f *flusher
}

// Listen subscribes and answers peers' requests, as Start does, but runs
// nothing in the background: the Steps it returns do the flusher's,
// merger's and anti-entropy's work, one call at a time. Close still
// unsubscribes.
func (r *Replicator) Listen() (*Steps, error) {
	if err := r.listen(); err != nil {
		return nil, err
	}
	return &Steps{r: r, f: r.newFlusher()}, nil
}

// Flush publishes what the outbox holds, or a heartbeat if nothing went
// out for HeartbeatInterval, as one tick of the flusher.
func (s *Steps) Flush() { s.r.flush(s.f) }

// Merge merges every delta received so far in one batch, as the merger
// would, and returns how many there were.
func (s *Steps) Merge(ctx context.Context) int {
	batch := s.r.takeQueued(nil, math.MaxInt)
	if len(batch) > 0 {
		s.r.merge(ctx, batch)
	}
	return len(batch)
}

// AntiEntropy runs one anti-entropy round with every peer and, while
// writes are held, decides whether recovery is done, as one pass of the
// anti-entropy loop.
func (s *Steps) AntiEntropy(ctx context.Context) {
	s.r.round(ctx)
	if !s.r.Recovered() {
		s.r.checkRecovered()
	}
}

// Due runs the exchanges the anti-entropy loop would run between ticks at
// the clock's now (peers to retry or heard from again, or every peer once
// more after one came back) and returns the ids of the peers compared
// with, none if nothing was due.
func (s *Steps) Due(ctx context.Context) []string {
	return s.r.dueRound(ctx)
}
