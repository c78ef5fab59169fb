package alloc

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// BucketConfig places the allocator's KV bucket.
type BucketConfig struct {
	// Name of the bucket. Default DefaultBucket.
	Name string
	// Replicas of its stream (1, 3 or 5). Default 1; production wants 3.
	Replicas int
	// Cluster, if set, is the NATS cluster (region) the bucket lives in. In
	// a super-cluster all of a stream's replicas are in one cluster, so the
	// KV is reachable from a region only while that region can reach this
	// one.
	Cluster string
}

// OpenBucket opens the allocator's KV bucket, creating it if no replica
// has yet. The bucket keeps one revision per key (every decision is a CAS
// on the latest) on file storage.
//
// Durability is the server's: JetStream fsyncs only every sync_interval
// (two minutes by default), so a server that loses power can forget a
// lease it granted and grant its numbers again. Run the servers holding
// the bucket with `jetstream { sync_interval: always }` (localnet does).
func OpenBucket(ctx context.Context, js jetstream.JetStream, cfg BucketConfig) (jetstream.KeyValue, error) {
	if cfg.Name == "" {
		cfg.Name = DefaultBucket
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	kv, err := js.KeyValue(ctx, cfg.Name)
	if err == nil {
		return kv, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("open kv bucket %s: %w", cfg.Name, err)
	}
	kc := jetstream.KeyValueConfig{
		Bucket:      cfg.Name,
		Description: "tally range-lease allocator: sequences and milestone claims",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
	}
	if cfg.Cluster != "" {
		kc.Placement = &jetstream.Placement{Cluster: cfg.Cluster}
	}
	kv, err = js.CreateKeyValue(ctx, kc)
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = js.KeyValue(ctx, cfg.Name) // another replica was first
	}
	if err != nil {
		return nil, fmt.Errorf("create kv bucket %s: %w", cfg.Name, err)
	}
	return kv, nil
}

// Retire frees every lease leaseholder has on sequence, from what it last
// reported: the operator's tool for a replica that will not come back
// (its disk is gone). If the replica does come back with its data, the
// numbers it used after its last report may be used twice; milestones
// still fire at most once, because claims are create-only.
func Retire(ctx context.Context, kv KV, sequence, leaseholder string) (freed []Span, err error) {
	s := &seqKV{kv: kv, key: "seq." + sequence, leaseholder: "retire:" + leaseholder, opTimeout: DefaultOpTimeout}
	_, err = s.apply(ctx, func(st *State, _ string) error {
		freed = freed[:0]
		for _, l := range append([]Lease(nil), st.Leases...) {
			if l.Leaseholder != leaseholder {
				continue
			}
			if err := st.Release(leaseholder, l.Epoch, l.Used); err != nil {
				return err
			}
			freed = append(freed, Span{l.Used, l.End})
		}
		// Its folded blocks wait for it to take their ranks; it never
		// will (milestones among them are not fired).
		folded := st.Folded(leaseholder)
		for _, c := range folded {
			st.Settle(leaseholder, c.Epoch)
		}
		if len(freed) == 0 && len(folded) == 0 {
			return errStop
		}
		return nil
	})
	if errors.Is(err, errStop) {
		err = nil
	}
	if err != nil {
		return nil, fmt.Errorf("retire %s from %s: %w", leaseholder, sequence, err)
	}
	return freed, nil
}

// Read returns a sequence's current state (possibly a little stale).
func Read(ctx context.Context, kv KV, sequence string) (*State, error) {
	s := &seqKV{kv: kv, key: "seq." + sequence, opTimeout: DefaultOpTimeout}
	st, _, err := s.read(ctx)
	return st, err
}

// LazyBucket opens the bucket on first use and again after a failure, so a
// replica can start while JetStream is out of reach: numbering waits, likes
// do not.
type LazyBucket struct {
	js  jetstream.JetStream
	cfg BucketConfig

	mu sync.Mutex // protects kv
	kv jetstream.KeyValue
}

// NewLazyBucket returns a bucket handle that opens on first use.
func NewLazyBucket(js jetstream.JetStream, cfg BucketConfig) *LazyBucket {
	return &LazyBucket{js: js, cfg: cfg}
}

func (b *LazyBucket) open(ctx context.Context) (jetstream.KeyValue, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.kv != nil {
		return b.kv, nil
	}
	kv, err := OpenBucket(ctx, b.js, b.cfg)
	if err != nil {
		return nil, err
	}
	b.kv = kv
	return kv, nil
}

// Get reads a key.
func (b *LazyBucket) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	kv, err := b.open(ctx)
	if err != nil {
		return nil, err
	}
	return kv.Get(ctx, key)
}

// Create writes a key that must not exist.
func (b *LazyBucket) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	kv, err := b.open(ctx)
	if err != nil {
		return 0, err
	}
	return kv.Create(ctx, key, value, opts...)
}

// Update writes a key at an expected revision.
func (b *LazyBucket) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	kv, err := b.open(ctx)
	if err != nil {
		return 0, err
	}
	return kv.Update(ctx, key, value, revision)
}
