package alloc

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// RetireConfig names what an operator retires (see RetireReplica).
type RetireConfig struct {
	// Bucket is the allocator's KV bucket. Default DefaultBucket.
	Bucket string
	// Sequence is the sequence whose leases are freed, e.g. "likes".
	Sequence string
	// Replica is the replica id that will not come back. Required.
	Replica string
}

// RetireReplica is `tallyd admin retire`: it opens the existing bucket
// (never creating it, nor the sequence's key) and frees every lease
// cfg.Replica has on cfg.Sequence (see Retire), returning the spans freed.
// None freed is not an error: the leaseholder held nothing, or was retired
// already.
func RetireReplica(ctx context.Context, js jetstream.JetStream, cfg RetireConfig) ([]Span, error) {
	if cfg.Bucket == "" {
		cfg.Bucket = DefaultBucket
	}
	if cfg.Replica == "" {
		return nil, errors.New("alloc: retire: leaseholder is required")
	}
	if !sequenceName.MatchString(cfg.Sequence) {
		return nil, fmt.Errorf("alloc: retire: sequence %q must match %s", cfg.Sequence, sequenceName)
	}
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("alloc: retire: open kv bucket %s: %w", cfg.Bucket, err)
	}
	if _, err := kv.Get(ctx, "seq."+cfg.Sequence); err != nil {
		return nil, fmt.Errorf("alloc: retire: sequence %s in bucket %s: %w", cfg.Sequence, cfg.Bucket, err)
	}
	return Retire(ctx, kv, cfg.Sequence, cfg.Replica)
}
