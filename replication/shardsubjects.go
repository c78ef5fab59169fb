package replication

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/tally-dev/tally/shard"
)

// Sharded, a replica's deltas go out per shard: the changes of shard s on
// tally.delta.<region>.<replica>.<s>, and a heartbeat on the replica's own
// subject, tally.delta.<region>.<replica>. A replica subscribes to the
// subjects of the shards it holds (tally.delta.*.*.<s>), so the changes of
// a shard reach its holders only, in every region, and to the own subjects
// of its peers (heartbeats, and the deltas of an unsharded sender): of
// every peer (tally.delta.*.*), or, when its view knows regions, of those
// it shares a keyed shard or its region with, one subscription each
// (liveness.go). The subscriptions follow the shard map: every
// anti-entropy round compares them with the shards held.

// shardDeltaSubject is the subject of shard s's changes, under a replica's
// own subject.
func shardDeltaSubject(own string, s int) string { return own + "." + strconv.Itoa(s) }

// DeltaShardSubjects is every shard subject of replica's fast path, as a
// NATS wildcard (for the permissions of internal/natsperm).
func DeltaShardSubjects(region, replica string) string {
	return deltaSubject(region, replica) + ".*"
}

// deltaSubjectOf checks that subject is the sender's own subject (own) or
// one of its shard subjects, and returns which: baseSubject or the shard.
func deltaSubjectOf(subject, own string) (int, bool) {
	if subject == own {
		return baseSubject, true
	}
	if len(subject) <= len(own)+1 || subject[:len(own)] != own || subject[len(own)] != '.' {
		return 0, false
	}
	s, err := strconv.Atoi(subject[len(own)+1:])
	if err != nil || s < 0 || s >= shard.Count || strconv.Itoa(s) != subject[len(own)+1:] {
		return 0, false
	}
	return s, true
}

// deltaSubscription is the one delta subscription listen makes: every
// delta unsharded; sharded, every replica's own subject, or, following
// heartbeats by what is shared (liveness.go), this replica's own alone
// (a rival's deltas show there; followShards adds the followed peers'
// and the held shards').
func (r *Replicator) deltaSubscription() string {
	if r.cfg.Shards == nil {
		return subjectDeltaPrefix + ">"
	}
	if r.byShared() {
		return r.ownSubject
	}
	return subjectDeltaPrefix + "*.*"
}

// followShards subscribes to the delta subjects of the shards this replica
// holds and unsubscribes from those of the shards it no longer holds;
// following heartbeats by what is shared, it does the same with the own
// subjects of the peers it follows (liveness.go).
func (r *Replicator) followShards() error {
	if r.cfg.Shards == nil {
		return nil
	}
	r.subMu.Lock()
	defer r.subMu.Unlock()
	if r.subsClosed {
		return nil
	}
	if r.shardSubs == nil {
		r.shardSubs = make(map[int]func() error)
	}
	for s := range shard.Count {
		unsub, subscribed := r.shardSubs[s]
		switch held := r.cfg.Shards.Holds(r.self, s); {
		case held && !subscribed:
			u, err := r.cfg.Transport.Subscribe(subjectDeltaPrefix+"*.*."+strconv.Itoa(s), r.guard(r.receive))
			if err != nil {
				return fmt.Errorf("subscribe to the deltas of shard %d: %w", s, err)
			}
			r.shardSubs[s] = u
		case !held && subscribed:
			_ = unsub()
			delete(r.shardSubs, s)
		}
	}
	if r.byShared() {
		if err := r.followPeersLocked(); err != nil {
			return fmt.Errorf("follow the peers' heartbeats and the regions' liveness: %w", err)
		}
	}
	return nil
}

// closeShardSubs unsubscribes from every shard's deltas, for good.
func (r *Replicator) closeShardSubs() {
	r.subMu.Lock()
	defer r.subMu.Unlock()
	r.subsClosed = true
	for _, u := range r.shardSubs {
		_ = u()
	}
	for _, subs := range []map[string]func() error{r.peerSubs, r.liveSubs} {
		for _, u := range subs {
			_ = u()
		}
	}
	r.shardSubs, r.peerSubs, r.liveSubs = nil, nil, nil
}

// shardGroup is one shard's part of a flush.
type shardGroup struct {
	shard int
	vecs  []OwnEntry
	recs  []Record
	pages []OwnPage
	asks  []Ask
}

// groupByShard cuts a flush's changes by shard, in shard order.
func groupByShard(vecs []OwnEntry, recs []Record, pages []OwnPage, asks []Ask) []*shardGroup {
	by := make(map[int]*shardGroup)
	group := func(name string) *shardGroup {
		s := shard.Of(name)
		g := by[s]
		if g == nil {
			g = &shardGroup{shard: s}
			by[s] = g
		}
		return g
	}
	for _, v := range vecs {
		g := group(v.Item)
		g.vecs = append(g.vecs, v)
	}
	for _, rc := range recs {
		g := group(rc.Item)
		g.recs = append(g.recs, rc)
	}
	for _, p := range pages {
		g := group(p.Name)
		g.pages = append(g.pages, p)
	}
	for _, a := range asks {
		g := group(a.Key)
		g.asks = append(g.asks, a)
	}
	out := make([]*shardGroup, 0, len(by))
	for _, g := range by {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b *shardGroup) int { return a.shard - b.shard })
	return out
}
