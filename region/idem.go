package region

import (
	"context"
	"time"

	"github.com/tally-dev/tally/storage"
)

// Idempotency keys are remembered for Config.IdempotencyTTL. The sweeper
// below reads stored keys page by page from committed state and asks the
// writer to delete the ones older than the TTL; the writer checks each
// again, so a key a retry stored anew in the meantime stays.

// idemExpiry asks the writer to delete one idempotency key if it was
// applied before beforeMs.
type idemExpiry struct {
	key, idem string
	beforeMs  int64
}

// sweepPage is how many stored keys the sweeper reads per page, and at
// most how many deletions it hands the writer per request.
const sweepPage = 1000

// sweepIdempotency runs until Close, sweeping once per IdempotencySweep.
func (r *Replica) sweepIdempotency() {
	defer r.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // Close stops a sweep in progress, not only the wait
		select {
		case <-r.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTicker(r.cfg.IdempotencySweep)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		n, err := r.ExpireIdempotency(ctx, r.cfg.Now().Add(-r.cfg.IdempotencyTTL))
		switch {
		case err != nil && ctx.Err() == nil:
			r.log.Warn("idempotency sweep stopped early; the next one goes on", "expired", n, "error", err)
		case n > 0:
			r.log.Debug("idempotency keys expired", "count", n)
		}
	}
}

// ExpireIdempotency deletes every idempotency key applied before cutoff and
// returns how many it deleted. The sweeper calls it; so can a test or an
// operator tool.
func (r *Replica) ExpireIdempotency(ctx context.Context, cutoff time.Time) (int, error) {
	beforeMs := cutoff.UnixMilli()
	total := 0
	var cursor []byte
	for {
		var batch []idemExpiry
		next, err := r.store.ScanIdempotency(cursor, sweepPage, func(e storage.IdemEntry) error {
			if e.AtMs < beforeMs {
				batch = append(batch, idemExpiry{key: e.Key, idem: e.Idem, beforeMs: beforeMs})
			}
			return nil
		})
		if err != nil {
			return total, err
		}
		if len(batch) > 0 {
			q := &request{expire: batch}
			if err := r.submit(ctx, q); err != nil {
				return total, err
			}
			total += q.expired
			r.metrics.idemExpired.Add(float64(q.expired))
		}
		if next == nil {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
		cursor = next
	}
}
