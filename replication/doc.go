// Package replication moves replica state between regions over NATS: a
// fast path of coalesced absolute values, and anti-entropy that repairs
// whatever the fast path lost.
//
// # Fast path
//
// The region writer hands every durable commit to an Outbox, which keeps
// only the newest own entry per vector and the newest state per like record.
// Every FlushInterval the flusher publishes what accumulated on the replica's
// own subject, tally.delta.<region>.<replica>, in messages of at most
// MaxMessageBytes. Values are absolute, so a lost message is repaired by any
// later one and a duplicate changes nothing; receivers merge by max. When
// nothing changed for HeartbeatInterval an empty delta goes out anyway, so
// peers know the replica is alive and how far behind its clock the messages
// arrive (lag). Publishing never blocks a local write: the writer only fills
// the outbox, and if NATS is down the flusher drops what it cannot send.
//
// # Anti-entropy
//
// Storage cuts the replicated key space into storage.Segments segments
// (hash groups of keys) and keeps an XOR-of-hashes digest per segment.
// Every AntiEntropyInterval a replica asks each peer for its digests
// (tally.ae.<replica>.digests), compares them with its own, and pages
// through each differing segment (tally.ae.<replica>.page), merging what it
// receives. Each side pulls, so after a round in both directions the
// segments agree. Sharded, a replica asks a peer only for the digests of
// the segments of the shards both hold (segments nest in shards), with a
// summary of its own over them: if the peer's is equal it answers "equal"
// and no digest travels, and a live peer holding none of its shards is
// not asked at all. Digest traffic then follows the shards a replica holds
// and their holders, not every pair of replicas. Lost messages, a
// partition of any length, a restarted replica and a brand-new one all
// converge this way, with no operator action.
//
// # Recovery before acknowledging
//
// A replica's own entries must never go backwards: if it lost its data and
// counted on from zero, max-merge would silently swallow its new increments
// until it passed the old value. So a replica starts with writes held, pulls
// its peers' full state first (which carries its own entries as the peers saw
// them), and only then accepts writes. A fresh store waits for every peer in
// Config.Peers, however long it takes (safety over liveness); a store
// that has data waits at most RecoveryTimeout, since its fsynced state is
// only at risk if it was restored from an old copy; a backup written by
// region.Admin.Backup is marked as never having accepted writes, so a
// replica restored from one counts as fresh and waits for every peer.
//
// # Faults and tests
//
// Replication talks to the bus through Transport: NATS in production,
// MemNetwork in tests (members by name; links cut, lossy or healed per
// direction; delivery by hand if asked). FaultyTransport wraps either to
// drop, duplicate and delay what is published. A chaos build wraps the
// NATS transport with it when Config.NetFaults says so (see NetFaultsFromEnv).
// Listen's Steps run a replicator by hand instead of Start's goroutines:
// replicationtest drives replicas that way over a MemNetwork, one flush,
// delivery and anti-entropy round at a time, through the scenario scripts
// in the repository's testdata/.
package replication
