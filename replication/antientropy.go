package replication

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/shard"
	"github.com/tally-dev/tally/storage"
)

// serveDigests answers a peer's digest request: every digest to an empty
// one, those of the shards asked for to a DigestsRequest (none if the
// summaries are equal). An empty reply means failure.
func (r *Replicator) serveDigests(data []byte) []byte {
	if len(data) == 0 {
		return AppendDigests(nil, r.self, r.cfg.Store.Digests())
	}
	q, err := DecodeDigestsRequest(data)
	if err != nil {
		r.m.badMessages.Inc()
		return nil
	}
	ours := r.cfg.Store.Digests()
	if storage.RootOfShards(ours, &q.Shards) == q.Summary {
		return AppendShardDigests(nil, &ShardDigests{Replica: r.self, Equal: true})
	}
	return AppendShardDigests(nil, &ShardDigests{Replica: r.self, Digests: shardDigests(ours, &q.Shards, nil)})
}

// shardDigests appends the digests d of the segments of shards ss, in
// segment order.
func shardDigests(d []uint64, ss *shard.Set, out []uint64) []uint64 {
	for s := range shard.Count {
		if ss.Has(s) {
			out = append(out, d[s*storage.SegmentsPerShard:(s+1)*storage.SegmentsPerShard]...)
		}
	}
	return out
}

// servePage answers a peer's request on the page subject: a page of a
// whole segment (PageRequest), a segment's part digests (PartsRequest) or
// the entries of some parts the peer lacks (DiffRequest, with or without
// For). An empty reply means failure.
func (r *Replicator) servePage(data []byte) []byte {
	if len(data) >= 2 {
		switch data[1] {
		case typePartsReq:
			return r.serveParts(data)
		case typeDiffReq, typeOwnDiffReq:
			return r.serveDiff(data)
		}
	}
	q, err := DecodePageRequest(data)
	if err != nil {
		r.m.badMessages.Inc()
		return nil
	}
	var pg Page
	pg.Next, err = r.cfg.Store.ScanSegment(q.Segment, q.After, r.cfg.MaxMessageBytes/2, r.pageVisitor(&pg))
	if err != nil {
		r.log.Error("serve page", "segment", q.Segment, "error", err)
		return nil
	}
	return AppendPage(nil, &pg)
}

// pageVisitor adds the entries a scan visits to pg, but those gone by
// rule.
func (r *Replicator) pageVisitor(pg *Page) storage.SegmentVisitor {
	return storage.SegmentVisitor{
		Vector: func(k storage.Kind, item, replica string, e crdt.PN) {
			if k.IsWindows() && r.cfg.Replica.Windows().SlotExpired(item) {
				return // gone by rule; the sweeper deletes it soon
			}
			pg.Entries = append(pg.Entries, Entry{Kind: k, Item: item, Replica: replica, PN: e})
		},
		Record: func(item, user string, rec crdt.Record) {
			if r.cfg.Replica.KeyExpired(rec) {
				return // gone by rule; the sweeper deletes it soon
			}
			pg.Records = append(pg.Records, Record{Item: item, User: user, Rec: rec})
		},
		Sketch: func(k storage.Kind, name, replica string, page int, p *crdt.HLLPage) {
			if k == storage.UniquesWindows && r.cfg.Replica.Windows().SlotExpired(name) {
				return // gone by rule; the sweeper deletes it soon
			}
			regs := *p
			pg.Sketches = append(pg.Sketches, SketchPage{Kind: k, Name: name, Replica: replica, Page: page, Regs: &regs})
		},
		// A block flag travels as its register-only record (region.BlockRecordItem).
		Flag: func(user string, f crdt.Flag) {
			pg.Records = append(pg.Records, Record{Item: region.BlockRecordItem, User: user, Rec: crdt.FlagRecord(f)})
		},
		// An event type's metadata travels as a record too (region.TypeRecordItem).
		Type: func(name string, m crdt.TypeMeta) {
			pg.Records = append(pg.Records, Record{Item: region.TypeRecordItem, User: name, Rec: &m})
		},
	}
}

// givingTo wraps a page visitor so that it sees only what asker takes
// from this replica in shard s (givesTo): one writer's entries of those
// writers, records cut to their parts. Flags and type metadata pass as
// they are.
func (r *Replicator) givingTo(asker string, s int, v storage.SegmentVisitor) storage.SegmentVisitor {
	gives := func(owner string) bool { return r.givesTo(r.self, owner, asker, s) }
	vector, record, sketch := v.Vector, v.Record, v.Sketch
	v.Vector = func(k storage.Kind, item, replica string, e crdt.PN) {
		if gives(replica) {
			vector(k, item, replica, e)
		}
	}
	v.Sketch = func(k storage.Kind, name, replica string, page int, p *crdt.HLLPage) {
		if gives(replica) {
			sketch(k, name, replica, page, p)
		}
	}
	v.Record = func(item, user string, rec crdt.Record) {
		out, cut, ok := restrictRecord(rec, gives)
		switch {
		case !ok || !cut:
			record(item, user, rec)
		case !out.Empty():
			record(item, user, out)
		}
	}
	return v
}

// serveParts answers a PartsRequest with the digests of the segment's
// parts, from a scan of its keys and values.
func (r *Replicator) serveParts(data []byte) []byte {
	q, err := DecodePartsRequest(data)
	if err != nil {
		r.m.badMessages.Inc()
		return nil
	}
	ps := Parts{Segment: q.Segment}
	if err := r.cfg.Store.SegmentHashes(q.Segment, func(key []byte, sub int, h uint64) { ps.Sums[sub] ^= r.partHash(key, h) }); err != nil {
		r.log.Error("serve parts", "segment", q.Segment, "error", err)
		return nil
	}
	return AppendParts(nil, &ps)
}

// serveDiff answers a DiffRequest: a page of the entries of the parts
// asked for whose hash the peer did not list, compressed if that pays.
func (r *Replicator) serveDiff(data []byte) []byte {
	q, err := DecodeDiffRequest(data)
	if err != nil {
		r.m.badMessages.Inc()
		return nil
	}
	have := q.Have
	slices.Sort(have)
	var pg Page
	v := r.pageVisitor(&pg)
	if q.For != "" {
		v = r.givingTo(q.For, storage.SegmentShard(q.Segment), v)
	}
	v.Keep = func(sub int, h uint64) bool {
		if q.Parts&(1<<sub) == 0 {
			return false
		}
		_, held := slices.BinarySearch(have, h)
		return !held
	}
	pg.Next, err = r.cfg.Store.ScanSegment(q.Segment, q.After, r.cfg.MaxMessageBytes/2, v)
	if err != nil {
		r.log.Error("serve diff", "segment", q.Segment, "error", err)
		return nil
	}
	return AppendDiffPage(nil, &pg)
}

// runAntiEntropy compares digests with every peer each interval and pulls
// what differs; until recovery is done it also decides when to accept writes.
// Between ticks it runs the exchanges that are due sooner (soonDelay): a
// peer whose exchange failed fast is tried again, a peer heard from again
// after a cut or silence is compared at once, and after a peer came back
// with differences every peer is compared once more, so a heal is repaired
// and seen to be repaired without waiting for the next tick.
func (r *Replicator) runAntiEntropy(ctx context.Context) {
	defer r.wg.Done()
	tick := time.NewTicker(r.cfg.AntiEntropyInterval)
	defer tick.Stop()
	// During recovery, look again sooner than a full interval.
	fast := time.NewTicker(r.soonDelay())
	defer fast.Stop()
	due := time.NewTimer(time.Hour)
	defer due.Stop()
	full := true
	for {
		var more bool
		if full {
			more = r.round(ctx)
		} else {
			r.dueRound(ctx)
		}
		if !r.recovered.Load() {
			r.checkRecovered()
		}
		if more && ctx.Err() == nil {
			continue // the bound was hit: the rest of the difference now
		}
		wait := tick.C
		if !r.recovered.Load() {
			wait = fast.C
		}
		due.Stop()
		var dueC <-chan time.Time
		if at, ok := r.nextDue(); ok {
			due.Reset(max(at.Sub(r.cfg.Now()), 0))
			dueC = due.C
		}
		select {
		case <-ctx.Done():
			return
		case <-wait:
			full = true
		case <-dueC:
			full = false
		case <-r.kick:
			full = false
		}
	}
}

// soonDelay is how long after a fast failure a peer is tried again, and
// how long after a peer came back every peer is compared once more: a
// fifth of the anti-entropy interval, at least 50ms.
func (r *Replicator) soonDelay() time.Duration {
	return max(r.cfg.AntiEntropyInterval/5, 50*time.Millisecond)
}

// probeTimeout bounds the digest request to a peer whose last exchange
// failed: half the anti-entropy interval, at most RequestTimeout.
func (r *Replicator) probeTimeout() time.Duration {
	return min(r.cfg.AntiEntropyInterval/2, r.cfg.RequestTimeout)
}

// round syncs from each known peer once. It reports whether some peer had
// more differing segments than one round may pull, so the caller can go
// again at once.
func (r *Replicator) round(ctx context.Context) (more bool) {
	r.followPeerClocks()
	if err := r.followShards(); err != nil {
		r.log.Warn("following the shard map's delta subjects", "error", err)
	}
	r.mu.Lock()
	r.confirmAt = time.Time{} // this round compares every peer
	peers := make([]*peer, 0, len(r.peers))
	for _, p := range r.peers {
		peers = append(peers, p)
	}
	r.mu.Unlock()
	// In id order, so that a round goes the same way every time.
	slices.SortFunc(peers, func(a, b *peer) int { return strings.Compare(a.id, b.id) })
	for _, p := range peers {
		if ctx.Err() != nil {
			return false
		}
		more = r.exchange(ctx, p) || more
	}
	r.m.aeRounds.Inc()
	return more
}

// dueRound runs, at the clock's now, the exchanges due before the next
// tick: a whole round if every peer is to be compared again after one came
// back, else one exchange with each peer whose retry is due. It returns
// the ids of the peers it compared with.
func (r *Replicator) dueRound(ctx context.Context) []string {
	now := r.cfg.Now()
	r.mu.Lock()
	if !r.confirmAt.IsZero() && !r.confirmAt.After(now) {
		ids := make([]string, 0, len(r.peers))
		for id := range r.peers {
			ids = append(ids, id)
		}
		r.mu.Unlock()
		slices.Sort(ids)
		r.round(ctx)
		return ids
	}
	var peers []*peer
	for _, p := range r.peers {
		if !p.retryAt.IsZero() && !p.retryAt.After(now) {
			peers = append(peers, p)
		}
	}
	r.mu.Unlock()
	slices.SortFunc(peers, func(a, b *peer) int { return strings.Compare(a.id, b.id) })
	ids := make([]string, 0, len(peers))
	for _, p := range peers {
		if ctx.Err() != nil {
			break
		}
		r.exchange(ctx, p)
		ids = append(ids, p.id)
	}
	return ids
}

// nextDue is when the earliest exchange due before a tick is (dueRound).
func (r *Replicator) nextDue() (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at := r.confirmAt
	for _, p := range r.peers {
		if !p.retryAt.IsZero() && (at.IsZero() || p.retryAt.Before(at)) {
			at = p.retryAt
		}
	}
	return at, !at.IsZero()
}

// exchange compares digests with peer p and pulls what differs
// (syncFrom), records the outcome and schedules what is due sooner than
// the next tick: a retry if the exchange failed fast (a cut peer answers
// "no responders" at once, so retrying costs little and finds the heal
// soon), and, if p came back from a failure with differences, one more
// comparison with every peer, at most once per interval. It reports
// whether segments were left for a later round.
func (r *Replicator) exchange(ctx context.Context, p *peer) (left bool) {
	start := r.cfg.Now()
	r.mu.Lock()
	p.attemptAt = start
	p.retryAt = time.Time{}
	r.mu.Unlock()
	differing, left, err := r.syncFrom(ctx, p)
	now := r.cfg.Now()
	soon := r.soonDelay()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		p.lastErr = err.Error()
		p.inSyncSince = time.Time{}
		r.m.aeErrors.Inc()
		if now.Sub(start) < soon {
			p.retryAt = now.Add(soon)
		}
		return left
	}
	back := p.lastErr != ""
	p.lastErr = ""
	p.synced = p.synced || !left
	if differing == 0 && p.inSyncSince.IsZero() {
		p.inSyncSince = now
	}
	if differing != 0 {
		p.inSyncSince = time.Time{}
	}
	p.differing = differing
	p.comparedAt = now
	switch {
	case !left:
		p.fullAt = start
	case p.stablePulled && p.prevStart.After(p.fullAt):
		// Every difference of the last comparison that the peer
		// has not written to since is pulled: what differed then
		// is here, but for segments still being written, whose
		// changes the fast path brings.
		p.fullAt = p.prevStart
	}
	p.prevStart = start
	if p.allEqual {
		p.allEqualAt = start
	}
	for _, b := range p.equal {
		p.segEqualAt[b] = start
	}
	if back && differing != 0 && r.confirmAt.IsZero() &&
		(r.confirmedAt.IsZero() || now.Sub(r.confirmedAt) >= r.cfg.AntiEntropyInterval) {
		// What the peer missed and we missed is pulled on both sides by
		// now or soon: compare with everyone again then, so convergence
		// shows without waiting for the next tick.
		r.confirmAt = now.Add(soon)
		r.confirmedAt = r.confirmAt
	}
	return left
}

// followPeerClocks moves the replica's clock toward the median of its own
// and its fresh peers' clocks when that is more than a couple of seconds
// away (region.Replica.AdjustClock): one replica whose clock is wrong
// follows the others, and the others stay. With a single fresh peer
// nobody can tell which of two clocks is wrong, and nothing moves. Lying
// peers, however many, move it a bounded distance (region/clock.go).
func (r *Replicator) followPeerClocks() {
	now := r.cfg.Now()
	offsets := []int64{0}
	r.mu.Lock()
	for _, p := range r.peers {
		if !r.staleDirectLocked(p, now) { // lag is measured on its own messages
			offsets = append(offsets, -p.lagMs) // their clock minus ours, less transit
		}
	}
	r.mu.Unlock()
	if len(offsets) < 3 {
		return
	}
	slices.Sort(offsets)
	n := len(offsets)
	med := offsets[n/2]
	if lo := offsets[(n-1)/2]; abs(lo) < abs(med) {
		med = lo // of two middle values, the one closer to ours
	}
	if moved := r.cfg.Replica.AdjustClock(med); moved != 0 {
		r.mu.Lock()
		for _, p := range r.peers {
			p.lagMs += moved // until their next message measures it again
		}
		r.mu.Unlock()
	}
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// syncFrom compares digests with one peer and pulls differing segments. It
// returns how many segments differed, and whether some were left for a later
// round because of MaxSegmentsPerRound.
//
// Segments whose difference persisted since the last comparison with the
// peer's digest unchanged come first: the peer's side of such a segment is
// quiet, so the difference is something the fast path lost, not something
// still in flight. Until recovery is done every differing segment is pulled.
func (r *Replicator) syncFrom(ctx context.Context, p *peer) (differing int, left bool, err error) {
	// The peer's heartbeats carry its root digest. If the latest one,
	// recent enough, equals ours, the states were equal then: skip the
	// 32 KiB digest exchange.
	r.mu.Lock()
	root, heard, failing := p.root, p.lastHeard, p.lastErr != ""
	r.mu.Unlock()
	// After a failure, the digests are asked for with a shorter deadline:
	// a request sent while a healing link is up one way only loses its
	// answer, and must not hold every peer's exchanges for RequestTimeout.
	dctx := ctx
	if failing {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(ctx, r.probeTimeout())
		defer cancel()
	}
	if r.recovered.Load() && !heard.IsZero() && r.cfg.Now().Sub(heard) < r.cfg.AntiEntropyInterval && root == r.cfg.Store.Root() {
		p.prevDiff, p.allEqual, p.stablePulled = nil, true, true
		r.m.aeRootMatches.Inc()
		return 0, false, nil
	}
	var ours, theirs []uint64
	shared := shard.All()
	if r.cfg.Shards == nil {
		if theirs, err = r.allDigests(dctx, p.id); err != nil {
			return 0, false, err
		}
		ours = r.cfg.Store.Digests()
	} else {
		shared = r.sharedShards(p.id)
		if shared.Len() == 0 && r.recovered.Load() && !heard.IsZero() && r.cfg.Now().Sub(heard) <= r.cfg.PeerTimeout {
			// Nothing to compare with a live peer: as a comparison that
			// found every shared segment equal, without a message.
			p.prevDiff, p.allEqual, p.equal, p.stablePulled = nil, false, p.equal[:0], true
			return 0, false, nil
		}
		ours = r.cfg.Store.Digests()
		if theirs, err = r.sharedDigests(dctx, p.id, &shared, ours); err != nil {
			return 0, false, err
		}
	}
	var stable, moving []int
	diff := make(map[int]uint64)
	p.allEqual, p.equal = false, p.equal[:0]
	for b := range theirs {
		if !shared.Has(storage.SegmentShard(b)) {
			continue
		}
		if theirs[b] == ours[b] {
			p.equal = append(p.equal, b)
			continue
		}
		diff[b] = theirs[b]
		if d, ok := p.prevDiff[b]; ok && d == theirs[b] {
			stable = append(stable, b)
		} else {
			moving = append(moving, b)
		}
	}
	p.prevDiff = diff
	differing = len(diff)
	pull := append(stable, moving...)
	p.stablePulled = true
	if limit := r.cfg.MaxSegmentsPerRound; r.recovered.Load() && len(pull) > limit {
		pull, left = pull[:limit], true
		p.stablePulled = len(stable) <= limit
	}
	if err := r.pullSegments(ctx, p.id, pull); err != nil {
		return differing, left, err
	}
	r.m.aeSegments.Add(float64(len(pull)))
	return differing, left, nil
}

// allDigests asks peer id for every segment digest (unsharded).
func (r *Replicator) allDigests(ctx context.Context, id string) ([]uint64, error) {
	data, err := r.request(ctx, digestsSubject(id), nil)
	if err != nil {
		return nil, err
	}
	from, theirs, err := DecodeDigests(data)
	if err != nil {
		return nil, err
	}
	if from != id {
		return nil, fmt.Errorf("digests from %q, asked %q", from, id)
	}
	return theirs, nil
}

// sharedDigests asks peer id for the digests of the segments of shards
// shared only, and returns every segment's digest as the peer has it as
// far as the caller compares them: the peer's for those segments, ours
// for the others (and for every one if the summaries are equal). A peer
// that predates DigestsRequest answers with all its digests.
func (r *Replicator) sharedDigests(ctx context.Context, id string, shared *shard.Set, ours []uint64) ([]uint64, error) {
	q := DigestsRequest{Shards: *shared, Summary: storage.RootOfShards(ours, shared)}
	data, err := r.request(ctx, digestsSubject(id), AppendDigestsRequest(nil, &q))
	if err != nil {
		return nil, err
	}
	if len(data) >= 2 && data[1] == typeDigests {
		from, theirs, err := DecodeDigests(data)
		if err == nil && from != id {
			err = fmt.Errorf("digests from %q, asked %q", from, id)
		}
		return theirs, err
	}
	a, err := DecodeShardDigests(data)
	if err != nil {
		return nil, err
	}
	if a.Replica != id {
		return nil, fmt.Errorf("digests from %q, asked %q", a.Replica, id)
	}
	theirs := slices.Clone(ours)
	if a.Equal {
		return theirs, nil
	}
	if want := shared.Len() * storage.SegmentsPerShard; len(a.Digests) != want {
		return nil, fmt.Errorf("%d digests from %q, asked %d", len(a.Digests), id, want)
	}
	k := 0
	for s := range shard.Count {
		if shared.Has(s) {
			k += copy(theirs[s*storage.SegmentsPerShard:(s+1)*storage.SegmentsPerShard], a.Digests[k:])
		}
	}
	return theirs, nil
}

func (r *Replicator) request(ctx context.Context, subject string, data []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	return r.cfg.Transport.Request(ctx, subject, data)
}

// errNotRecovered is logged while a replica waits for its peers.
var errNotRecovered = errors.New("replication: waiting for peers before accepting writes")

// checkRecovered accepts writes once every required peer has been synced
// from: Peers (all of them are also heard from, or not). A store that had
// data gives up waiting after RecoveryTimeout.
func (r *Replicator) checkRecovered() {
	now := r.cfg.Now()
	elapsed := now.Sub(r.started)
	// Give heartbeats a chance to reveal live peers before deciding.
	if elapsed < 2*r.cfg.HeartbeatInterval {
		return
	}
	required := map[string]bool{}
	for _, id := range r.cfg.Peers {
		required[id] = true
	}
	var missing []string
	r.mu.Lock()
	for id, p := range r.peers {
		if !r.staleLocked(p, now) {
			required[id] = true
		}
		if required[id] && !p.synced {
			missing = append(missing, id)
		}
	}
	r.mu.Unlock()
	delete(required, r.self)
	fresh := r.cfg.Replica.Fresh()
	switch {
	case len(missing) == 0:
		r.log.Info("recovery done; accepting writes", "synced_from", len(required), "fresh", fresh)
	case !fresh && elapsed >= r.cfg.RecoveryTimeout:
		r.log.Warn("recovery timed out; accepting writes with the local state", "missing", missing)
	default:
		if now.Sub(r.lastWaitLog) >= 5*time.Second {
			r.lastWaitLog = now
			r.log.Info(errNotRecovered.Error(), "missing", missing, "fresh", fresh)
		}
		return
	}
	r.recovered.Store(true)
	r.cfg.Replica.AcceptWrites()
}
