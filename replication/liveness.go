package replication

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tally-dev/tally/shard"
)

// Heartbeats by what is shared. Sharded, with a view that knows each
// replica's region (RegionView), a replica follows (subscribes to the own
// subject of) only the peers it shares a keyed shard with and the peers
// of its own region: their heartbeats carry the root digest anti-entropy
// compares first, and a region routes by its own replicas' liveness. Of
// every other replica it learns liveness from one summary per region:
// the region's lowest-id live replica (in its own view) publishes, every
// liveInterval, that it hears every replica of its region but those it
// names, and how long ago at most, on tally.delta.<region>.<replica>.live,
// a subject under its own that only it may publish on. So a replica's idle traffic grows with the
// shards it holds and the size of its region, not with the deployment.

// RegionView, implemented by a ShardView that knows every replica's
// region (the shard maps list them), lets a sharded replicator follow
// only the peers it shares something with. A ShardView without it keeps
// every heartbeat reaching every replica.
type RegionView interface {
	// RegionOf is replica's region, if the view knows it.
	RegionOf(replica string) (string, bool)
}

// liveSuffix ends the subject of a region's liveness summary, under its
// sender's own subject.
const liveSuffix = ".live"

// LiveSubject is the subject replica publishes its region's liveness
// summary on (covered by DeltaShardSubjects' wildcard).
func LiveSubject(region, replica string) string { return deltaSubject(region, replica) + liveSuffix }

// Liveness is a region's liveness summary, of a size that does not grow
// with the region while its replicas are up: every member of Region (the
// replicas the shard maps list in it, as its sender sees them, Members
// their hash) but those in Down was heard by the sender at most AgoMs
// ago. A receiver whose maps list other members takes nothing from it.
type Liveness struct {
	Replica, Region string
	Incarnation     uint64
	Members         uint64
	AgoMs           uint64
	Down            []string
}

const typeLiveness = 7

// AppendLiveness encodes a liveness summary.
func AppendLiveness(b []byte, l *Liveness) []byte {
	b = append(b, wireV1, typeLiveness)
	b = appendStr(b, l.Replica)
	b = appendStr(b, l.Region)
	b = binary.LittleEndian.AppendUint64(b, l.Incarnation)
	b = binary.LittleEndian.AppendUint64(b, l.Members)
	b = binary.AppendUvarint(b, l.AgoMs)
	b = binary.AppendUvarint(b, uint64(len(l.Down)))
	for _, id := range l.Down {
		b = appendStr(b, id)
	}
	return b
}

// DecodeLiveness decodes an AppendLiveness encoding.
func DecodeLiveness(p []byte) (*Liveness, error) {
	r := reader{b: p}
	r.header(typeLiveness)
	l := &Liveness{Replica: r.id(), Region: r.id(), Incarnation: r.u64(), Members: r.u64(), AgoMs: r.uvarint()}
	n := r.count()
	for i := 0; i < n && r.err == nil; i++ {
		l.Down = append(l.Down, r.id())
	}
	return l, r.finish("liveness")
}

// membersHash is the hash of a region's members, ids sorted.
func membersHash(ids []string) uint64 {
	h := fnv.New64a()
	for _, id := range ids {
		_, _ = h.Write([]byte(id))
		_, _ = h.Write([]byte{0})
	}
	return h.Sum64()
}

// regions is the shard view's RegionView, if it is one.
func (r *Replicator) regions() (RegionView, bool) {
	if r.cfg.Shards == nil {
		return nil, false
	}
	rv, ok := r.cfg.Shards.(RegionView)
	return rv, ok
}

// byShared reports whether this replica follows heartbeats by what it
// shares (sharded, with a RegionView).
func (r *Replicator) byShared() bool {
	_, ok := r.regions()
	return ok
}

// regionOfLocked is peer p's region: the view's, else the one its own
// deltas named. With mu held.
func (r *Replicator) regionOfLocked(p *peer) (string, bool) {
	if rv, ok := r.regions(); ok {
		if rg, ok := rv.RegionOf(p.id); ok {
			return rg, true
		}
	}
	return p.region, p.region != ""
}

// follows reports whether this replica hears peer's own subject: it
// shares a keyed shard with it (every replica holds shard.Global, whose
// changes go on its shard subject), or the two are of one region, or the
// peer's region is not known.
func (r *Replicator) follows(peer, region string, known bool, held []int) bool {
	if !known || region == r.region {
		return true
	}
	for _, s := range held {
		if r.cfg.Shards.Holds(peer, s) {
			return true
		}
	}
	return false
}

// heldKeyed are the keyed shards this replica holds.
func (r *Replicator) heldKeyed() []int {
	var out []int
	for s := range shard.Count {
		if s != shard.Global && r.cfg.Shards.Holds(r.self, s) {
			out = append(out, s)
		}
	}
	return out
}

// followPeersLocked subscribes to the own subject of each peer this replica
// follows and unsubscribes from those it follows no longer. With subMu
// held.
func (r *Replicator) followPeersLocked() error {
	if r.peerSubs == nil {
		r.peerSubs = make(map[string]func() error)
		r.liveSubs = make(map[string]func() error)
	}
	held := r.heldKeyed()
	follow := map[string]bool{}
	summaries := map[string]bool{} // regions of which some peer is not followed
	r.mu.Lock()
	for _, p := range r.peers {
		rg, known := r.regionOfLocked(p)
		follow[p.id] = r.follows(p.id, rg, known, held)
		if !follow[p.id] {
			summaries[rg] = true
		}
	}
	r.mu.Unlock()
	if err := r.followLocked(r.peerSubs, follow, func(id string) string { return subjectDeltaPrefix + "*." + token(id) }, r.receive); err != nil {
		return err
	}
	return r.followLocked(r.liveSubs, summaries, func(rg string) string { return subjectDeltaPrefix + token(rg) + ".*" + liveSuffix }, r.receiveLiveness)
}

// followLocked makes subs hold a subscription for each key of want that
// is true (subject(key), handled by h), and none for the others. With
// subMu held.
func (r *Replicator) followLocked(subs map[string]func() error, want map[string]bool, subject func(string) string, h func(string, []byte)) error {
	for key, unsub := range subs {
		if !want[key] {
			_ = unsub()
			delete(subs, key)
		}
	}
	for key, w := range want {
		if _, subscribed := subs[key]; w && !subscribed {
			u, err := r.cfg.Transport.Subscribe(subject(key), r.guard(h))
			if err != nil {
				return fmt.Errorf("subscribe to %s: %w", subject(key), err)
			}
			subs[key] = u
		}
	}
	return nil
}

// Following is the peers whose own subject this replica hears (every
// peer, unless it follows heartbeats by what it shares), sorted.
func (r *Replicator) Following() []string {
	if !r.byShared() {
		return r.peerIDs()
	}
	r.subMu.Lock()
	defer r.subMu.Unlock()
	return slices.Sorted(maps.Keys(r.peerSubs))
}

// LivenessInterval is how often a region's summary goes out, for
// heartbeats every heartbeat and peers stale after peerTimeout: often
// enough that a live replica it vouches for never looks peerTimeout old
// between two (a third of peerTimeout), never more often than heartbeats.
func LivenessInterval(heartbeat, peerTimeout time.Duration) time.Duration {
	return max(heartbeat, peerTimeout/3)
}

func (r *Replicator) liveInterval() time.Duration {
	return LivenessInterval(r.cfg.HeartbeatInterval, r.cfg.PeerTimeout)
}

// summarizeLiveness is the summary this replica publishes now, if it is
// its region's lowest-id live replica in its own view; else nil.
func (r *Replicator) summarizeLiveness(now time.Time) *Liveness {
	rv, ok := r.regions()
	if !ok {
		return nil
	}
	l := &Liveness{Replica: r.self, Region: r.region, Incarnation: r.incarnation}
	members := []string{r.self}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.peers {
		if rg, ok := rv.RegionOf(p.id); !ok || rg != r.region {
			continue
		}
		members = append(members, p.id)
		if r.staleDirectLocked(p, now) {
			l.Down = append(l.Down, p.id)
			continue
		}
		if p.id < r.self {
			return nil // a lower live replica of this region speaks for it
		}
		l.AgoMs = max(l.AgoMs, uint64(max(now.Sub(p.lastHeard).Milliseconds(), 0)))
	}
	slices.Sort(members)
	slices.Sort(l.Down)
	l.Members = membersHash(members)
	return l
}

// publishLiveness sends the region's summary if this replica speaks for
// its region and liveInterval has passed since it last did.
func (r *Replicator) publishLiveness(f *flusher, now time.Time) {
	if !r.byShared() || now.Sub(f.lastLive) < r.liveInterval() {
		return
	}
	l := r.summarizeLiveness(now)
	if l == nil {
		return
	}
	f.lastLive = now
	data := AppendLiveness(nil, l)
	if err := r.cfg.Transport.Publish(f.subject+liveSuffix, data); err != nil {
		r.m.publishErrors.Inc()
		r.log.Debug("publish liveness failed", "error", err)
		return
	}
	r.m.published.Inc()
	r.m.publishedBytes.Add(float64(len(data)))
}

// receiveLiveness takes another region's summary: each replica it lists,
// of that region, was heard by the sender AgoMs ago. Only the sender may
// publish on its subject, and only for the replicas of its own region
// does its word count.
func (r *Replicator) receiveLiveness(subject string, data []byte) {
	l, err := DecodeLiveness(data)
	if err != nil {
		r.m.badMessages.Inc()
		r.log.Warn("dropping bad liveness summary", "error", err)
		return
	}
	if subject != LiveSubject(l.Region, l.Replica) {
		r.m.badMessages.Inc()
		r.log.Warn("dropping liveness summary published on another replica's subject", "subject", subject, "claims", l.Replica)
		return
	}
	if l.Replica == r.self || l.Region == r.region {
		return // its own region a replica follows itself
	}
	r.mu.Lock()
	_, known := r.peers[l.Replica]
	r.mu.Unlock()
	if !known {
		r.refuse(refusedUnknownSender, "liveness summary from a replica that is not a configured peer", "replica", l.Replica, "subject", subject)
		return
	}
	rv, ok := r.regions()
	if !ok {
		return
	}
	if rg, ok := rv.RegionOf(l.Replica); !ok || rg != l.Region {
		r.m.badMessages.Inc()
		r.log.Warn("dropping liveness summary of a region its sender is not in", "replica", l.Replica, "region", l.Region)
		return
	}
	now := r.cfg.Now()
	heard := now.Add(-time.Duration(min(l.AgoMs, uint64(r.cfg.PeerTimeout.Milliseconds())+1)) * time.Millisecond)
	r.mu.Lock()
	defer r.mu.Unlock()
	var members []*peer
	for _, p := range r.peers {
		if rg, ok := rv.RegionOf(p.id); ok && rg == l.Region {
			members = append(members, p)
		}
	}
	slices.SortFunc(members, func(a, b *peer) int { return strings.Compare(a.id, b.id) })
	ids := make([]string, len(members))
	for i, p := range members {
		ids[i] = p.id
	}
	if membersHash(ids) != l.Members {
		r.m.badMessages.Inc() // the maps differ (a replica joining): nothing to learn until they agree
		return
	}
	for _, p := range members {
		if !slices.Contains(l.Down, p.id) && heard.After(p.liveAt) {
			p.liveAt = heard
		}
	}
}

// heardLocked is when peer p was last heard of: from itself, or from its
// region's summary. With mu held.
func heardLocked(p *peer) time.Time {
	if p.liveAt.After(p.lastHeard) {
		return p.liveAt
	}
	return p.lastHeard
}

// staleDirectLocked reports whether p itself is unheard-from past
// PeerTimeout, whatever its region says. With mu held.
func (r *Replicator) staleDirectLocked(p *peer, now time.Time) bool {
	return p.lastHeard.IsZero() || now.Sub(p.lastHeard) > r.cfg.PeerTimeout
}
