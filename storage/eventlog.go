package storage

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tally-dev/tally/crdt"
)

// The event log: every event this replica accepted, in the order it
// committed them, written in the same batch as the state it changed, so an
// acknowledged write is never missing from the log and a logged event is
// never missing from the state. Events are numbered from 1 in this store
// (seq) and stored in chunks of up to LogChunk events of one commit, keyed
// g/<16 hex seq of the chunk's first event>: one key per chunk, and a
// chunk is the unit the publisher (replication.Publisher) ships as one
// message, so its message id (the first seq) always names the same events.
// The publisher records how far the stream has acknowledged the log under
// m/log-published.

const (
	prefixLog = 'g'
	// metaLogID names this store's log: message ids on the stream are
	// <replica>.<log id>.<seq>, so a store started over (a wiped replica
	// numbers from 1 again) never collides with the old one's ids.
	metaLogID = "log-id"
	// metaLogPublished is the highest seq the stream has acknowledged.
	metaLogPublished = "log-published"
)

// EventType says what an event did.
type EventType byte

// Event types.
const (
	EventLike      EventType = 'l' // a like (P or N: how the own entry moved; none for a repeat)
	EventUnlike    EventType = 'u'
	EventIncr      EventType = 'i' // increments: Count of them (unkeyed ones of one counter fold into one event per commit)
	EventReconcile EventType = 'r' // the winner's correction of a record: Key, User (or Idem), P or N
	EventRecovered EventType = 'v' // own entry raised from a peer during recovery (lost or old state)
	// Budgets (Kind Budgets; see Event.Moves for the vectors they move).
	EventGrant    EventType = 'g' // a grant: P
	EventSpend    EventType = 's' // a spend, or a cashback's (Idem: its key): N
	EventTransfer EventType = 't' // rights sent to replica User: P on its inbox, N on ours
)

func (t EventType) String() string {
	switch t {
	case EventLike:
		return "like"
	case EventUnlike:
		return "unlike"
	case EventIncr:
		return "incr"
	case EventReconcile:
		return "reconcile"
	case EventRecovered:
		return "recovered"
	case EventGrant:
		return "grant"
	case EventSpend:
		return "spend"
	case EventTransfer:
		return "transfer"
	}
	return "unknown"
}

// Event is one entry of the log. P and N are how much the event raised
// this replica's own entry of the Kind vector of Key: summed over the log,
// they give the own entry. Budget events name the vector differently
// (Moves).
type Event struct {
	Seq   uint64
	Type  EventType
	Kind  Kind
	Key   string // item or counter key
	User  string // likes; the record's user for a like reconciliation
	Idem  string // a keyed increment's (or its reconciliation's) idempotency key
	By    int64  // an increment's amount (of all Count, for folded increments)
	Count uint64 // increments folded into the event; 1 otherwise
	P, N  uint64
	HLC   crdt.HLC
}

// Moves calls fn with each vector whose own entry (of replica self) the
// event raised, and by how much. For every kind but Budgets that is
// Key's vector by (P, N). A budget event with User set names an inbox: a
// transfer raises the receiver User's inbox by P and self's own inbox by
// N (what self sent in all); any other budget event with User set (a
// recovery) raises the inbox of User. Without User, it is the budget's
// main vector.
func (e *Event) Moves(self string, fn func(k VectorKey, pn crdt.PN)) {
	switch {
	case e.Kind != Budgets || e.User == "":
		fn(VectorKey{e.Kind, e.Key}, crdt.PN{P: e.P, N: e.N})
	case e.Type == EventTransfer:
		fn(VectorKey{e.Kind, crdt.BudgetInboxName(e.Key, e.User)}, crdt.PN{P: e.P})
		fn(VectorKey{e.Kind, crdt.BudgetInboxName(e.Key, self)}, crdt.PN{N: e.N})
	default:
		fn(VectorKey{e.Kind, crdt.BudgetInboxName(e.Key, e.User)}, crdt.PN{P: e.P, N: e.N})
	}
}

// LogChunk is at most how many events one log key (and one published
// message) holds.
const LogChunk = 512

// AppendEvents appends the encoding of a chunk of events (without their
// seqs: the first is the key, the others follow).
//
//	v1 | count | (type | kind | HLC | key | user | idem | by (zigzag) | count | P | N)*
func AppendEvents(dst []byte, events []Event) []byte {
	dst = append(dst, 1)
	dst = binary.AppendUvarint(dst, uint64(len(events)))
	for i := range events {
		e := &events[i]
		dst = append(dst, byte(e.Type), byte(e.Kind))
		dst = binary.AppendUvarint(dst, uint64(e.HLC))
		for _, s := range []string{e.Key, e.User, e.Idem} {
			dst = binary.AppendUvarint(dst, uint64(len(s)))
			dst = append(dst, s...)
		}
		dst = binary.AppendVarint(dst, e.By)
		dst = binary.AppendUvarint(dst, e.Count)
		dst = binary.AppendUvarint(dst, e.P)
		dst = binary.AppendUvarint(dst, e.N)
	}
	return dst
}

// DecodeEvents decodes an AppendEvents encoding; the events' seqs count
// from first.
func DecodeEvents(b []byte, first uint64) ([]Event, error) {
	bad := func(what string) ([]Event, error) {
		return nil, fmt.Errorf("decode events: %w: %s", crdt.ErrCorrupt, what)
	}
	if len(b) < 2 || b[0] != 1 {
		return bad("version")
	}
	b = b[1:]
	uv := func() (uint64, bool) {
		x, n := binary.Uvarint(b)
		if n <= 0 || n > 1 && b[n-1] == 0 {
			return 0, false
		}
		b = b[n:]
		return x, true
	}
	count, ok := uv()
	// Each event takes at least 11 bytes.
	if !ok || count == 0 || count > LogChunk || count > uint64(len(b))/11 {
		return bad("count")
	}
	out := make([]Event, 0, count)
	for i := range count {
		if len(b) < 2 {
			return bad("truncated")
		}
		e := Event{Seq: first + i, Type: EventType(b[0]), Kind: Kind(b[1])}
		b = b[2:]
		if e.Type.String() == "unknown" || !e.Kind.Valid() {
			return bad("type or kind")
		}
		h, ok := uv()
		if !ok {
			return bad("hlc")
		}
		e.HLC = crdt.HLC(h)
		var strs [3]string
		for j := range strs {
			n, ok := uv()
			if !ok || n > crdt.MaxIDLen || n > uint64(len(b)) {
				return bad("string")
			}
			strs[j] = string(b[:n])
			b = b[n:]
			valid := crdt.ValidID
			if j == 0 {
				valid = crdt.ValidItemName // an event of a hot item's part names the part
			}
			if strs[j] != "" && !valid(strs[j]) || j == 0 && strs[j] == "" {
				return bad("id")
			}
		}
		e.Key, e.User, e.Idem = strs[0], strs[1], strs[2]
		zz, ok := uv()
		if !ok {
			return bad("by")
		}
		e.By = int64(zz>>1) ^ -int64(zz&1)
		if e.Count, ok = uv(); !ok {
			return bad("count")
		}
		if e.P, ok = uv(); !ok {
			return bad("p")
		}
		if e.N, ok = uv(); !ok {
			return bad("n")
		}
		out = append(out, e)
	}
	if len(b) != 0 {
		return bad("trailing bytes")
	}
	return out, nil
}

func appendLogKey(dst []byte, seq uint64) []byte {
	return appendHex16(append(dst, prefixLog, '/'), seq)
}

// loadLog reads the log's last seq and id, creating the id on first open.
func (s *Store) loadLog() error {
	prefix := []byte{prefixLog, '/'}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("load event log: %w", err)
	}
	if it.Last() {
		first, events, err := decodeChunk(it.Key(), it.Value())
		if err != nil {
			_ = it.Close()
			return fmt.Errorf("load event log: %w", err)
		}
		s.logLast.Store(first + uint64(len(events)) - 1)
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("load event log: %w", err)
	}
	if p, ok, err := s.Meta(metaLogPublished); err != nil {
		return err
	} else if ok && len(p) == 8 {
		s.logLast.Store(max(s.logLast.Load(), binary.BigEndian.Uint64(p))) // a trimmed log keeps counting
	}
	id, ok, err := s.Meta(metaLogID)
	if err != nil {
		return err
	}
	if !ok {
		// Stored with the first event: opening writes nothing.
		var r [8]byte
		_, _ = rand.Read(r[:])
		id = []byte(hex.EncodeToString(r[:]))
		s.logIDNew.Store(true)
	}
	s.logID = string(id)
	return nil
}

// LogID names this store's event log (see metaLogID).
func (s *Store) LogID() string { return s.logID }

// LogLast is the seq of the last committed event (0: none yet).
func (s *Store) LogLast() uint64 { return s.logLast.Load() }

// LogEvents appends events to the batch's events; Commit writes them with
// the next seqs. Only the replica's writer logs, one batch at a time. The
// batch may keep and change the slice (Commit sets the seqs).
func (b *Batch) LogEvents(events []Event) {
	if b.events == nil {
		b.events = events
		return
	}
	b.events = append(b.events, events...)
}

// writeEvents gives the batch's events their seqs and writes them, in
// chunks of up to LogChunk. The store's counter moves only once the batch
// commits.
func (b *Batch) writeEvents() uint64 {
	seq := b.s.logLast.Load()
	if len(b.events) > 0 && b.s.logIDNew.Load() {
		b.PutMeta(metaLogID, []byte(b.s.logID))
	}
	for i := 0; i < len(b.events); i += LogChunk {
		chunk := b.events[i:min(i+LogChunk, len(b.events))]
		for j := range chunk {
			chunk[j].Seq = seq + 1 + uint64(j)
			b.putHistory(&chunk[j])
		}
		b.kbuf = appendLogKey(b.kbuf[:0], seq+1)
		b.buf = AppendEvents(b.buf[:0], chunk)
		_ = b.b.Set(b.kbuf, b.buf, nil)
		seq += uint64(len(chunk))
	}
	return seq
}

// decodeChunk decodes one log key and its chunk.
func decodeChunk(key, val []byte) (uint64, []Event, error) {
	first, err := strconv.ParseUint(string(key[2:]), 16, 64)
	if err != nil || len(key) != 18 {
		return 0, nil, fmt.Errorf("bad event log key %q: %w", key, crdt.ErrCorrupt)
	}
	events, err := DecodeEvents(val, first)
	if err != nil {
		return 0, nil, fmt.Errorf("event log chunk %d: %w", first, err)
	}
	return first, events, nil
}

// ScanChunks calls fn for the log's chunks whose events come after seq
// after, in order, until fn returns false. A chunk that holds after
// itself is passed whole.
func (s *Store) ScanChunks(after uint64, fn func(events []Event) bool) error {
	if s.closed.Load() {
		return fmt.Errorf("scan event log: %w", ErrClosed)
	}
	prefix := []byte{prefixLog, '/'}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("scan event log: %w", err)
	}
	// The chunk that may hold after+1 starts at or before it.
	valid := it.SeekLT(appendLogKey(nil, after+2))
	if !valid {
		valid = it.First()
	}
	for ; valid; valid = it.Next() {
		_, events, err := decodeChunk(it.Key(), it.Value())
		if err != nil {
			_ = it.Close()
			return fmt.Errorf("scan event log: %w", err)
		}
		if events[len(events)-1].Seq <= after {
			continue
		}
		if !fn(events) {
			break
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("scan event log: %w", err)
	}
	return nil
}

// ScanLog calls fn for the events after seq after, in order, until fn
// returns false or limit events were visited.
func (s *Store) ScanLog(after uint64, limit int, fn func(Event) bool) error {
	n := 0
	return s.ScanChunks(after, func(events []Event) bool {
		for _, e := range events {
			if e.Seq <= after {
				continue
			}
			if n == limit || !fn(e) {
				return false
			}
			n++
		}
		return n < limit
	})
}

// MergeLogChunks joins runs of consecutive chunks that start after seq
// after into chunks of up to LogChunk events, in one batch, and returns
// the last seq of the log it looked at (after if there was nothing to
// look at). The batch is committed without an fsync of its own, so the
// merge adds no fsync in front of the writer's commits; the caller must
// WaitDurable before anything of it leaves the process, since a merge
// lost to a power loss after its chunk was sent would leave the old,
// shorter chunk to be resent under the sent one's id. The events, their seqs and
// their order stay as they were; only where one chunk ends and the next
// begins moves. The publisher calls it on the chunks it has never
// published, so that one message (one chunk) carries several commits
// (replication.Publisher): a chunk that may already be on the stream must
// never change, or a resend under its id would be dropped as a duplicate
// while holding events the stream lacks.
func (s *Store) MergeLogChunks(after uint64) (uint64, error) {
	if s.closed.Load() {
		return after, fmt.Errorf("merge event log chunks: %w", ErrClosed)
	}
	prefix := []byte{prefixLog, '/'}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: appendLogKey(nil, after+1), UpperBound: prefixEnd(prefix)})
	if err != nil {
		return after, fmt.Errorf("merge event log chunks: %w", err)
	}
	b := s.NewBatch()
	defer b.Close()
	last := after
	var (
		runKey   []byte // the run's first key
		runBody  []byte // the run's events, encoded, without the header
		runCount uint64
		runLen   int // chunks in the run
		merged   int // chunks deleted
	)
	flush := func() {
		if runLen > 1 {
			v := binary.AppendUvarint([]byte{1}, runCount)
			_ = b.b.Set(runKey, append(v, runBody...), nil)
		}
		runKey, runBody, runCount, runLen = nil, runBody[:0], 0, 0
	}
	for valid := it.First(); valid; valid = it.Next() {
		first, err := strconv.ParseUint(string(it.Key()[2:]), 16, 64)
		val := it.Value()
		if err != nil || len(it.Key()) != 18 || len(val) < 2 || val[0] != 1 {
			_ = it.Close()
			return after, fmt.Errorf("merge event log chunks: bad chunk %q: %w", it.Key(), crdt.ErrCorrupt)
		}
		count, n := binary.Uvarint(val[1:])
		if n <= 0 || count == 0 || count > LogChunk || first != last+1 && last != after {
			_ = it.Close()
			return after, fmt.Errorf("merge event log chunks: chunk %d of %d events after %d: %w", first, count, last, crdt.ErrCorrupt)
		}
		if runLen > 0 && runCount+count > LogChunk {
			flush()
		}
		if runLen == 0 {
			runKey = append(runKey[:0], it.Key()...)
		} else {
			_ = b.b.Delete(it.Key(), nil)
			merged++
		}
		runBody = append(runBody, val[1+n:]...)
		runCount += count
		runLen++
		last = first + count - 1
	}
	flush()
	if err := it.Close(); err != nil {
		return after, fmt.Errorf("merge event log chunks: %w", err)
	}
	if merged == 0 {
		return last, nil
	}
	if err := b.commitLazy(); err != nil {
		return after, fmt.Errorf("merge event log chunks: %w", err)
	}
	return last, nil
}

// LogPublished is how far the stream has acknowledged the log.
func (s *Store) LogPublished() (uint64, error) {
	p, ok, err := s.Meta(metaLogPublished)
	if err != nil || !ok || len(p) != 8 {
		return 0, err
	}
	return binary.BigEndian.Uint64(p), nil
}

// SetLogPublished records that the stream holds every event up to seq,
// and deletes the chunks that start at or before trimTo (0: none), which
// must be the first seq of a chunk after a published one (trimTo-1 is
// the last event deleted). It is committed without an fsync of its own
// (the writer's next fsync, or WaitDurable, makes it durable): a cursor
// lost to a power loss only makes the publisher resend what the stream
// already holds, which the stream drops by message id, and chunks
// trimmed with it are trimmed again.
func (s *Store) SetLogPublished(seq, trimTo uint64) error {
	b := s.NewBatch()
	defer b.Close()
	b.PutMeta(metaLogPublished, binary.BigEndian.AppendUint64(nil, seq))
	if trimTo > 1 && trimTo <= seq+1 {
		_ = b.b.DeleteRange(appendLogKey(nil, 0), appendLogKey(nil, trimTo), nil)
	}
	if err := b.commitLazy(); err != nil {
		return fmt.Errorf("record published events: %w", err)
	}
	return nil
}

// LogTotals is what the audit compares: per vector, the own-entry growth
// the log accounts for and the own entry stored, from one snapshot.
type LogTotals struct {
	First, Last uint64 // seqs of the oldest and newest event (0: empty log)
	Events      uint64
	Logged      map[VectorKey]crdt.PN
	Stored      map[VectorKey]crdt.PN
}

// VectorKey names a vector.
type VectorKey struct {
	Kind Kind
	Key  string
}

// LogTotals sums the log and reads every stored own entry of replica self,
// from one consistent snapshot of the store.
func (s *Store) LogTotals(self string) (LogTotals, error) {
	if s.closed.Load() {
		return LogTotals{}, fmt.Errorf("audit event log: %w", ErrClosed)
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()
	t := LogTotals{Logged: map[VectorKey]crdt.PN{}, Stored: map[VectorKey]crdt.PN{}}
	prefix := []byte{prefixLog, '/'}
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return t, fmt.Errorf("audit event log: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		first, events, err := decodeChunk(it.Key(), it.Value())
		if err != nil {
			_ = it.Close()
			return t, fmt.Errorf("audit event log: %w", err)
		}
		if t.First == 0 {
			t.First = first
		}
		for _, e := range events {
			t.Last = e.Seq
			t.Events++
			e.Moves(self, func(k VectorKey, d crdt.PN) {
				pn := t.Logged[k]
				pn.P += d.P
				pn.N += d.N
				t.Logged[k] = pn
			})
		}
	}
	if err := it.Close(); err != nil {
		return t, fmt.Errorf("audit event log: %w", err)
	}
	lower := []byte{prefixSegment}
	it, err = snap.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(lower)})
	if err != nil {
		return t, fmt.Errorf("audit event log: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		key := it.Key()
		if len(key) < 8 || key[5] != prefixVector {
			continue
		}
		err := visit(key[5:], it.Value(), SegmentVisitor{Vector: func(k Kind, item, replica string, e crdt.PN) {
			if replica == self && !k.IsWindows() { // slots are not logged
				t.Stored[VectorKey{k, item}] = e
			}
		}})
		if err != nil {
			_ = it.Close()
			return t, fmt.Errorf("audit event log: %q: %w", key, err)
		}
	}
	if err := it.Close(); err != nil {
		return t, fmt.Errorf("audit event log: %w", err)
	}
	return t, nil
}
