package replication

// Pulling what differs from a peer: a differing segment by its differing
// parts, or whole from a peer that predates parts, merged through the
// writer after the authority checks (authority.go).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

// pullConcurrency is how many segments are pulled from one peer at once.
// Concurrent pulls overlap their request round trips, and their merges
// reach the region writer together, so several segments share one fsync.
const pullConcurrency = 8

// pullSegments pulls the given segments from a peer, a few at a time, and
// returns the first error (the remaining pulls still finish or stop). If
// whether the peer answers part digests is not known yet, the first
// segment is pulled alone, so it is asked once, not once per concurrent
// pull.
func (r *Replicator) pullSegments(ctx context.Context, id string, segs []int) error {
	if len(segs) > 1 && r.partsOf(id) == partsUnknown {
		if err := r.pullSegment(ctx, id, segs[0]); err != nil {
			return err
		}
		segs = segs[1:]
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	for range min(pullConcurrency, len(segs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range next {
				if err := r.pullSegment(ctx, id, b); err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
				}
			}
		}()
	}
feed:
	for _, b := range segs {
		select {
		case next <- b:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	return firstErr
}

// errNoParts is what pullParts returns when the peer does not answer a
// PartsRequest: it predates them, and the segment is pulled whole.
var errNoParts = errors.New("peer does not answer part digests")

// partsSupport is whether a peer answers PartsRequests.
type partsSupport int8

const (
	partsUnknown partsSupport = iota
	partsYes
	partsNo
)

// partsOf is whether peer id, as it runs now, answers PartsRequests.
func (r *Replicator) partsOf(id string) partsSupport {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.peers[id]
	if p == nil || p.partsInc != p.incarnation {
		return partsUnknown
	}
	return p.parts
}

// setPartsOf records whether peer id, as it runs now, answers
// PartsRequests.
func (r *Replicator) setPartsOf(id string, s partsSupport) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.peers[id]; p != nil {
		p.parts, p.partsInc = s, p.incarnation
	}
}

// diffsFor is the DiffRequest.For to send peer id: this replica, so the
// peer leaves out what this replica would refuse, unless the peer predates
// that (then every entry, and the refusals happen here) or this is a chaos
// build that takes relays.
func (r *Replicator) diffsFor(id string) string {
	if r.trustRelays() {
		return ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.peers[id]; p != nil && p.plainDiffs && p.plainDiffsInc == p.incarnation {
		return ""
	}
	return r.self
}

// setPlainDiffs records that peer id, as it runs now, does not answer a
// DiffRequest naming its asker.
func (r *Replicator) setPlainDiffs(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.peers[id]; p != nil {
		p.plainDiffs, p.plainDiffsInc = true, p.incarnation
	}
}

// pullSegment pulls what differs of one segment from a peer and merges it:
// the entries of the differing parts that we lack (pullParts), or, from a
// peer that predates that, every entry of the segment (pullWhole).
func (r *Replicator) pullSegment(ctx context.Context, id string, seg int) error {
	known := r.partsOf(id)
	if known != partsNo {
		err := r.pullParts(ctx, id, seg)
		if !errors.Is(err, errNoParts) {
			if err == nil && known == partsUnknown {
				r.setPartsOf(id, partsYes)
			}
			return err
		}
		r.setPartsOf(id, partsNo)
		r.log.Info("peer does not compare below a segment; pulling whole segments from it", "peer", id)
	}
	return r.pullWhole(ctx, id, seg)
}

// ownEntry is one of our entries of a segment being repaired.
type ownEntry struct {
	key  []byte
	sub  int
	hash uint64
	// theirs: the peer may send something of this entry (mayGive, if
	// our requests name us; else every entry).
	theirs bool
}

// mayGive reports whether peer id may send us, in a diff page naming us,
// something of the entry we store under key in shard s (givesTo): a
// vector entry or sketch page its writer, a record a part of it. What we
// cannot tell (flags, type metadata, a record that does not decode) it
// may.
func (r *Replicator) mayGive(id string, s int, key, val []byte) bool {
	if w, one := storage.EntryWriter(key); one {
		return r.givesTo(id, string(w), r.self, s)
	}
	rec, ok := storage.SegmentRecord(key, val)
	if !ok {
		return true
	}
	if hlc, origin := rec.Stamp(); (hlc != 0 || origin != "") && r.givesTo(id, origin, r.self, s) {
		return true
	}
	for _, e := range rec.Contributions() {
		if r.givesTo(id, e.Replica, r.self, s) {
			return true
		}
	}
	return false
}

// pullParts repairs one segment below the segment: it asks the peer for
// its part digests, compares them with ours, and pages through the
// entries of the differing parts, sending with each request the hashes of
// our entries there past the cursor, so the peer leaves out what we hold
// identically. Both sides hash their stored keys and values, so what
// differs is pulled and what is the same is not, from every peer. The
// requests name us (DiffRequest.For), so the peer sends only what we
// would take from it, and we send only the hashes of such entries. Where
// those hashes are fewer than the part digests would be, every part is
// asked for at once, without the part digests.
func (r *Replicator) pullParts(ctx context.Context, id string, seg int) error {
	var ours [storage.SubSegments]uint64
	var own []ownEntry
	sh := storage.SegmentShard(seg)
	named := r.diffsFor(id) != "" // else the peer sends every entry
	have := 0                     // our entries whose hashes we list
	if err := r.cfg.Store.SegmentEntries(seg, func(key, val []byte, sub int, h uint64) {
		ours[sub] ^= r.partHash(key, h)
		theirs := !named || r.mayGive(id, sh, key, val)
		if theirs {
			have++
		}
		own = append(own, ownEntry{key: slices.Clone(key), sub: sub, hash: h, theirs: theirs})
	}); err != nil {
		return fmt.Errorf("repair segment %d: %w", seg, err)
	}
	nonzero := 0
	for _, x := range ours {
		if x != 0 {
			nonzero++
		}
	}
	// Where the hashes of the whole segment would be no more than the
	// part digests' answer (8 bytes a nonzero part, 8 more for the
	// mask, about what ours has), the difference of every part is asked
	// for at once: one round trip instead of two, and fewer bytes. Only
	// of a peer known to answer diffs: of one not known, asking for part
	// digests finds out.
	parts := ^uint64(0)
	if r.partsOf(id) != partsYes || have > nonzero+1 || r.keysOnlyParts() {
		var err error
		if parts, err = r.differingParts(ctx, id, seg, &ours); err != nil || parts == 0 {
			return err // parts == 0: equal since the digests were compared
		}
	}
	// The hashes one request carries are bounded (a quarter of a
	// message); past that the peer sends some entries we hold too.
	maxHave := max(r.cfg.MaxMessageBytes/4/8, 1)
	var after []byte
	for {
		// Our entries are in key order: those past the cursor are a tail.
		from, _ := slices.BinarySearchFunc(own, after, func(e ownEntry, k []byte) int {
			if bytes.Compare(e.key, k) <= 0 {
				return -1
			}
			return 1
		})
		q := DiffRequest{Segment: seg, For: r.diffsFor(id), Parts: parts, After: after}
		for _, e := range own[from:] {
			if len(q.Have) == maxHave {
				break
			}
			// Asking for what the peer may give us only, we tell it
			// only of those entries.
			if parts&(1<<e.sub) != 0 && (e.theirs || q.For == "") {
				q.Have = append(q.Have, e.hash)
			}
		}
		data, err := r.request(ctx, pageSubject(id), AppendDiffRequest(nil, &q))
		if err != nil {
			return err
		}
		if len(data) == 0 && q.For != "" {
			// A peer that predates requests naming their asker
			// answers nothing: ask for every entry.
			if data, err = r.request(ctx, pageSubject(id), AppendDiffRequest(nil, &DiffRequest{Segment: seg, Parts: parts, Have: q.Have, After: after})); err != nil {
				return err
			}
			if len(data) != 0 {
				r.setPlainDiffs(id)
				r.log.Info("peer does not filter differences by writer; asking it for every entry", "peer", id)
			}
		}
		if len(data) == 0 {
			return fmt.Errorf("peer %s failed to serve the difference of segment %d", id, seg)
		}
		pg, err := DecodeDiffPage(data)
		if err != nil {
			return fmt.Errorf("difference of segment %d from %s: %w", seg, id, err)
		}
		if err := r.mergePage(ctx, id, seg, pg); err != nil {
			return err
		}
		if pg.Next == nil {
			return nil
		}
		after = pg.Next
	}
}

// differingParts asks peer id for the digests of segment seg's parts and
// returns those that differ from ours.
func (r *Replicator) differingParts(ctx context.Context, id string, seg int, ours *[storage.SubSegments]uint64) (uint64, error) {
	data, err := r.request(ctx, pageSubject(id), AppendPartsRequest(nil, &PartsRequest{Segment: seg}))
	if err != nil {
		return 0, err
	}
	if len(data) < 2 || data[1] != typeParts {
		return 0, errNoParts
	}
	theirs, err := DecodeParts(data)
	if err != nil {
		return 0, fmt.Errorf("parts of segment %d from %s: %w", seg, id, err)
	}
	if theirs.Segment != seg {
		return 0, fmt.Errorf("parts of segment %d from %s, asked %d", theirs.Segment, id, seg)
	}
	var parts uint64
	for i := range ours {
		if ours[i] != theirs.Sums[i] {
			parts |= 1 << i
		}
	}
	r.m.aeParts.Add(float64(bits.OnesCount64(parts)))
	return parts, nil
}

// pullWhole pages through one segment of a peer and merges it.
func (r *Replicator) pullWhole(ctx context.Context, id string, seg int) error {
	var after []byte
	for {
		data, err := r.request(ctx, pageSubject(id), AppendPageRequest(nil, &PageRequest{Segment: seg, After: after}))
		if err != nil {
			return err
		}
		if len(data) == 0 {
			return fmt.Errorf("peer %s failed to serve segment %d", id, seg)
		}
		pg, err := DecodePage(data)
		if err != nil {
			return err
		}
		if err := r.mergePage(ctx, id, seg, pg); err != nil {
			return err
		}
		if pg.Next == nil {
			return nil
		}
		after = pg.Next
	}
}

// mergePage merges a page of segment seg from peer id: only what the peer
// may say (authority.go).
func (r *Replicator) mergePage(ctx context.Context, id string, seg int, pg *Page) error {
	r.m.aeEntries.Add(float64(len(pg.Entries) + len(pg.Records) + len(pg.Sketches)))
	vecs := make([]region.VectorMerge, 0, len(pg.Entries))
	for _, e := range pg.Entries {
		if r.vetEntryOf(id, e.Replica, e.Item) && r.holdsName(e.Item) {
			vecs = append(vecs, region.VectorMerge{Kind: e.Kind, Item: e.Item, Vec: crdt.Vector{{Replica: e.Replica, PN: e.PN}}})
		}
	}
	recs := make([]region.RecordMerge, 0, len(pg.Records))
	for _, rc := range pg.Records {
		if !r.holdsName(rc.Item) {
			continue
		}
		if rec, ok := r.vetRecordOf(id, rc.Item, rc.Rec, aePage); ok {
			recs = append(recs, region.RecordMerge{Item: rc.Item, User: rc.User, Rec: rec})
		}
	}
	pages := make([]region.SketchMerge, 0, len(pg.Sketches))
	for _, p := range pg.Sketches {
		if r.vetEntryOf(id, p.Replica, p.Name) && r.holdsName(p.Name) {
			pages = append(pages, region.SketchMerge{Kind: p.Kind, Name: p.Name, Replica: p.Replica, Page: p.Page, Regs: *p.Regs})
		}
	}
	if err := r.cfg.Replica.Merge(ctx, vecs, recs); err != nil {
		return fmt.Errorf("merge segment %d from %s: %w", seg, id, err)
	}
	if err := r.cfg.Replica.MergeSketches(ctx, pages); err != nil {
		return fmt.Errorf("merge segment %d sketches from %s: %w", seg, id, err)
	}
	return nil
}
