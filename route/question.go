package route

import (
	"encoding/binary"
	"fmt"

	"github.com/tally-dev/tally/shard"
)

// A gathered read (a read of many keys, on many shards: trending, a
// feed, a user's likes) is asked of every other replica of the region as
// a typed Question, in a Request of KindQuestion, and each answers from
// the shards it holds with a Reply, the answer's Body (MarshalReply). The
// entry replica parsed and checked the client's request, merges the
// replies and renders the answer: no HTTP request, URI or JSON body
// crosses the wire.

// Asked says which gathered read a Question asks. The values are the
// wire's: never renumber one.
type Asked uint8

const (
	// AskTrending ranks the keys of family Family starting with Key over
	// the last SpanMs (0: all time), counting only the replicas of region
	// Zone ("": all), and answers its N keys of the largest net change
	// (Reply.Items: Key, Count, Approx), Candidates, and Approx. A
	// replica ranks every key it holds: a key in the region's top N is
	// in the top N of each of its holders.
	AskTrending Asked = iota + 1
	// AskUserLikes lists the items user Key likes on the replica's
	// shards, after item After ("": from the first), at most N
	// (Reply.Items: Key, the stored name, a split item's part's, and
	// HLC), and More if it has more.
	AskUserLikes
	// AskFeed reads, of the items Keys, those on shards in Shards that
	// the replica holds (never a split item, which the asker reads
	// itself): each item's like count and whether user Key likes it
	// (Reply.Items: Key, Count, Liked), and Approx if a count may move.
	AskFeed
	// AskTypeTotal sums, per shard it holds, the all-time vectors of the
	// keys of family Family that belong to registered type Key
	// (Reply.Shards); AskTypeWindow their net change over the window
	// [FromMs, ToMs), the one the asker read (Reply.Window says which
	// this replica read).
	AskTypeTotal
	AskTypeWindow
	// AskHolding is what the replica says of itself in the region's map
	// (Reply.Holding).
	AskHolding

	numAsked = AskHolding + 1
)

// askedNames name each gathered read, for logs and tests.
var askedNames = [...]string{AskTrending: "trending", AskUserLikes: "user likes", AskFeed: "feed",
	AskTypeTotal: "type total", AskTypeWindow: "type window", AskHolding: "holding"}

func (a Asked) String() string {
	if a > 0 && int(a) < len(askedNames) && askedNames[a] != "" {
		return askedNames[a]
	}
	return fmt.Sprintf("gathered read %d", uint8(a))
}

// Question is a gathered read the entry replica asks every other replica
// of its region. Which fields mean something depends on Asked.
type Question struct {
	Asked Asked
	// Shards are the shards whose keys the asker wants answered (those it
	// does not hold itself); a replica answers from those of them it
	// holds, unless the read says otherwise.
	Shards shard.Set
	// Family is the keys' family (storage.Kind's byte).
	Family byte
	// Key is a prefix or a user; Zone a region's name; After a list's
	// cursor.
	Key, Zone, After string
	// N is how many to answer; SpanMs a window's length in ms.
	N, SpanMs int64
	// FromMs and ToMs bound a window (unix ms), if Windowed.
	FromMs, ToMs int64
	Windowed     bool
	// Keys are the keys asked about (at most MaxList).
	Keys []string
}

// Reply is a replica's answer to a Question: what it read, or why it did
// not (Code and Msg, as a Result's: the asker leaves such a replica out).
type Reply struct {
	Code, Msg string
	// Approx: the replica's part may be off (an approximate key, a peer
	// unheard-from, a cut list).
	Approx bool
	// More: a list has more past Items.
	More bool
	// Candidates is how many keys a ranking scored.
	Candidates int64
	Items      []ReplyItem
	// Window is the window the replica read; nil if none.
	Window *ReplyWindow
	// Shards are sums per shard (at most shard.Count).
	Shards []ReplyShard
	// Holding is the replica's word on itself; nil if not asked.
	Holding *ReplyHolding
}

// ReplyWindow is a window a replica read: [FromMs, ToMs) in slots of
// SlotMs, Closed if it ended long enough ago that it no longer moves.
type ReplyWindow struct {
	FromMs, ToMs, SlotMs int64
	Closed               bool
}

// ReplyShard is a replica's sum of the keys of one shard it holds: the
// sum of their vectors, how many keys, whether any is approximate, and
// records not reconciled yet.
type ReplyShard struct {
	Shard        int
	Keys         int64
	Unreconciled int64
	Approx       bool
	Vector       []ReplyPN
}

// ReplyPN is one replica's entry of a summed vector.
type ReplyPN struct {
	Replica string
	P, N    uint64
}

// ReplyHolding is a replica's word on itself in its region's map: its
// address, the map revision it serves by, and how far along a move it
// is (nil: not moving shards that way).
type ReplyHolding struct {
	URL              string
	MapRevision      uint64
	Synced, Released *bool
}

// ReplyItem is one key of a Reply.
type ReplyItem struct {
	Key   string
	Count int64
	// HLC is when a listed item was liked.
	HLC uint64
	// Approx: the key is an approximate counter. Liked: the user asked
	// about likes the item.
	Approx, Liked bool
}

// MaxReplyItems bounds a Reply's items.
const MaxReplyItems = 1 << 16

// replyItemMinBytes is the fewest bytes an encoded ReplyItem takes.
const replyItemMinBytes = 4

// shardSetBytes is an encoded shard.Set's size: one bit a shard.
const shardSetBytes = shard.Count / 8

func (q *Question) size() int {
	n := 40 + shardSetBytes + len(q.Key) + len(q.Zone) + len(q.After)
	for _, k := range q.Keys {
		n += len(k) + 2
	}
	return n
}

func (q *Question) append(b []byte) []byte {
	b = append(b, byte(q.Asked))
	for _, w := range q.Shards {
		b = binary.LittleEndian.AppendUint64(b, w)
	}
	b = append(b, q.Family)
	b = appendString(b, q.Key)
	b = appendString(b, q.Zone)
	b = appendString(b, q.After)
	b = binary.AppendVarint(b, q.N)
	b = binary.AppendVarint(b, q.SpanMs)
	b = binary.AppendVarint(b, q.FromMs)
	b = binary.AppendVarint(b, q.ToMs)
	b = appendBool(b, q.Windowed)
	return appendStrings(b, q.Keys)
}

func (d *decoder) question() *Question {
	var q Question
	q.Asked = Asked(d.byte())
	if d.err == nil && (q.Asked == 0 || q.Asked >= numAsked) {
		d.fail("unknown gathered read %d", q.Asked)
	}
	if d.err == nil && len(d.b) < shardSetBytes {
		d.fail("short shard set")
	}
	if d.err != nil {
		return &q
	}
	for i := range q.Shards {
		q.Shards[i] = binary.LittleEndian.Uint64(d.b[i*8:])
	}
	d.b = d.b[shardSetBytes:]
	q.Family = d.byte()
	q.Key = d.string()
	q.Zone = d.string()
	q.After = d.string()
	q.N = d.varint()
	q.SpanMs = d.varint()
	q.FromMs = d.varint()
	q.ToMs = d.varint()
	q.Windowed = d.bool()
	q.Keys = d.strings()
	return &q
}

// Reply and ReplyItem flags, one bit each: replyMore a Reply's only,
// replyLiked a ReplyItem's.
const (
	replyApprox = 1 << iota
	replyMore
	replyLiked
	// replyWindow and replyHolding: a Reply's Window or Holding
	// follows.
	replyWindow
	replyHolding
)

// MarshalReply encodes r, the Body of a Question's answer.
func MarshalReply(r *Reply) []byte {
	n := 64 + len(r.Code) + len(r.Msg)
	for _, it := range r.Items {
		n += len(it.Key) + 24
	}
	for _, sh := range r.Shards {
		n += 16
		for _, e := range sh.Vector {
			n += len(e.Replica) + 22
		}
	}
	if r.Holding != nil {
		n += len(r.Holding.URL)
	}
	b := make([]byte, 0, n)
	b = append(b, Version)
	b = appendString(b, r.Code)
	b = appendString(b, r.Msg)
	b = append(b, flag(replyApprox, r.Approx)|flag(replyMore, r.More)|flag(replyWindow, r.Window != nil)|flag(replyHolding, r.Holding != nil))
	b = binary.AppendVarint(b, r.Candidates)
	b = binary.AppendUvarint(b, uint64(len(r.Items)))
	for _, it := range r.Items {
		b = appendString(b, it.Key)
		b = binary.AppendVarint(b, it.Count)
		b = binary.AppendUvarint(b, it.HLC)
		b = append(b, flag(replyApprox, it.Approx)|flag(replyLiked, it.Liked))
	}
	if w := r.Window; w != nil {
		b = binary.AppendVarint(b, w.FromMs)
		b = binary.AppendVarint(b, w.ToMs)
		b = binary.AppendVarint(b, w.SlotMs)
		b = appendBool(b, w.Closed)
	}
	b = binary.AppendUvarint(b, uint64(len(r.Shards)))
	for _, sh := range r.Shards {
		b = binary.AppendUvarint(b, uint64(sh.Shard))
		b = binary.AppendVarint(b, sh.Keys)
		b = binary.AppendVarint(b, sh.Unreconciled)
		b = appendBool(b, sh.Approx)
		b = binary.AppendUvarint(b, uint64(len(sh.Vector)))
		for _, e := range sh.Vector {
			b = appendString(b, e.Replica)
			b = binary.AppendUvarint(b, e.P)
			b = binary.AppendUvarint(b, e.N)
		}
	}
	if h := r.Holding; h != nil {
		b = appendString(b, h.URL)
		b = binary.AppendUvarint(b, h.MapRevision)
		b = appendMaybe(b, h.Synced)
		b = appendMaybe(b, h.Released)
	}
	return b
}

// UnmarshalReply decodes what MarshalReply encoded, refusing anything
// malformed or out of bounds.
func UnmarshalReply(b []byte) (Reply, error) {
	d := decoder{b: b}
	var r Reply
	d.header()
	r.Code = d.string()
	r.Msg = d.string()
	f := d.flags(replyApprox | replyMore | replyWindow | replyHolding)
	r.Approx, r.More = f&replyApprox != 0, f&replyMore != 0
	r.Candidates = d.varint()
	n := d.count(MaxReplyItems)
	if n > 0 {
		r.Items = make([]ReplyItem, 0, min(n, len(d.b)/replyItemMinBytes+1))
	}
	for range n {
		if d.err != nil {
			break
		}
		it := ReplyItem{Key: d.string(), Count: d.varint(), HLC: d.uvarint()}
		f := d.flags(replyApprox | replyLiked)
		it.Approx, it.Liked = f&replyApprox != 0, f&replyLiked != 0
		r.Items = append(r.Items, it)
	}
	if f&replyWindow != 0 && d.err == nil {
		r.Window = &ReplyWindow{FromMs: d.varint(), ToMs: d.varint(), SlotMs: d.varint(), Closed: d.bool()}
	}
	n = d.count(shard.Count)
	for range n {
		if d.err != nil {
			break
		}
		sh := ReplyShard{Shard: int(d.uvarint()), Keys: d.varint(), Unreconciled: d.varint(), Approx: d.bool()}
		if d.err == nil && sh.Shard >= shard.Count {
			d.fail("shard %d", sh.Shard)
		}
		m := d.count(MaxList)
		for range m {
			if d.err != nil {
				break
			}
			sh.Vector = append(sh.Vector, ReplyPN{Replica: d.string(), P: d.uvarint(), N: d.uvarint()})
		}
		r.Shards = append(r.Shards, sh)
	}
	if f&replyHolding != 0 && d.err == nil {
		r.Holding = &ReplyHolding{URL: d.string(), MapRevision: d.uvarint(), Synced: d.maybe(), Released: d.maybe()}
	}
	if err := d.end(); err != nil {
		return Reply{}, err
	}
	return r, nil
}

// flag is bit if on, else 0.
func flag(bit byte, on bool) byte {
	if on {
		return bit
	}
	return 0
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// bool reads a byte 0 or 1.
func (d *decoder) bool() bool {
	switch v := d.byte(); {
	case d.err != nil:
	case v == 1:
		return true
	case v != 0:
		d.fail("flag %d", v)
	}
	return false
}

// appendMaybe encodes an optional flag: 0 absent, 1 false, 2 true.
func appendMaybe(b []byte, v *bool) []byte {
	switch {
	case v == nil:
		return append(b, 0)
	case *v:
		return append(b, 2)
	}
	return append(b, 1)
}

func (d *decoder) maybe() *bool {
	switch v := d.byte(); {
	case d.err != nil || v == 0:
		return nil
	case v <= 2:
		on := v == 2
		return &on
	default:
		d.fail("optional flag %d", v)
		return nil
	}
}

// flags reads a byte of flags, refusing any bit outside known.
func (d *decoder) flags(known byte) byte {
	f := d.byte()
	if d.err == nil && f&^known != 0 {
		d.fail("flags %#x", f)
	}
	return f
}
