package replication

import (
	"time"

	"github.com/tally-dev/tally/shard"
	"github.com/tally-dev/tally/storage"
)

// ShardView says which shards each replica holds (package shard's maps of
// every region). A replica keeps, merges and compares only the shards it
// holds: a delta's entries of other shards are dropped, and anti-entropy
// with a peer compares only the segments of shards both hold.
type ShardView interface {
	// Holds reports whether replica holds shard s. A replica the view
	// does not know holds every shard (its region is not sharded).
	Holds(replica string, s int) bool
	// Joins reports whether replica is taking shard s in a move (it
	// holds it, and has not served it yet): such a replica takes, from
	// anti-entropy pages of s, the state of replicas that keep s no
	// longer (authority.go, joinsShard).
	Joins(replica string, s int) bool
}

// holdsName reports whether this replica holds the shard of a vector or
// record name.
func (r *Replicator) holdsName(name string) bool {
	return r.cfg.Shards == nil || r.cfg.Shards.Holds(r.self, shard.Of(name))
}

// sharedShards are the shards this replica and peer both hold: only their
// segments do the two compare, and only their digests do they exchange
// (a DigestsRequest), so a sharded replica's digest traffic grows with the
// shards it holds times their holders, not with every pair of replicas.
func (r *Replicator) sharedShards(peer string) shard.Set {
	var ss shard.Set
	for s := range shard.Count {
		if r.cfg.Shards.Holds(r.self, s) && r.cfg.Shards.Holds(peer, s) {
			ss.Add(s)
		}
	}
	return ss
}

// StaleFor is Stale for the shard of one vector or record name: only the
// peers holding that shard count, so a replica down in a sharded region
// makes approximate only the reads of the shards it holds.
func (r *Replicator) StaleFor(name string) bool {
	if !r.recovered.Load() {
		return true
	}
	s := shard.Of(name)
	now := r.cfg.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.peers {
		if r.cfg.Shards != nil && !r.cfg.Shards.Holds(p.id, s) {
			continue
		}
		if r.staleLocked(p, now) {
			return true
		}
	}
	return false
}

// StalenessFor maps each peer holding name's shard (every peer,
// unsharded) to the milliseconds since it was last heard from (-1:
// never): what a read says of how old its view of each replica may be.
// It is Peers for one key without the rest of each peer's status, since
// every read asks it.
func (r *Replicator) StalenessFor(name string) map[string]int64 {
	s := shard.Of(name)
	now := r.cfg.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int64, len(r.peers))
	for _, p := range r.peers {
		if r.cfg.Shards != nil && !r.cfg.Shards.Holds(p.id, s) {
			continue
		}
		ago := int64(-1)
		if heard := heardLocked(p); !heard.IsZero() {
			ago = now.Sub(heard).Milliseconds()
		}
		out[p.id] = ago
	}
	return out
}

// PeerHolds reports whether peer holds the shard of a vector or record
// name (every peer does in an unsharded deployment).
func (r *Replicator) PeerHolds(peer, name string) bool {
	return r.cfg.Shards == nil || r.cfg.Shards.Holds(peer, shard.Of(name))
}

// ShardSync says how far this replica's copy of shards ss is along, for a
// shard move (shard/move.go). synced: with every peer keeping any of
// them, every difference as of a comparison begun after since has been
// pulled, but for segments the peer was still writing (their changes
// come by the fast path), so a joining replica has what they held, and
// the state of replicas that left those shards, which it takes only
// while it joins (authority.go, joinsShard), but in a segment a peer
// wrote at every comparison. A comparison begun at since itself does not
// count: on a clock that moves in steps it may have begun before the
// replica took the map that has it join. equal: every segment of ss that
// a peer keeps has compared equal with that peer at a comparison begun at
// or after since, so a replica that stopped writing them by since has
// its entries there (a digest covers every entry, and state only grows).
// A peer that restarted since counts only by comparisons begun after
// this replica heard it again: it may have come back on an empty data
// dir, and a replica that dropped the shards on the word of an older
// comparison would leave it nobody to get the entries of those shards
// from.
func (r *Replicator) ShardSync(ss shard.Set, since time.Time) (synced, equal bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	synced, equal = r.recovered.Load(), r.recovered.Load()
	for _, p := range r.peers {
		eqSince := since
		if p.restartedAt.After(eqSince) {
			eqSince = p.restartedAt
		}
		for s := range shard.Count {
			if !ss.Has(s) || r.cfg.Shards != nil && !r.cfg.Shards.Holds(p.id, s) {
				continue
			}
			if !p.fullAt.After(since) {
				synced = false
			}
			if !p.allEqualAt.Before(eqSince) {
				continue
			}
			for seg := s * storage.SegmentsPerShard; seg < (s+1)*storage.SegmentsPerShard; seg++ {
				if p.segEqualAt[seg].Before(eqSince) {
					equal = false
				}
			}
		}
	}
	return synced, equal
}
