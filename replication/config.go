package replication

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/internal/base/failpoint"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

// Config configures a Replicator.
type Config struct {
	// Replica is the local replica. Required. It should be opened with
	// HoldWrites so that recovery runs before it acknowledges anything.
	Replica *region.Replica
	// Store is the replica's store, for digests and segment pages. Required.
	Store *storage.Store
	// Outbox is the replica's OnCommit hook. Required.
	Outbox *Outbox
	// Transport carries messages. Required.
	Transport Transport
	// Logger. Default: a null logger.
	Logger hclog.Logger
	// Now is the wall clock. Default: time.Now.
	Now func() time.Time

	// FlushInterval is how often coalesced changes are published. Default 10ms.
	FlushInterval time.Duration
	// HeartbeatInterval: an idle replica still publishes this often. Default 1s.
	HeartbeatInterval time.Duration
	// AntiEntropyInterval is how often digests are compared with each peer.
	// Default 1s.
	AntiEntropyInterval time.Duration
	// PeerTimeout: a peer unheard-from for longer is stale, and reads say
	// approx. Default 5s. Peers are never forgotten: a replica cut off for a
	// day still means counts may move.
	PeerTimeout time.Duration
	// RequestTimeout bounds one anti-entropy request. Default 2s.
	RequestTimeout time.Duration
	// MaxMessageBytes caps one published message or page. Default 256 KiB
	// (NATS' default max_payload is 1 MiB).
	MaxMessageBytes int
	// MaxSegmentsPerRound caps the segments pulled from one peer in one
	// anti-entropy round once recovered (recovery pulls everything).
	// Under write load most segments differ only because fast-path messages
	// are in flight; the cap keeps anti-entropy from re-reading the whole
	// state every round. Default 256 (of storage.Segments = 4096).
	MaxSegmentsPerRound int

	// Peers are the other replicas, in every region. They are the only
	// replicas this one listens to: a message from any other id is
	// refused and counted, and never makes a peer. A replica with a fresh
	// (empty) store also waits until it has synced from every one of them
	// before it accepts writes.
	Peers []string
	// Retired are replicas gone for good. Nobody publishes as them any
	// more, and their state no longer changes: every replica holds it
	// already (retiring starts from a converged deployment), so no
	// message may add to it. Only a replica recovering from an empty
	// store takes it, from its peers' anti-entropy pages, as it takes its
	// own entries back. (A live replica's entries are taken only from
	// itself.)
	Retired []string
	// RecoveryTimeout bounds how long a replica whose store has data waits
	// for its peers before it accepts writes anyway. Default 10s. A fresh
	// store waits for Peers without limit.
	RecoveryTimeout time.Duration

	// Shards says which shards each replica holds. Default: nil, every
	// replica holds every shard.
	Shards ShardView

	// Registerer receives replication metrics. Default: none.
	Registerer prometheus.Registerer

	// NetFaults, honoured only in a chaos build (`-tags chaos`), puts every
	// message the replicator publishes (the fast path: deltas and
	// heartbeats) through a FaultyTransport with these faults; anti-entropy
	// requests are left alone. The chaos suite's network model (see
	// NetFaultsFromEnv). Default: none.
	NetFaults Faults
	// Failpoints arms replication's deliberate bugs (failpoints.go),
	// honoured only in a chaos build; nil, the default and what production
	// passes, arms none. It is one opaque handle, not a field per bug, and
	// a field because New builds the replicator from its Config alone.
	Failpoints *failpoint.Set
}

// DefaultConfig returns a Config with every default filled in.
func DefaultConfig() Config {
	return Config{
		FlushInterval:       10 * time.Millisecond,
		HeartbeatInterval:   time.Second,
		AntiEntropyInterval: time.Second,
		PeerTimeout:         5 * time.Second,
		RequestTimeout:      2 * time.Second,
		MaxMessageBytes:     256 << 10,
		MaxSegmentsPerRound: 256,
		RecoveryTimeout:     10 * time.Second,
	}
}

func (c *Config) ensureDefaults() {
	d := DefaultConfig()
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	setDur := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	setDur(&c.FlushInterval, d.FlushInterval)
	setDur(&c.HeartbeatInterval, d.HeartbeatInterval)
	setDur(&c.AntiEntropyInterval, d.AntiEntropyInterval)
	setDur(&c.PeerTimeout, d.PeerTimeout)
	setDur(&c.RequestTimeout, d.RequestTimeout)
	setDur(&c.RecoveryTimeout, d.RecoveryTimeout)
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = d.MaxMessageBytes
	}
	if c.MaxSegmentsPerRound == 0 {
		c.MaxSegmentsPerRound = d.MaxSegmentsPerRound
	}
}

// Validate reports every problem with c at once.
func (c Config) Validate() error {
	var errs []error
	if c.Replica == nil {
		errs = append(errs, errors.New("replication: Replica is required"))
	}
	if c.Store == nil {
		errs = append(errs, errors.New("replication: Store is required"))
	}
	if c.Outbox == nil {
		errs = append(errs, errors.New("replication: Outbox is required"))
	}
	if c.Transport == nil {
		errs = append(errs, errors.New("replication: Transport is required"))
	}
	for name, d := range map[string]time.Duration{
		"FlushInterval": c.FlushInterval, "HeartbeatInterval": c.HeartbeatInterval,
		"AntiEntropyInterval": c.AntiEntropyInterval, "PeerTimeout": c.PeerTimeout,
		"RequestTimeout": c.RequestTimeout, "RecoveryTimeout": c.RecoveryTimeout,
	} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("replication: %s %s < 0", name, d))
		}
	}
	if c.MaxMessageBytes < 0 || c.MaxMessageBytes > 0 && c.MaxMessageBytes < 4096 {
		errs = append(errs, fmt.Errorf("replication: MaxMessageBytes %d < 4096", c.MaxMessageBytes))
	}
	if err := c.NetFaults.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("replication: NetFaults: %w", err))
	}
	tokens := map[string]string{}
	for _, id := range append(append([]string(nil), c.Peers...), c.Retired...) {
		if !crdt.ValidID(id) {
			errs = append(errs, fmt.Errorf("replication: bad peer id %q", id))
			continue
		}
		// Subjects replace '.' by '_': two ids differing only there would
		// share a subject, and NATS permissions could not tell them apart.
		if other, ok := tokens[token(id)]; ok && other != id {
			errs = append(errs, fmt.Errorf("replication: peer ids %q and %q share the subject token %q", other, id, token(id)))
		}
		tokens[token(id)] = id
	}
	if c.MaxSegmentsPerRound < 0 {
		errs = append(errs, fmt.Errorf("replication: MaxSegmentsPerRound %d < 0", c.MaxSegmentsPerRound))
	}
	return errors.Join(errs...)
}
