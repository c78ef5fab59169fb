package route

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
)

// A like's history (OpHistory) is answered in an encoding of its own,
// History, rather than as a Result: it is a list of actions, each with
// the replica and region that accepted it, and the replicas missing from
// it, which no Result field carries. A request holding an OpHistory holds
// nothing else, so its answer's Body is one History.

// Historian gathers a like's history from every replica holding its
// shard (replication.Replicator.History; httpapi.Replication has the
// same method).
type Historian interface {
	History(ctx context.Context, item, user string, limit int) (region.PairHistory, error)
}

// History is a holder's answer to an OpHistory: the pair's history, or
// why it was not read (Code and Msg, as a Result's).
type History struct {
	Code, Msg string
	region.PairHistory
}

// ReadHistory reads the history of user's like of item (or part), the
// newest limit actions of each replica: gathered by src's Historian, or
// this replica's own when it has none (a replica without replication).
// What a holder answers an OpHistory, and what an entry replica holding
// the shard answers itself.
func ReadHistory(ctx context.Context, src Source, item, user string, limit int) (region.PairHistory, error) {
	if src.Historian != nil {
		return src.Historian.History(ctx, item, user, limit)
	}
	rep := src.Replica
	own, err := rep.Likes().History(item, user, limit)
	if err != nil {
		return region.PairHistory{}, err
	}
	var h region.PairHistory
	for _, a := range own {
		h.Actions = append(h.Actions, region.PairAction{Replica: rep.ID(), Region: rep.Region(), Liked: a.Liked, HLC: a.HLC, Seq: a.Seq})
	}
	if rep.StateLost() {
		h.Partial = []string{rep.ID()}
	}
	return h, nil
}

// HistoryOp is the OpHistory of user's like of item, its newest limit
// actions at each replica.
func HistoryOp(item, user string, limit int) Op {
	return Op{Kind: OpHistory, Key: item, User: user, By: int64(limit)}
}

// historyOp checks o, an OpHistory, and returns its limit.
func historyOp(o *Op) (int, error) {
	if o.By < 1 || o.By > region.MaxHistory {
		return 0, fmt.Errorf("%w: a history of %d actions, want 1..%d", region.ErrInvalid, o.By, region.MaxHistory)
	}
	return int(o.By), nil
}

// ReadHistoryOp is ReadHistory of o, an OpHistory.
func ReadHistoryOp(ctx context.Context, src Source, o *Op) (region.PairHistory, error) {
	limit, err := historyOp(o)
	if err != nil {
		return region.PairHistory{}, err
	}
	return ReadHistory(ctx, src, o.Key, o.User, limit)
}

// MaxHistoryActions bounds a History's actions: region.MaxHistory from
// each of at most MaxList replicas would be more than any answer holds.
const MaxHistoryActions = 1 << 16

// historyActionMinBytes is the fewest bytes an encoded action takes.
const historyActionMinBytes = 5

// MarshalHistory encodes h, the Body of an OpHistory's answer.
func MarshalHistory(h *History) []byte {
	n := 8 + len(h.Code) + len(h.Msg)
	for _, a := range h.Actions {
		n += len(a.Replica) + len(a.Region) + 24
	}
	for _, s := range h.Missing {
		n += len(s) + 2
	}
	for _, s := range h.Partial {
		n += len(s) + 2
	}
	b := make([]byte, 0, n)
	b = append(b, Version)
	b = appendString(b, h.Code)
	b = appendString(b, h.Msg)
	b = binary.AppendUvarint(b, uint64(len(h.Actions)))
	for _, a := range h.Actions {
		b = appendString(b, a.Replica)
		b = appendString(b, a.Region)
		liked := byte(0)
		if a.Liked {
			liked = 1
		}
		b = append(b, liked)
		b = binary.AppendUvarint(b, uint64(a.HLC))
		b = binary.AppendUvarint(b, a.Seq)
	}
	b = appendStrings(b, h.Missing)
	return appendStrings(b, h.Partial)
}

// UnmarshalHistory decodes what MarshalHistory encoded, refusing anything
// malformed or out of bounds.
func UnmarshalHistory(b []byte) (History, error) {
	d := decoder{b: b}
	var h History
	d.header()
	h.Code = d.string()
	h.Msg = d.string()
	n := d.count(MaxHistoryActions)
	if n > 0 {
		h.Actions = make([]region.PairAction, 0, min(n, len(d.b)/historyActionMinBytes+1))
	}
	for range n {
		if d.err != nil {
			break
		}
		a := region.PairAction{Replica: d.string(), Region: d.string()}
		switch d.byte() {
		case 0:
		case 1:
			a.Liked = true
		default:
			d.fail("liked flag")
		}
		a.HLC, a.Seq = crdt.HLC(d.uvarint()), d.uvarint()
		h.Actions = append(h.Actions, a)
	}
	h.Missing = d.strings()
	h.Partial = d.strings()
	if err := d.end(); err != nil {
		return History{}, err
	}
	return h, nil
}
