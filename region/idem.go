package region

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// Idempotency keys are keyed records (crdt.KeyedRecord; a budget's,
// crdt.Spend),
// replicated like like records. One rule expires them everywhere: a key is
// gone IdempotencyTTL after its register's stamp (Replica.keyExpired). The
// txn applies the rule whenever it reads a record, so an expired key is
// gone at once; the sweeper below deletes the stored records, oldest
// first from the expiry index, and a merge never takes an expired one back.

// sweepPage is at most how many expired keys the sweeper hands the writer
// per request.
const sweepPage = 1000

// sweepIdempotency runs until Close, sweeping once per IdempotencySweep.
func (r *Replica) sweepIdempotency() {
	r.sweepEvery(r.cfg.IdempotencySweep, "idempotency keys", func(ctx context.Context) (int, error) {
		return r.Admin().ExpireIdempotency(ctx, r.cfg.Now().Add(-r.cfg.IdempotencyTTL))
	})
}

// sweepEvery runs expire once per interval until Close, logging what it
// deleted, or why it stopped early (the next round goes on).
func (r *Replica) sweepEvery(interval time.Duration, what string, expire func(context.Context) (int, error)) {
	defer r.wg.Done()
	ctx := r.stopped // Close also stops a sweep in progress, not only the wait
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := expire(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			r.log.Warn("sweep stopped early; the next one goes on", "what", what, "expired", n, "error", err)
		case n > 0:
			r.log.Debug("expired", "what", what, "count", n)
		}
	}
}

// ExpireIdempotency deletes every idempotency key whose register is stamped
// before cutoff and which is expired by the rule, and returns how many it
// deleted. The sweeper calls it; so can a test or an operator tool.
func (a Admin) ExpireIdempotency(ctx context.Context, cutoff time.Time) (int, error) {
	r := a.r
	return r.sweep(ctx, r.metrics.idemExpired, func() (*request, int, error) {
		var batch []rkey
		err := r.store.Expiring(cutoff.UnixMilli(), func(kind storage.Kind, key, idem string, _ int64) bool {
			batch = append(batch, rkey{kind, key, idem})
			return len(batch) < sweepPage
		})
		return &request{expire: batch}, len(batch), err
	})
}

// sweep hands the writer pages of expiry candidates (each a request that
// deletes what is still expired by the rule when the writer applies it)
// until a page comes back short or deletes nothing: a candidate listed
// before the cutoff may not be past the rule by the writer's clock yet.
// It returns how many were deleted, also counted in done.
func (r *Replica) sweep(ctx context.Context, done prometheus.Counter, page func() (*request, int, error)) (int, error) {
	total := 0
	for {
		q, n, err := page()
		if err != nil || n == 0 {
			return total, err
		}
		if err := r.submit(ctx, q); err != nil {
			return total, err
		}
		total += q.expired
		done.Add(float64(q.expired))
		if q.expired == 0 || n < sweepPage {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}

// KeyExpired reports whether a keyed record or spend is past the
// idempotency TTL by this replica's clock: gone by rule, whether or not
// swept yet. A like record never expires.
func (r *Replica) KeyExpired(rec crdt.Record) bool {
	switch rec.(type) {
	case *crdt.LikeRecord, *crdt.TypeMeta:
		return false // only idempotency keys expire
	}
	return r.keyExpired(rec, r.pclock.NowMs())
}

// keyExpired is the rule every replica applies to keyed records and
// spends: a key expires IdempotencyTTL after its register's stamp (zero
// TTL: never).
func (r *Replica) keyExpired(rec crdt.Record, nowMs int64) bool {
	ttl := r.cfg.IdempotencyTTL.Milliseconds()
	hlc, _ := rec.Stamp()
	return ttl > 0 && hlc != 0 && hlc.WallMs()+ttl <= nowMs
}
