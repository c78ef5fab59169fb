package replication

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/shard"
	"github.com/tally-dev/tally/storage"
)

// Wire messages. Each starts with a version byte and a type byte; integers
// are uvarints, strings and blobs are length-prefixed, records are
// crdt.AppendRecord bytes, a spend's under its budget key's
// crdt.SpendName. Decoders are strict (fuzzed) because any
// process on the NATS account can publish to these subjects.
const (
	wireV1 = 1

	typeDelta   = 1
	typeDigests = 2
	typePageReq = 3
	typePage    = 4
	// A sharded replica's digest request names the shards it compares
	// (typeDigestsReq) and is answered with their digests only
	// (typeShardDigests). An empty request, all there was before, still
	// asks for every digest and gets typeDigests.
	typeDigestsReq   = 5
	typeShardDigests = 6
	// A differing segment is repaired below the segment (Parts, Diff):
	// the asker gets the peer's digests of the segment's parts
	// (typePartsReq, typeParts), then asks for the entries of the parts
	// that differ that it does not hold identically (typeDiffReq), and
	// gets them as a page, compressed if that pays (typeDiffPage). They
	// go on the page subject; a peer that predates them answers nothing,
	// and the asker pulls the whole segment (typePageReq) instead.
	typePartsReq = 7
	typeParts    = 8
	typeDiffReq  = 9
	typeDiffPage = 10
	// A diff request naming its asker (typeOwnDiffReq) is answered with
	// only what the asker may take from the peer (DiffRequest.For); a
	// peer that predates it answers nothing, and the asker sends
	// typeDiffReq instead.
	typeOwnDiffReq = 11
)

// ErrBadMessage wraps every wire decoding failure.
var ErrBadMessage = errors.New("replication: bad message")

const (
	maxWireEntries = 1 << 20
	maxBlob        = 1 << 16
)

// Delta is a fast-path message: the sender's new absolute own entries and
// its changed like records. With no entries it is a heartbeat.
type Delta struct {
	Replica string
	Region  string
	// Incarnation is random per sender process: a new one means the
	// sender restarted (Seq starts over); our own id with a foreign
	// incarnation means two processes share a replica id.
	Incarnation uint64
	Seq         uint64 // per-sender message counter, for loss accounting
	SentAtMs    int64  // sender's wall clock when flushed, for lag
	Root        uint64 // sender's state digest when flushed
	Vectors     []OwnEntry
	Records     []Record
	// Sketches are pages of the sender's own unique-count sketches. On the
	// wire they follow the records, and a message without them may end
	// before: senders that predate sketches stay readable.
	Sketches []OwnPage
	// Asks are the sender's requests for budget rights (region.RightsAsk):
	// a peer that holds rights to the key gives it some. On the wire they
	// follow the sketches (whose section is then present, maybe empty).
	Asks []Ask
}

// Ask is a request for rights to one budget.
type Ask struct {
	Key  string
	Want int64
}

func (d *Delta) empty() bool {
	return len(d.Vectors) == 0 && len(d.Records) == 0 && len(d.Sketches) == 0 && len(d.Asks) == 0
}

// OwnPage is one page of the sender's own sketch of a key, absolute.
type OwnPage struct {
	Kind storage.Kind // storage.Uniques or storage.UniquesWindows
	Name string
	Page int
	Regs *crdt.HLLPage
}

// SketchPage is any replica's page of a sketch (anti-entropy pages carry
// everyone's).
type SketchPage struct {
	Kind    storage.Kind
	Name    string
	Replica string
	Page    int
	Regs    *crdt.HLLPage
}

// OwnEntry is the sender's own entry of one vector.
type OwnEntry struct {
	Kind storage.Kind
	Item string
	PN   crdt.PN
}

// Record is one record on the wire, of any kind, named as in
// region.RecordMerge: a spend by its budget key (the wire name is its
// crdt.SpendName).
type Record struct {
	Item, User string
	Rec        crdt.Record
}

// wireName is the name r's record travels under in place of its Item.
func (r *Record) wireName() string {
	if _, spend := r.Rec.(*crdt.Spend); spend {
		return crdt.SpendName(r.Item)
	}
	return r.Item
}

// Entry is any replica's entry of one vector (anti-entropy pages carry
// everyone's entries, not only the sender's).
type Entry struct {
	Kind    storage.Kind
	Item    string
	Replica string
	PN      crdt.PN
}

// PageRequest asks for the entries of one segment after a cursor.
type PageRequest struct {
	Segment int
	After   []byte // resume after this storage key; nil from the start
}

// Page is one page of a segment's entries.
type Page struct {
	Entries  []Entry
	Records  []Record
	Next     []byte // cursor for the next page; nil when the segment is done
	Sketches []SketchPage
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBlob(b []byte, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

func appendRecords(b []byte, recs []Record) []byte {
	b = binary.AppendUvarint(b, uint64(len(recs)))
	for i := range recs {
		r := &recs[i]
		b = appendStr(b, r.wireName())
		b = appendStr(b, r.User)
		n := len(b)
		b = append(b, 0) // placeholder length byte, fixed below
		b = crdt.AppendRecord(b, r.Rec)
		b = fixLen(b, n)
	}
	return b
}

// fixLen replaces the one-byte placeholder at b[n] with the uvarint length
// of b[n+1:], shifting the body if the length needs more than one byte.
func fixLen(b []byte, n int) []byte {
	body := len(b) - n - 1
	var tmp [binary.MaxVarintLen64]byte
	l := binary.PutUvarint(tmp[:], uint64(body))
	if l == 1 {
		b[n] = tmp[0]
		return b
	}
	b = append(b, tmp[:l-1]...)
	copy(b[n+l:], b[n+1:n+1+body])
	copy(b[n:], tmp[:l])
	return b
}

// AppendDelta encodes d.
func AppendDelta(b []byte, d *Delta) []byte {
	b = append(b, wireV1, typeDelta)
	b = appendStr(b, d.Replica)
	b = appendStr(b, d.Region)
	b = binary.LittleEndian.AppendUint64(b, d.Incarnation)
	b = binary.AppendUvarint(b, d.Seq)
	b = binary.AppendUvarint(b, uint64(d.SentAtMs))
	b = binary.LittleEndian.AppendUint64(b, d.Root)
	b = binary.AppendUvarint(b, uint64(len(d.Vectors)))
	for _, e := range d.Vectors {
		b = append(b, byte(e.Kind))
		b = appendStr(b, e.Item)
		b = binary.AppendUvarint(b, e.PN.P)
		b = binary.AppendUvarint(b, e.PN.N)
	}
	b = appendRecords(b, d.Records)
	if len(d.Sketches) == 0 && len(d.Asks) == 0 {
		return b
	}
	b = binary.AppendUvarint(b, uint64(len(d.Sketches)))
	for _, p := range d.Sketches {
		b = appendSketchPage(b, p.Kind, p.Name, "", p.Page, p.Regs)
	}
	if len(d.Asks) == 0 {
		return b
	}
	b = binary.AppendUvarint(b, uint64(len(d.Asks)))
	for _, a := range d.Asks {
		b = appendStr(b, a.Key)
		b = binary.AppendUvarint(b, uint64(a.Want))
	}
	return b
}

func appendSketchPage(b []byte, k storage.Kind, name, replica string, page int, regs *crdt.HLLPage) []byte {
	b = append(b, byte(k))
	b = appendStr(b, name)
	if replica != "" {
		b = appendStr(b, replica)
	}
	b = append(b, byte(page))
	n := len(b)
	b = append(b, 0) // placeholder length byte, fixed below
	b = crdt.AppendHLLPage(b, regs)
	return fixLen(b, n)
}

// DecodeDelta decodes an AppendDelta encoding.
func DecodeDelta(p []byte) (*Delta, error) {
	r := reader{b: p}
	r.header(typeDelta)
	d := &Delta{Replica: r.id(), Region: r.id(), Incarnation: r.u64(), Seq: r.uvarint(), SentAtMs: int64(r.uvarint()), Root: r.u64()}
	n := r.count()
	for i := 0; i < n && r.err == nil; i++ {
		k := r.kind()
		e := OwnEntry{Kind: k, Item: r.item(k), PN: crdt.PN{P: r.uvarint(), N: r.uvarint()}}
		d.Vectors = append(d.Vectors, e)
	}
	d.Records = r.records()
	if r.err == nil && len(r.b) > 0 {
		n := r.count()
		for i := 0; i < n && r.err == nil; i++ {
			k, name := r.sketchName()
			page, regs := r.sketchPage()
			d.Sketches = append(d.Sketches, OwnPage{Kind: k, Name: name, Page: page, Regs: regs})
		}
		if r.err == nil && len(r.b) > 0 {
			d.Asks = r.asks()
		} else if r.err == nil && n == 0 {
			// One encoding per message: no sketches and no asks is no
			// trailing section at all.
			r.fail("empty sketch section")
		}
	}
	return d, r.finish("delta")
}

// deltaSender reads only the sender and incarnation at the head of an
// AppendDelta encoding (ok false if they are not there), so a replica can
// drop the echo of its own message without decoding its entries.
func deltaSender(p []byte) (replica []byte, incarnation uint64, ok bool) {
	r := reader{b: p}
	r.header(typeDelta)
	replica = r.blob()
	r.blob() // region
	incarnation = r.u64()
	return replica, incarnation, r.err == nil
}

// AppendDigests encodes a replica's segment digests.
func AppendDigests(b []byte, replica string, digests []uint64) []byte {
	b = append(b, wireV1, typeDigests)
	b = appendStr(b, replica)
	b = binary.AppendUvarint(b, uint64(len(digests)))
	for _, d := range digests {
		b = binary.LittleEndian.AppendUint64(b, d)
	}
	return b
}

// DecodeDigests decodes an AppendDigests encoding.
func DecodeDigests(p []byte) (replica string, digests []uint64, err error) {
	r := reader{b: p}
	r.header(typeDigests)
	replica = r.id()
	n := r.count()
	if r.err == nil && n != storage.Segments {
		r.fail("%d digests, want %d", n, storage.Segments)
	}
	for i := 0; i < n && r.err == nil; i++ {
		digests = append(digests, r.u64())
	}
	return replica, digests, r.finish("digests")
}

// DigestsRequest asks a peer for the digests of the segments of some
// shards only: those both replicas keep. Summary is the asker's
// storage.RootOfShards over them; when the peer's is the same, the states
// of those segments are (almost surely) equal and the answer carries no
// digests. A peer that predates it ignores the request's body and answers
// with every digest (AppendDigests), which the asker reads too.
type DigestsRequest struct {
	Shards  shard.Set
	Summary uint64
}

// ShardDigests answers a DigestsRequest: Equal if the summaries were,
// else the digests of the requested shards' segments, in segment order.
type ShardDigests struct {
	Replica string
	Equal   bool
	Digests []uint64
}

// AppendDigestsRequest encodes q. The shards go as runs: how many, then
// for each the gap since the end of the one before (from shard 0 for the
// first) and its length less one, uvarints.
func AppendDigestsRequest(b []byte, q *DigestsRequest) []byte {
	b = append(b, wireV1, typeDigestsReq)
	b = appendShardSet(b, &q.Shards)
	return binary.LittleEndian.AppendUint64(b, q.Summary)
}

// DecodeDigestsRequest decodes an AppendDigestsRequest encoding.
func DecodeDigestsRequest(p []byte) (*DigestsRequest, error) {
	r := reader{b: p}
	r.header(typeDigestsReq)
	q := &DigestsRequest{Shards: r.shardSet()}
	q.Summary = r.u64()
	return q, r.finish("digests request")
}

// AppendShardDigests encodes d.
func AppendShardDigests(b []byte, d *ShardDigests) []byte {
	b = append(b, wireV1, typeShardDigests)
	b = appendStr(b, d.Replica)
	if d.Equal {
		return append(b, 1)
	}
	b = append(b, 0)
	b = binary.AppendUvarint(b, uint64(len(d.Digests)))
	for _, x := range d.Digests {
		b = binary.LittleEndian.AppendUint64(b, x)
	}
	return b
}

// DecodeShardDigests decodes an AppendShardDigests encoding. Whether the
// digests are as many as the request's shards have segments is the
// asker's to check.
func DecodeShardDigests(p []byte) (*ShardDigests, error) {
	r := reader{b: p}
	r.header(typeShardDigests)
	d := &ShardDigests{Replica: r.id()}
	switch eq := r.byte(); {
	case r.err != nil:
	case eq == 1:
		d.Equal = true
	case eq != 0:
		r.fail("equal flag %d", eq)
	default:
		n := r.count()
		if r.err == nil && (n == 0 || n > storage.Segments || n%storage.SegmentsPerShard != 0) {
			r.fail("%d digests, want a whole number of shards' segments", n)
		}
		if r.err == nil && n*8 > len(r.b) {
			r.fail("truncated digests")
		}
		for i := 0; i < n && r.err == nil; i++ {
			d.Digests = append(d.Digests, r.u64())
		}
	}
	return d, r.finish("shard digests")
}

// appendShardSet writes ss as runs (AppendDigestsRequest).
func appendShardSet(b []byte, ss *shard.Set) []byte {
	type run struct{ start, n int }
	var runs []run
	for s := 0; s < shard.Count; s++ {
		if !ss.Has(s) {
			continue
		}
		if k := len(runs) - 1; k >= 0 && runs[k].start+runs[k].n == s {
			runs[k].n++
		} else {
			runs = append(runs, run{s, 1})
		}
	}
	b = binary.AppendUvarint(b, uint64(len(runs)))
	next := 0
	for _, r := range runs {
		b = binary.AppendUvarint(b, uint64(r.start-next))
		b = binary.AppendUvarint(b, uint64(r.n-1))
		next = r.start + r.n
	}
	return b
}

// shardSet reads what appendShardSet writes: runs in order, apart (two
// that touch would be one), within 0..shard.Count-1.
func (r *reader) shardSet() shard.Set {
	var ss shard.Set
	n := r.uvarint()
	if r.err == nil && n > shard.Count/2 {
		r.fail("%d shard runs", n)
		return ss
	}
	next := uint64(0)
	for i := uint64(0); i < n && r.err == nil; i++ {
		gap, more := r.uvarint(), r.uvarint()
		switch {
		case r.err != nil:
		case i > 0 && gap == 0:
			r.fail("shard runs touch")
		case gap >= shard.Count || more >= shard.Count || next+gap+more >= shard.Count:
			r.fail("shard run past %d", shard.Count-1)
		default:
			for s := next + gap; s <= next+gap+more; s++ {
				ss.Add(int(s))
			}
			next += gap + more + 1
		}
	}
	return ss
}

// AppendPageRequest encodes q.
func AppendPageRequest(b []byte, q *PageRequest) []byte {
	b = append(b, wireV1, typePageReq)
	b = binary.AppendUvarint(b, uint64(q.Segment))
	return appendBlob(b, q.After)
}

// DecodePageRequest decodes an AppendPageRequest encoding.
func DecodePageRequest(p []byte) (*PageRequest, error) {
	r := reader{b: p}
	r.header(typePageReq)
	q := &PageRequest{Segment: int(r.uvarint())}
	if r.err == nil && (q.Segment < 0 || q.Segment >= storage.Segments) {
		r.fail("segment %d", q.Segment)
	}
	q.After = r.blob()
	return q, r.finish("page request")
}

// AppendPage encodes pg.
func AppendPage(b []byte, pg *Page) []byte {
	b = append(b, wireV1, typePage)
	b = binary.AppendUvarint(b, uint64(len(pg.Entries)))
	for _, e := range pg.Entries {
		b = append(b, byte(e.Kind))
		b = appendStr(b, e.Item)
		b = appendStr(b, e.Replica)
		b = binary.AppendUvarint(b, e.PN.P)
		b = binary.AppendUvarint(b, e.PN.N)
	}
	b = appendRecords(b, pg.Records)
	b = appendBlob(b, pg.Next)
	if len(pg.Sketches) == 0 {
		return b
	}
	b = binary.AppendUvarint(b, uint64(len(pg.Sketches)))
	for _, p := range pg.Sketches {
		b = appendSketchPage(b, p.Kind, p.Name, p.Replica, p.Page, p.Regs)
	}
	return b
}

// DecodePage decodes an AppendPage encoding.
func DecodePage(p []byte) (*Page, error) {
	r := reader{b: p}
	r.header(typePage)
	pg := &Page{}
	n := r.count()
	for i := 0; i < n && r.err == nil; i++ {
		k := r.kind()
		pg.Entries = append(pg.Entries, Entry{Kind: k, Item: r.item(k), Replica: r.id(), PN: crdt.PN{P: r.uvarint(), N: r.uvarint()}})
	}
	pg.Records = r.records()
	pg.Next = r.blob()
	if r.err == nil && len(r.b) > 0 {
		n := r.sketchCount()
		for i := 0; i < n && r.err == nil; i++ {
			k, name := r.sketchName()
			replica := r.id()
			page, regs := r.sketchPage()
			pg.Sketches = append(pg.Sketches, SketchPage{Kind: k, Name: name, Replica: replica, Page: page, Regs: regs})
		}
	}
	return pg, r.finish("page")
}

// segment reads a segment number.
func (r *reader) segment() int {
	x := r.uvarint()
	if r.err == nil && x >= storage.Segments {
		r.fail("segment %d", x)
		return 0
	}
	return int(x)
}

// reader decodes wire messages, keeping the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{ErrBadMessage}, args...)...)
	}
}

func (r *reader) header(typ byte) {
	if len(r.b) < 2 {
		r.fail("truncated header")
		return
	}
	if r.b[0] != wireV1 || r.b[1] != typ {
		r.fail("version %d type %d, want %d %d", r.b[0], r.b[1], wireV1, typ)
	}
	r.b = r.b[2:]
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	x, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad uvarint")
		return 0
	}
	r.b = r.b[n:]
	return x
}

func (r *reader) u64() uint64 {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 8 {
		r.fail("truncated")
		return 0
	}
	x := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return x
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.fail("truncated")
		return 0
	}
	x := r.b[0]
	r.b = r.b[1:]
	return x
}

func (r *reader) count() int {
	n := r.uvarint()
	if r.err == nil && (n > maxWireEntries || n > uint64(len(r.b))) {
		r.fail("count %d", n)
		return 0
	}
	return int(n)
}

func (r *reader) blob() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > maxBlob || n > uint64(len(r.b)) {
		r.fail("length %d", n)
		return nil
	}
	if n == 0 {
		return nil
	}
	p := append([]byte(nil), r.b[:n]...)
	r.b = r.b[n:]
	return p
}

func (r *reader) id() string {
	p := r.blob()
	if r.err == nil && !crdt.ValidID(string(p)) {
		r.fail("bad id %q", p)
	}
	return string(p)
}

// item reads a vector name of kind k: an id, or a slot's name.
func (r *reader) item(k storage.Kind) string {
	p := r.blob()
	if r.err == nil && !storage.ValidItem(k, string(p)) {
		r.fail("bad %s vector name %q", k, p)
	}
	return string(p)
}

func (r *reader) kind() storage.Kind {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.fail("truncated")
		return 0
	}
	k := storage.Kind(r.b[0])
	r.b = r.b[1:]
	if !k.Valid() {
		r.fail("kind %d", k)
	}
	return k
}

// sketchCount reads the length of a sketch section, which is present only
// when not empty: one encoding per message.
func (r *reader) sketchCount() int {
	n := r.count()
	if r.err == nil && n == 0 {
		r.fail("empty sketch section")
	}
	return n
}

// sketchName reads a sketch's kind and name.
func (r *reader) sketchName() (storage.Kind, string) {
	if r.err != nil {
		return 0, ""
	}
	if len(r.b) == 0 {
		r.fail("truncated")
		return 0, ""
	}
	k := storage.Kind(r.b[0])
	r.b = r.b[1:]
	if !k.IsSketch() {
		r.fail("sketch kind %d", k)
		return 0, ""
	}
	p := r.blob()
	if r.err == nil && !storage.ValidSketch(k, string(p)) {
		r.fail("bad %s sketch name %q", k, p)
	}
	return k, string(p)
}

// sketchPage reads a page number and a page's registers.
func (r *reader) sketchPage() (int, *crdt.HLLPage) {
	if r.err != nil {
		return 0, nil
	}
	if len(r.b) == 0 {
		r.fail("truncated")
		return 0, nil
	}
	page := int(r.b[0])
	r.b = r.b[1:]
	if page >= crdt.HLLPages {
		r.fail("sketch page %d", page)
		return 0, nil
	}
	body := r.blob()
	if r.err != nil {
		return 0, nil
	}
	regs := new(crdt.HLLPage)
	if err := crdt.DecodeHLLPage(body, regs); err != nil {
		r.fail("sketch page: %v", err)
		return 0, nil
	}
	return page, regs
}

func (r *reader) records() []Record {
	n := r.count()
	var out []Record
	for i := 0; i < n && r.err == nil; i++ {
		rec := Record{Item: string(r.blob()), User: r.id()}
		body := r.blob()
		if r.err != nil {
			break
		}
		// A spend travels under its budget key's spend name, an event
		// type's metadata under region.TypeRecordItem.
		key, spend := crdt.SpendKey(rec.Item)
		var err error
		if rec.Item == region.TypeRecordItem {
			var m crdt.TypeMeta
			m, err = crdt.DecodeTypeMeta(body)
			rec.Rec = &m
		} else {
			rec.Rec, err = crdt.DecodeRecord(body, spend)
		}
		if err != nil {
			r.fail("record %s/%s: %v", rec.Item, rec.User, err)
			break
		}
		if spend {
			rec.Item = key
		}
		if !region.ValidRecordName(rec.Item, rec.Rec) {
			r.fail("bad record name %q", rec.Item)
			break
		}
		// A block flag is a register and nothing else.
		if like, ok := rec.Rec.(*crdt.LikeRecord); ok && rec.Item == region.BlockRecordItem {
			if _, ok := crdt.FlagOfRecord(like); !ok {
				r.fail("block flag of %s is not a pure register", rec.User)
				break
			}
		}
		out = append(out, rec)
	}
	return out
}

// asks reads a delta's asks for budget rights (a present section is not
// empty).
func (r *reader) asks() []Ask {
	n := r.count()
	if r.err == nil && n == 0 {
		r.fail("empty asks section")
	}
	var out []Ask
	for i := 0; i < n && r.err == nil; i++ {
		a := Ask{Key: r.id(), Want: int64(r.uvarint())}
		if r.err == nil && (a.Want < 1 || a.Want > region.MaxBy) {
			r.fail("ask for %d rights", a.Want)
		}
		out = append(out, a)
	}
	return out
}

func (r *reader) finish(what string) error {
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d trailing bytes", len(r.b))
	}
	if r.err != nil {
		return fmt.Errorf("decode %s: %w", what, r.err)
	}
	return nil
}
