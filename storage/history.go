package storage

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tally-dev/tally/crdt"
)

// The like history: one key per like or unlike this replica accepted,
// h/<item>/<user>/<16 hex seq> with the action and its stamp, written by
// the commit that logs the event. Each replica keeps its own actions only;
// a pair's whole history is the union over the replicas
// (replication.Replicator.History asks them). Unlike the log, it is not
// trimmed: it is the product's "who liked and unliked this, when".

const prefixHistory = 'h'

// Action is one like or unlike of a pair, as a replica accepted it.
type Action struct {
	Seq   uint64 // the event's seq in the accepting replica's log
	Liked bool
	HLC   crdt.HLC
}

func appendHistoryKey(dst []byte, item, user string, seq uint64) []byte {
	dst = append(dst, prefixHistory, '/')
	dst = append(dst, item...)
	dst = append(dst, '/')
	dst = append(dst, user...)
	dst = append(dst, '/')
	return appendHex16(dst, seq)
}

// putHistory indexes a logged like or unlike event.
func (b *Batch) putHistory(e *Event) {
	if e.Type != EventLike && e.Type != EventUnlike {
		return
	}
	b.kbuf = appendHistoryKey(b.kbuf[:0], e.Key, e.User, e.Seq)
	var v [1 + binary.MaxVarintLen64]byte
	if e.Type == EventLike {
		v[0] = 1
	}
	n := binary.PutUvarint(v[1:], uint64(e.HLC))
	_ = b.b.Set(b.kbuf, v[:1+n], nil)
}

// History returns the likes and unlikes of (item, user) this replica
// accepted, oldest first, at most limit of them (the newest limit).
func (s *Store) History(item, user string, limit int) ([]Action, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("read history: %w", ErrClosed)
	}
	prefix := append(appendKey(nil, prefixHistory, item, user), '/')
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	var out []Action
	for valid := it.Last(); valid && len(out) < limit; valid = it.Prev() {
		seq, err := strconv.ParseUint(string(it.Key()[len(prefix):]), 16, 64)
		v := it.Value()
		h, n := binary.Uvarint(v[min(1, len(v)):])
		if err != nil || len(v) < 2 || v[0] > 1 || n != len(v)-1 {
			_ = it.Close()
			return nil, fmt.Errorf("read history: bad entry %q: %w", it.Key(), crdt.ErrCorrupt)
		}
		out = append(out, Action{Seq: seq, Liked: v[0] == 1, HLC: crdt.HLC(h)})
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}
