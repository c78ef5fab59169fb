// Package crdt holds tally's replicated data types and their merge rules.
// It is pure: no I/O, no clocks, no logging. Time and replica ids come in as
// arguments, so every rule here can be tested by hand and by randomized
// delivery.
//
// # The lattice
//
// Every type is a join-semilattice: Merge is commutative, associative and
// idempotent, so replicas may receive each other's state late, twice, or in
// any order and still end in the same place. Replicas gossip absolute values
// of their own entries, never increments: a lost message is repaired by any
// later one, a duplicate changes nothing.
//
// # PN-counter
//
// A Vector maps replica id to a PN entry {P, N}. Only replica r ever raises
// its own entry; both halves only grow. The value is ΣP − ΣN; Merge takes the
// element-wise max. A Vector is kept sorted by replica id so that its binary
// encoding, and hence any digest of it, is deterministic.
//
// # Hybrid logical clock
//
// HLC packs wall milliseconds (48 bits) and a logical counter (16 bits) into a
// uint64, so timestamps compare as integers. Clock.Now never goes backwards
// and Clock.Observe folds in remote timestamps, so a user's latest action at
// any replica carries a larger HLC than anything that replica had seen.
//
// # Like records and reconciliation
//
// Per (item, user) a LikeRecord is the product of two lattices:
//
//   - a last-writer-wins register {Liked, HLC, Origin, At, Idem} ordered by
//     (action time, HLC, Origin), where the action time is At, the
//     client's time of the action if it gave one, else the HLC's wall
//     time (LikeRecord.Wins; without client times, the HLC order);
//   - Contrib, a per-user PN vector: Contrib[r] is how much replica r has added
//     to (P) or removed from (N) the item's count on behalf of this user.
//
// The item's count vector is the sum of all users' Contrib, so each replica
// can maintain its own entry of the item vector locally and ship one small
// vector per item instead of every user record.
//
// The excess of a record is d = Σ(Contrib.P − Contrib.N) − (Liked ? 1 : 0).
// Concurrent likes of one user at two replicas both count at first (d = 1).
// The rule that fixes it: whenever a replica's merged view of a record
// changes and that replica is the record's Origin (the LWW winner), it brings
// d to zero by raising its own N (d > 0) or its own P (d < 0), in the record
// and in the item vector together. Only the winner acts, and only on its own
// entries, so single-writer max-merge stays valid; the final winner sees the
// final record, so the count converges to exactly the number of users whose
// latest action is "like".
//
// A local action is the same rule: the record takes a fresh HLC with Origin =
// self and the new Liked flag, then Reconcile runs. An action with a
// client's time older than the state it finds loses by the same order, and
// is dropped (LikeRecord.Decide); a toggle flips the state it finds and is
// ordered right after it (LikeRecord.ToggleAt), its idempotency key (Idem)
// in the register it writes. If the replica's view said
// "not liked", d is −1 and P[self] rises by one; if it already said "liked",
// nothing changes but the timestamp (liking twice counts once).
//
// Worked example: user u likes at A (A.p = 1) while, unaware, u likes at B
// with a later HLC (B.p = 1). Merged anywhere: liked, origin B, d = 2 − 1 = 1.
// Only B acts: B.n = 1, count 1. Later u unlikes at A: A's view says liked,
// the record takes origin A, liked = false, d = (1 − 0) + (1 − 1) − 0 = 1, so
// A.n = 1 and the count is 0 everywhere once the record has spread.
//
// # Keyed records and spends
//
// The same lattice serves idempotency keys. A KeyedRecord, per (counter,
// idempotency key), says the key was applied and by how much (Amount):
// its contributions must add up to Amount instead of 1, and the winner
// fixes the excess as for a like. A Spend, per (budget, idempotency key),
// is a keyed record whose amount is taken from a budget; its excess is
// fixed only by refunds (Spend.RefundLoser), never by the winner, so no
// reconciliation spends. The three kinds are distinct types (Record is
// any of them) sharing one encoding: the keyed flag tells a like record
// from the other two, and the name a record is stored and sent under
// (SpendName) tells a spend from a counter's keyed record.
//
// # Block flags
//
// A Flag is a per-user last-writer-wins Register of a Block {Blocked},
// ordered by (HLC, Origin) like a like record's register. A blocked user's
// likes do not count, so the excess of each of the user's like records is
// d = Σ(Contrib.P − Contrib.N) − (Liked && !Blocked ? 1 : 0)
// (LikeRecord.ExcessBlocked). The rule is the same, with one more trigger:
// a record's winner brings d to zero whenever its view of the record or of
// the user's flag changes. Every record's winner eventually sees the final
// record and the final flag, so every record ends at d = 0 and an item
// counts exactly the users whose latest action is a like and whose final
// flag is not blocked. Between replicas a flag travels as a register-only
// like record (FlagRecord), so provenance cuts apply to it unchanged.
//
// # Slots
//
// A slot (Slot) is a PN vector like any other, named
// <key>#<width>.<start>.<keep>: the net change of a count in one interval.
// Its name carries its retention, so Expired is a pure rule of (slot,
// now) that every replica applies alike, and an expired slot is never
// taken back by a merge.

package crdt
