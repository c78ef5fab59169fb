// Package alloc hands out numbers of named global sequences ("the Nth
// like") to replicas in leased blocks, kept on a JetStream KV bucket, and
// ranks the numbers used densely: the Nth number used, in block order, has
// rank N, whatever holes unused tails left.
//
// # State and decisions
//
// One KV key per sequence, "seq.<name>", holds the whole State: the
// high-water mark HWM (numbers at or above it were never leased; numbers
// are never leased twice), the open leases, each a block [Start, End) with
// an epoch, a leaseholder, Used (what the leaseholder last reported spent) and Beat
// (bumped by each renewal), the closed blocks (their use final), and the
// dense prefix: every number below Dense.Pos is in a closed block, and
// Dense.Rank of them were used. Closing a block folds: the closed block at
// Dense.Pos gets its Base (the rank before it) and the prefix moves past
// it; its leaseholder takes the ranks (Config.OnFinal) and settles it. Every
// decision is a compare-and-swap of that value against the revision it
// was read at (KV Update with the expected revision): never a read
// followed by a blind write, because KV reads may be stale. The key is
// created with Update at revision 0, which fails over a delete marker: a
// deleted key stops numbering rather than restarting it.
//
// A write whose answer is lost (timeout) is indeterminate. Each attempt
// stores a fresh nonce in State.Applied[leaseholder]; the next read tells
// whether it landed (see seqKV.apply).
//
// # Leaseholders and fencing
//
// Each replica runs a Leaseholder per sequence. Its writer takes numbers with
// Take, never waiting on the network, stores Snapshot with the batch that
// used them, and calls Durable after the batch is committed. The leaseholder's
// goroutine renews its leases every RenewEvery, reporting what is durable,
// and takes a new block when the one in hand runs low; block sizes follow
// the replica's own rate so that one lasts about Target (a second).
//
// Fencing: a lease may be used only until TTL after the send time of the
// write that last renewed it, in the leaseholder's monotonic clock. A leaseholder cut
// off from the KV (partitioned, paused, its loop stuck) stops numbering
// from it at that deadline; its writer queues counted likes unnumbered
// until a lease is possible again.
//
// # Unused tails
//
// The tail of a lease is closed as a hole exactly, by the leaseholder itself,
// which alone knows what it used: when it goes idle, when the lease is
// CloseAfter old, when it closes, and, after a crash, on restart from the
// Snapshot stored with its data (its old leases are closed at the stored
// cursor, never used again). A leaseholder cut off or paused past its TTL
// renews the same lease when it returns: nobody else touched it.
//
// A leaseholder that never returns (its disk is lost) would keep its block
// open, and every rank above it unknown, forever. Retire (an operator
// action) and ReclaimAfter (automatic, off by default) close such a lease
// from the leaseholder's last report; the same replica restarting on an empty
// disk closes the leases it no longer knows as wholly unused (Forget),
// since which likes took their numbers is gone. Those are the inexact
// steps: likes numbered after the last report get no rank, and a folded
// block whose leaseholder lost its disk before taking its ranks keeps its
// milestones unfired. Milestone claims stay exactly-once regardless,
// because they are create-only keys.
//
// Holes cost nothing: ranks skip them. An earlier design leased unused
// tails again (a free list), so the numbers stayed dense without ranks;
// but a milestone in a tail given back waited for the next like, however
// long, and one in a block spent above a hole could fire before that many
// likes existed.
//
// # Rejected designs
//
// Reclaiming expired leases by TTL alone, with the tail freed from the
// leaseholder's last report, uses a cut-off leaseholder's last numbers twice under
// any partition longer than the TTL, and a cut-off region is the normal
// case here, not the exception; freeing nothing skips them. Reporting
// every number before use makes the KV a round trip per batch and stops
// numbering in a cut-off region; the lease keeps the KV off the like path.
package alloc
