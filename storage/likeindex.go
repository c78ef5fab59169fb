package storage

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tally-dev/tally/crdt"
)

// The like index: which users like an item, and which items a user likes,
// each in id order, for paginated lists. It is derived from the like
// records (a pair is listed exactly when its record says liked) and kept
// in the batch that writes the record, so it converges with the records
// and is never replicated: it lives outside the anti-entropy segments.
const (
	prefixLikers = 'y' // y/<item>/<user>: uvarint HLC of the winning like
	prefixLiked  = 'z' // z/<user>/<item>: the same
)

// metaLikeIndex marks a store whose like index is complete (built from
// the records, once, by a store of a version without one).
const metaLikeIndex = "like-index"

// SetLiked lists (on) or unlists the pair in the like index, with the
// time of the like.
func (b *Batch) SetLiked(item, user string, on bool, hlc crdt.HLC) {
	b.kbuf = appendKey(b.kbuf[:0], prefixLikers, item, user)
	if !on {
		_ = b.b.Delete(b.kbuf, nil)
		b.kbuf = appendKey(b.kbuf[:0], prefixLiked, user, item)
		_ = b.b.Delete(b.kbuf, nil)
		return
	}
	b.buf = binary.AppendUvarint(b.buf[:0], uint64(hlc))
	_ = b.b.Set(b.kbuf, b.buf, nil)
	b.kbuf = appendKey(b.kbuf[:0], prefixLiked, user, item)
	_ = b.b.Set(b.kbuf, b.buf, nil)
}

// Listed is one entry of a like list: the other id of the pair and the
// time of the like.
type Listed struct {
	ID  string
	HLC crdt.HLC
}

// Likers lists up to limit users who like item, in id order, after the
// user id after ("" from the first). more reports whether any follow.
func (s *Store) Likers(item, after string, limit int) (out []Listed, more bool, err error) {
	return s.listIndex(prefixLikers, item, after, limit)
}

// LikedItems lists up to limit items user likes, in id order, after the
// item id after ("" from the first).
func (s *Store) LikedItems(user, after string, limit int) (out []Listed, more bool, err error) {
	return s.listIndex(prefixLiked, user, after, limit)
}

func (s *Store) listIndex(prefix byte, id, after string, limit int) ([]Listed, bool, error) {
	if s.closed.Load() {
		return nil, false, ErrClosed
	}
	p := appendKey(nil, prefix, id, "")
	lower := p
	if after != "" {
		lower = append(appendKey(nil, prefix, id, after), 0)
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(p)})
	if err != nil {
		return nil, false, fmt.Errorf("list likes of %s: %w", id, err)
	}
	defer it.Close()
	var out []Listed
	for it.First(); it.Valid(); it.Next() {
		if len(out) == limit {
			return out, true, nil
		}
		h, n := binary.Uvarint(it.Value())
		if n <= 0 {
			return nil, false, fmt.Errorf("list likes of %s: bad entry %q", id, it.Key())
		}
		out = append(out, Listed{ID: string(it.Key()[len(p):]), HLC: crdt.HLC(h)})
	}
	return out, false, it.Error()
}

// BuildLikeIndex lists every liked pair of the stored records, once: a
// store written by a version without the index gets it at its first open.
// It reports how many pairs it listed.
func (s *Store) BuildLikeIndex() (int, error) {
	if _, ok, err := s.Meta(metaLikeIndex); err != nil || ok {
		return 0, err
	}
	n := 0
	b := s.NewBatch()
	defer func() { b.Close() }()
	flush := func() error {
		if err := b.Commit(); err != nil {
			return fmt.Errorf("build like index: %w", err)
		}
		b.Close()
		b = s.NewBatch()
		return nil
	}
	for seg := range Segments {
		var cursor []byte
		for {
			var err error
			cursor, err = s.ScanSegment(seg, cursor, 1<<20, SegmentVisitor{Record: func(item, user string, r crdt.Record) {
				if like, ok := r.(*crdt.LikeRecord); ok && like.Liked {
					b.SetLiked(item, user, true, like.HLC)
					n++
				}
			}})
			if err != nil {
				return n, fmt.Errorf("build like index: %w", err)
			}
			if b.Len() > 10000 {
				if err := flush(); err != nil {
					return n, err
				}
			}
			if cursor == nil {
				break
			}
		}
	}
	b.PutMeta(metaLikeIndex, []byte{1})
	return n, flush()
}

// DropLikeIndex deletes the like index and its completion mark: a store
// that stops keeping the index must rebuild it if it starts again.
func (s *Store) DropLikeIndex() error {
	if _, ok, err := s.Meta(metaLikeIndex); err != nil || !ok {
		return err
	}
	b := s.NewBatch()
	defer b.Close()
	for _, p := range []byte{prefixLikers, prefixLiked} {
		_ = b.b.DeleteRange([]byte{p, '/'}, prefixEnd([]byte{p, '/'}), nil)
	}
	_ = b.b.Delete(metaKey(metaLikeIndex), nil)
	if err := b.Commit(); err != nil {
		return fmt.Errorf("drop like index: %w", err)
	}
	return nil
}
