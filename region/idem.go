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

// sweepPage is how many stored keys the sweeper reads per page, and at
// most how many deletions it hands the writer per request.
const sweepPage = 1000

// sweepIdempotency runs until Close, sweeping once per IdempotencySweep.
func (r *Replica) sweepIdempotency() {
	defer r.wg.Done()
	ctx := r.stopped // Close also stops a sweep in progress, not only the wait
	t := time.NewTicker(r.cfg.IdempotencySweep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
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
		var batch []rkey // (counter key, idempotency key)
		next, err := r.store.ScanIdempotency(cursor, sweepPage, func(e storage.IdemEntry) error {
			if e.AtMs < beforeMs {
				batch = append(batch, rkey{e.Key, e.Idem})
			}
			return nil
		})
		if err != nil {
			return total, err
		}
		if len(batch) > 0 {
			q := &request{expire: batch, expireBeforeMs: beforeMs}
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
