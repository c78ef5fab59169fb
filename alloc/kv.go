package alloc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/internal/base/poll"
)

// KV is the part of a JetStream KV bucket the allocator uses;
// jetstream.KeyValue and LazyBucket have it.
type KV interface {
	Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
	Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error)
	Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error)
}

// seqKV applies state changes to one sequence's key by compare-and-swap.
type seqKV struct {
	kv          KV
	key         string
	leaseholder string
	opTimeout   time.Duration
}

// errStop ends an apply without writing: the change found nothing to do.
var errStop = errors.New("alloc: nothing to write")

// apply reads the latest state, lets fn change it, and writes it back with
// a CAS on the revision it read, retrying on conflicts until it lands or
// ctx ends. It returns the state as written (or as found, if fn returned
// errStop or another error, which apply passes back).
//
// A write whose outcome is unknown (a timeout, a lost connection) is
// resolved by re-reading: every attempt carries a fresh nonce, recorded in
// State.Applied[leaseholder] by the write itself, so the next read tells
// whether any attempt of this call landed. Because each attempt is a CAS on
// the revision it read, at most one attempt of a call can land, and once
// one has, every later attempt sees its nonce and stops: fn takes effect at
// most once, and exactly once if apply returns nil.
func (s *seqKV) apply(ctx context.Context, fn func(st *State, nonce string) error) (*State, error) {
	var nonces []string
	backoff := 5 * time.Millisecond
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("update %s: %w", s.key, err)
		}
		st, rev, err := s.read(ctx)
		if err != nil {
			return nil, err
		}
		if len(nonces) > 0 && slices.Contains(nonces, st.Applied[s.leaseholder]) {
			return st, nil // an earlier attempt landed
		}
		nonce := uuid.NewString()
		next := st.Clone()
		if err := fn(next, nonce); err != nil {
			return st, err
		}
		if next.Applied == nil {
			next.Applied = make(map[string]string)
		}
		next.Applied[s.leaseholder] = nonce
		if err := next.Check(); err != nil {
			return st, fmt.Errorf("update %s: change breaks invariants: %w", s.key, err)
		}
		nonces = append(nonces, nonce)
		octx, cancel := context.WithTimeout(ctx, s.opTimeout)
		_, err = s.kv.Update(octx, s.key, next.Encode(), rev)
		cancel()
		switch {
		case err == nil:
			return next, nil
		case errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists):
			// Someone wrote first; this attempt did not land. Go again at
			// once, with a little backoff after a few tries.
			if attempt >= 3 {
				if !poll.Sleep(ctx, backoff) {
					return nil, fmt.Errorf("update %s: %w", s.key, ctx.Err())
				}
				backoff = min(2*backoff, 200*time.Millisecond)
			}
		case errors.Is(err, ErrRefused):
			// The lease authority will never write this change.
			return st, fmt.Errorf("update %s: %w", s.key, err)
		default:
			// Indeterminate: the next read decides.
			if !poll.Sleep(ctx, backoff) {
				return nil, fmt.Errorf("update %s: %w (outcome unknown)", s.key, err)
			}
			backoff = min(2*backoff, 200*time.Millisecond)
		}
	}
}

// read returns the current state and its revision, creating the key for a
// sequence nobody has used. Keys are never deleted: Create over a delete
// marker is not atomic.
func (s *seqKV) read(ctx context.Context) (*State, uint64, error) {
	for {
		octx, cancel := context.WithTimeout(ctx, s.opTimeout)
		e, err := s.kv.Get(octx, s.key)
		cancel()
		if err == nil {
			st, derr := DecodeState(e.Value())
			if derr != nil {
				return nil, 0, fmt.Errorf("read %s at revision %d: %w", s.key, e.Revision(), derr)
			}
			return st, e.Revision(), nil
		}
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, 0, fmt.Errorf("read %s: %w", s.key, err)
		}
		// Create only if the key never had a value: Update with revision
		// 0. KV Create would also write over a delete marker, and a
		// deleted key must not quietly restart the sequence at 1.
		octx, cancel = context.WithTimeout(ctx, s.opTimeout)
		_, err = s.kv.Update(octx, s.key, NewState().Encode(), 0)
		cancel()
		if err == nil {
			continue
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, 0, fmt.Errorf("create %s: %w", s.key, err)
		}
		// Someone else created it just now, or it was deleted: look again.
		octx, cancel = context.WithTimeout(ctx, s.opTimeout)
		_, err = s.kv.Get(octx, s.key)
		cancel()
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, 0, fmt.Errorf("%w: %s", ErrSequenceDeleted, s.key)
		}
	}
}

// ErrSequenceDeleted: a sequence's key was deleted or purged. Nothing in
// tally deletes it; numbering from 1 again would reuse every number, so
// the leaseholder stops until an operator restores the key (docs/operations.md).
var ErrSequenceDeleted = errors.New("alloc: the sequence's key was deleted")
