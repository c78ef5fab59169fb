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

	numAsked = AskTrending + 1
)

// askedNames name each gathered read, for logs and tests.
var askedNames = [...]string{AskTrending: "trending"}

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
	// Key is a prefix or a user; Zone a region's name.
	Key, Zone string
	// N is how many to answer; SpanMs a window's length in ms.
	N, SpanMs int64
}

// Reply is a replica's answer to a Question: what it read, or why it did
// not (Code and Msg, as a Result's: the asker leaves such a replica out).
type Reply struct {
	Code, Msg string
	// Approx: the replica's part may be off (an approximate key, a peer
	// unheard-from, a cut list).
	Approx bool
	// Candidates is how many keys a ranking scored.
	Candidates int64
	Items      []ReplyItem
}

// ReplyItem is one key of a Reply.
type ReplyItem struct {
	Key    string
	Count  int64
	Approx bool
}

// MaxReplyItems bounds a Reply's items.
const MaxReplyItems = 1 << 16

// replyItemMinBytes is the fewest bytes an encoded ReplyItem takes.
const replyItemMinBytes = 3

// shardSetBytes is an encoded shard.Set's size: one bit a shard.
const shardSetBytes = shard.Count / 8

func (q *Question) size() int { return 32 + shardSetBytes + len(q.Key) + len(q.Zone) }

func (q *Question) append(b []byte) []byte {
	b = append(b, byte(q.Asked))
	for _, w := range q.Shards {
		b = binary.LittleEndian.AppendUint64(b, w)
	}
	b = append(b, q.Family)
	b = appendString(b, q.Key)
	b = appendString(b, q.Zone)
	b = binary.AppendVarint(b, q.N)
	return binary.AppendVarint(b, q.SpanMs)
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
	q.N = d.varint()
	q.SpanMs = d.varint()
	return &q
}

// Reply flags, one bit each.
const (
	replyApprox = 1 << iota
)

// MarshalReply encodes r, the Body of a Question's answer.
func MarshalReply(r *Reply) []byte {
	n := 16 + len(r.Code) + len(r.Msg)
	for _, it := range r.Items {
		n += len(it.Key) + 12
	}
	b := make([]byte, 0, n)
	b = append(b, Version)
	b = appendString(b, r.Code)
	b = appendString(b, r.Msg)
	var flags byte
	if r.Approx {
		flags |= replyApprox
	}
	b = append(b, flags)
	b = binary.AppendVarint(b, r.Candidates)
	b = binary.AppendUvarint(b, uint64(len(r.Items)))
	for _, it := range r.Items {
		b = appendString(b, it.Key)
		b = binary.AppendVarint(b, it.Count)
		var f byte
		if it.Approx {
			f |= replyApprox
		}
		b = append(b, f)
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
	r.Approx = d.flags(replyApprox) != 0
	r.Candidates = d.varint()
	n := d.count(MaxReplyItems)
	if n > 0 {
		r.Items = make([]ReplyItem, 0, min(n, len(d.b)/replyItemMinBytes+1))
	}
	for range n {
		if d.err != nil {
			break
		}
		it := ReplyItem{Key: d.string(), Count: d.varint()}
		it.Approx = d.flags(replyApprox) != 0
		r.Items = append(r.Items, it)
	}
	if err := d.end(); err != nil {
		return Reply{}, err
	}
	return r, nil
}

// flags reads a byte of flags, refusing any bit outside known.
func (d *decoder) flags(known byte) byte {
	f := d.byte()
	if d.err == nil && f&^known != 0 {
		d.fail("flags %#x", f)
	}
	return f
}
