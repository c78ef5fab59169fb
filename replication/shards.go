package replication

import (
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
}

// holds reports whether this replica holds shard s.
func (r *Replicator) holds(s int) bool {
	return r.cfg.Shards == nil || r.cfg.Shards.Holds(r.self, s)
}

// holdsName reports whether this replica holds the shard of a vector or
// record name.
func (r *Replicator) holdsName(name string) bool {
	return r.cfg.Shards == nil || r.cfg.Shards.Holds(r.self, shard.Of(name))
}

// shares reports whether this replica and peer both hold segment seg's
// shard: only then do they compare it.
func (r *Replicator) shares(peer string, seg int) bool {
	if r.cfg.Shards == nil {
		return true
	}
	s := storage.SegmentShard(seg)
	return r.cfg.Shards.Holds(r.self, s) && r.cfg.Shards.Holds(peer, s)
}
