package replication

import (
	"time"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/shard"
)

// What a message may change (docs/architecture.md, "Threat model"). NATS
// permissions make the subject of a delta, and the responder to a page
// request, authentic: only replica X may publish tally.delta.<region>.X
// or answer tally.ae.X.*. On top of that, a replica takes from a message
// only what its sender may say:
//
//   - entries of the sender itself: its vector entries, its contribution
//     to like records, the registers of records it is the origin of;
//   - entries of this replica: passed to the region, which takes them
//     only during recovery (before it acknowledges anything) and refuses
//     and counts a higher claim after that;
//   - entries of a retired replica, which no longer changes, but only in
//     an anti-entropy page pulled while this replica recovers from an
//     empty store (see takesRetired) or, of a shard it is joining in a
//     move, pulled while it joins (see joinsShard); and so, of a shard
//     only, entries of a peer that keeps that shard no longer (see
//     leftShard);
//
// and nothing of an id that is neither this replica, a peer nor retired:
// such a message or entry is refused and counted. Entries of the other
// live peers are relays, left out without complaint: each peer sends its
// own, and anti-entropy compares with every peer directly.

// Reasons for tally_replication_refused_total.
const (
	refusedUnknownSender  = "unknown_sender"
	refusedUnknownReplica = "unknown_replica"
)

// known reports whether id is this replica, a configured peer or retired.
func (r *Replicator) known(id string) bool {
	if r.trustRelays() { // never outside a chaos build
		return true
	}
	if id == r.self || r.retired[id] {
		return true
	}
	return (*r.peerSet.Load())[id] // AddPeers replaces the set while the replicator runs
}

// source is how a message reached this replica.
type source bool

const (
	fastPath source = false // a delta on the sender's subject
	aePage   source = true  // a page this replica pulled from the sender
)

// speaksFor reports whether a message from sender, arrived by src, may
// carry owner's state of name (a vector, record or sketch name; "": of no
// shard in particular).
func (r *Replicator) speaksFor(sender, owner, name string, src source) bool {
	if r.trustRelays() { // never outside a chaos build
		return true
	}
	switch {
	case r.retired[owner]:
		return r.takesRetired(src) || r.joinsShard(name, src)
	case owner == sender || owner == r.self:
		return true
	case r.leftShard(owner, name):
		return r.takesRetired(src) || r.joinsShard(name, src)
	}
	return false
}

// leftShard reports whether owner, a peer, keeps name's shard no longer
// (it left it in a settled move, or never held it): its state there no
// longer changes, since it writes only the shards it keeps, and every
// holder had it when owner dropped the shard (a move's release), but
// owner no longer compares the shard, so nobody gives it to a holder that
// lost its disk, or to one that joins the shard later. As a retired
// replica's state, it is taken from another replica only in an
// anti-entropy page pulled while this replica recovers from an empty
// store (takesRetired) or joins the shard (joinsShard). Without it, a
// recovering winner of a like record owner contributed to would
// reconcile from a view missing owner's contribution and double the
// count everywhere else.
func (r *Replicator) leftShard(owner, name string) bool {
	return name != "" && r.cfg.Shards != nil && !r.cfg.Shards.Holds(owner, shard.Of(name))
}

// takesRetired reports whether state of a retired replica, arrived by src,
// merges: only from an anti-entropy page pulled while this replica
// recovers from an empty store (docs/architecture.md, "Retired replicas
// and relays").
//
// A retired replica publishes nothing, so whatever names it now comes
// from another replica, which cannot show that the state is the retired
// one's. Every replica had that state when the id was retired (retiring
// starts from a converged deployment), so a relay of it can only repeat
// what this replica holds or add to it, and an addition is a forgery:
// taken, a contribution to a like record would make the record's winner
// reconcile it away with its own, authentic entry, and the forgery would
// spread as that replica's. So once recovered, and on the fast path
// always, it is left out. A replica that lost its disk has nothing to
// compare with and gets it back from its peers, as it gets its own
// entries back: that is the one time it takes their word for it.
func (r *Replicator) takesRetired(src source) bool {
	if r.trustRetiredRelays() { // never outside a chaos build
		return true
	}
	return src == aePage && r.fresh && !r.recovered.Load()
}

// joinsShard reports whether state of a replica that writes name's shard
// no more (retired, or a peer that left the shard), arrived by src,
// merges because this replica is joining that shard in a move: only from
// an anti-entropy page, and only while it joins (docs/architecture.md,
// "Moves while serving").
//
// A replica joins a shard it has none of (what it kept of a shard it
// once left it dropped, but for its own entries), as a replica recovering
// from an empty store has nothing. The state of a replica that left the
// shard in an earlier move is at every holder that kept the shard then
// (that move's release), and nowhere else: its owner compares the shard
// no more, so the holders the joining replica pulls from are the only
// ones that can give it. Left out, the joining replica served the shard
// without it (reads short of what was acknowledged, and, as the winner
// of a like record the leaver contributed to, a reconcile from a partial
// view that double-counts the user), and a replica leaving the shard to
// it in this move never compared equal with it, so the move never
// released (two drains in a row: testdata/shards/drain_twice.txt). It is
// the trust a recovering replica gives its peers, for the shards being
// joined, while they are joined.
func (r *Replicator) joinsShard(name string, src source) bool {
	return src == aePage && name != "" && r.cfg.Shards != nil && r.cfg.Shards.Joins(r.self, shard.Of(name))
}

// givesTo reports whether an anti-entropy page from sender to asker, for a
// DiffRequest naming asker, carries owner's state in shard s: what asker
// would take from sender (speaksFor as asker runs it, relays included,
// since asker may be recovering or joining s). Either side computes it,
// the sender to leave the rest out and the asker to leave the hashes of
// the rest out of its request. Their views of the shard map may differ
// for a moment; then the sender sends an entry the asker refuses or holds.
func (r *Replicator) givesTo(sender, owner, asker string, s int) bool {
	if owner == sender || owner == asker {
		return true
	}
	if r.diffsWithoutRelays() { // never outside a chaos build
		return false
	}
	return r.retired[owner] || (r.cfg.Shards != nil && !r.cfg.Shards.Holds(owner, s))
}

// vetEntry decides whether a vector entry of owner, pulled from sender in
// an anti-entropy page, merges.
func (r *Replicator) vetEntry(sender, owner string) bool { return r.vetEntryOf(sender, owner, "") }

// vetEntryOf is vetEntry for an entry of vector or sketch name.
func (r *Replicator) vetEntryOf(sender, owner, name string) bool {
	if !r.known(owner) {
		r.refuse(refusedUnknownReplica, "entry of a replica that is not a configured peer", "from", sender, "replica", owner)
		return false
	}
	return r.speaksFor(sender, owner, name, aePage)
}

// vetRecord returns the part of rec that sender may say, having sent it
// by src, and whether anything is left to merge.
func (r *Replicator) vetRecord(sender string, rec crdt.Record, src source) (crdt.Record, bool) {
	return r.vetRecordOf(sender, "", rec, src)
}

// vetRecordOf is vetRecord for a record of name (its item or key).
func (r *Replicator) vetRecordOf(sender, name string, rec crdt.Record, src source) (crdt.Record, bool) {
	unknown := ""
	keep := func(id string) bool {
		if !r.known(id) {
			unknown = id
			return false
		}
		return r.speaksFor(sender, id, name, src)
	}
	out, cut, ok := restrictRecord(rec, keep)
	if !ok {
		return nil, false
	}
	if unknown != "" {
		// A record naming a replica nobody configured is not a relay
		// gone stale but made up: refuse all of it.
		r.refuse(refusedUnknownReplica, "like record naming a replica that is not a configured peer", "from", sender, "replica", unknown)
		return nil, false
	}
	if !cut {
		return rec, true
	}
	return out, !out.Empty()
}

// restrictRecord is rec cut to the parts of the replicas keep accepts, and
// whether any part was cut; ok is false for a kind of record that cannot
// be cut.
func restrictRecord(rec crdt.Record, keep func(replica string) bool) (out crdt.Record, cut, ok bool) {
	switch rec := rec.(type) {
	case *crdt.LikeRecord:
		out, cut = rec.Restrict(keep)
	case *crdt.KeyedRecord:
		out, cut = rec.Restrict(keep)
	case *crdt.Spend:
		out, cut = rec.Restrict(keep)
	case *crdt.TypeMeta:
		out, cut = rec.Restrict(keep)
	default:
		return nil, false, false
	}
	return out, cut, true
}

// refuse counts a refused message or entry and logs it, at most once a
// second: a flood of forgeries must not become a flood of log lines.
func (r *Replicator) refuse(reason, msg string, kv ...any) {
	r.m.refused.WithLabelValues(reason).Inc()
	now := time.Now().UnixMilli()
	if last := r.lastRefusalLog.Load(); now-last >= 1000 && r.lastRefusalLog.CompareAndSwap(last, now) {
		r.log.Warn("refused: "+msg, append(kv, "reason", reason)...)
	}
}
