// Package alloc hands out numbers of named global sequences ("the Nth
// like") to replicas in leased blocks, kept on a JetStream KV bucket, so
// that no number is used twice and none is skipped.
//
// # State and decisions
//
// One KV key per sequence, "seq.<name>", holds the whole State: the
// high-water mark HWM (numbers at or above it were never leased), the free
// list (unused tails given back, leased again before HWM moves), and the
// live leases, each a block [Start, End) with an epoch, a holder, Used (what
// the holder last reported spent) and Beat (bumped by each renewal). Every
// decision is a compare-and-swap of that value against the revision it was
// read at (KV Update with the expected revision): never a read followed by
// a blind write, because KV reads may be stale. Keys are never deleted:
// Create over a delete marker is not atomic.
//
// A write whose answer is lost (timeout) is indeterminate. Each attempt
// stores a fresh nonce in State.Applied[holder]; the next read tells
// whether it landed (see seqKV.apply).
//
// # Holders and fencing
//
// Each replica runs a Holder per sequence. Its writer takes numbers with
// Take, never waiting on the network, stores Snapshot with the batch that
// used them, and calls Durable after the batch is committed. The holder's
// goroutine renews its leases every RenewEvery, reporting what is durable,
// and takes a new block when the one in hand runs low; block sizes follow
// the replica's own rate so that one lasts about Target (a second).
//
// Fencing: a lease may be used only until TTL after the send time of the
// write that last renewed it, in the holder's monotonic clock. A holder cut
// off from the KV (partitioned, paused, its loop stuck) stops numbering
// from it at that deadline; its writer queues counted likes unnumbered
// until a lease is possible again.
//
// # Unused tails
//
// The tail of a lease goes back to the free list exactly, by the holder
// itself, which alone knows what it used: when it goes idle, when it
// closes, and, after a crash, on restart from the Snapshot stored with its
// data (its old leases are given back from the stored cursor, never used
// again). A holder cut off or paused past its TTL renews the same lease
// when it returns: nobody else touched it.
//
// A holder that never returns (its disk is lost) would keep its block
// forever. Retire (an operator action), ReclaimAfter (automatic, off by
// default), or the same replica restarting on an empty disk (it gives back
// leases it no longer knows) frees such a lease from the holder's last
// report. Those are the inexact steps: numbers the holder used after its
// last report, at most RenewEvery+TTL of its traffic, may be used again
// (and a milestone claim intent lost with the disk is never claimed by
// that replica).
// Milestone claims stay exactly-once regardless, because they are
// create-only keys.
//
// # Rejected designs
//
// Reclaiming expired leases by TTL alone, with the tail freed from the
// holder's last report, uses a cut-off holder's last numbers twice under
// any partition longer than the TTL, and a cut-off region is the normal
// case here, not the exception; freeing nothing skips them. Reporting
// every number before use makes the KV a round trip per batch and stops
// numbering in a cut-off region; the lease keeps the KV off the like path.
package alloc
