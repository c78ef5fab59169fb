package storage

import (
	"fmt"
	"sort"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/shard"
)

// Block flags (crdt.Flag): one per user ever blocked or unblocked, under
// b<B>/f/<user> in the anti-entropy segment FlagSegment(user), so the
// digests and pages cover them like any replicated key. They are few (an
// admin sets them), so the store also keeps every committed flag in
// memory: the writer asks for a user's flag on every like, and a Pebble
// lookup there would cost more than the like.
const prefixFlag = 'f'

// FlagSegment is the anti-entropy segment of a user's flag: one of the
// global shard's, since every replica holds every flag (a user's likes may
// be on any shard).
func FlagSegment(user string) int {
	return shard.Global*SegmentsPerShard + int(fnv32a(fnv32a(fnv32Offset, "f/"), user)%SegmentsPerShard)
}

func appendFlagKey(dst []byte, user string) []byte {
	dst = appendSegmentPrefix(dst, FlagSegment(user))
	dst = append(dst, prefixFlag, '/')
	return append(dst, user...)
}

// PutFlag writes user's flag, replacing old (the zero Flag if none). The
// store's in-memory copy follows when the batch commits.
func (b *Batch) PutFlag(user string, old, f crdt.Flag) {
	b.kbuf = appendFlagKey(b.kbuf[:0], user)
	var oldb []byte
	if !old.IsZero() {
		b.obuf = crdt.AppendFlag(b.obuf[:0], old)
		oldb = b.obuf
	}
	b.buf = crdt.AppendFlag(b.buf[:0], f)
	b.digest(b.kbuf, oldb, b.buf)
	_ = b.b.Set(b.kbuf, b.buf, nil)
	if b.flags == nil {
		b.flags = make(map[string]crdt.Flag)
	}
	b.flags[user] = f
}

// Flag returns user's committed flag (the zero Flag if it was never set).
// It reads memory only.
func (s *Store) Flag(user string) crdt.Flag {
	if s.nflags.Load() == 0 { // the common case: nobody was ever blocked
		return crdt.Flag{}
	}
	s.fmu.RLock()
	defer s.fmu.RUnlock()
	return s.flags[user]
}

// Flagged is one user's flag, as Flags lists it.
type Flagged struct {
	User string
	Flag crdt.Flag
}

// Flags lists up to limit committed flags in user order, after the user
// id after ("" from the first), of blocked users only if blockedOnly.
// more reports whether any follow.
func (s *Store) Flags(after string, limit int, blockedOnly bool) (out []Flagged, more bool) {
	s.fmu.RLock()
	for u, f := range s.flags {
		if u > after && (f.Blocked || !blockedOnly) {
			out = append(out, Flagged{u, f})
		}
	}
	s.fmu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].User < out[j].User })
	if len(out) > limit {
		return out[:limit], true
	}
	return out, false
}

// loadFlag takes a stored flag into memory (the open-time scan).
func (s *Store) loadFlag(key, val []byte) error {
	f, err := crdt.DecodeFlag(val)
	if err != nil {
		return fmt.Errorf("flag %q: %w", key, err)
	}
	s.flags[string(key[7:])] = f // "b<B>/f/<user>"
	s.nflags.Store(int64(len(s.flags)))
	return nil
}

// commitFlags publishes a committed batch's flags to memory.
func (b *Batch) commitFlags() {
	if len(b.flags) == 0 {
		return
	}
	b.s.fmu.Lock()
	for u, f := range b.flags {
		b.s.flags[u] = f
	}
	b.s.nflags.Store(int64(len(b.s.flags)))
	b.s.fmu.Unlock()
}

// LikeRecordsOfUser calls fn with every like record of user, by a scan of
// every segment: the slow way to find them, for a store without the like
// index.
func (s *Store) LikeRecordsOfUser(user string, fn func(item string, r *crdt.LikeRecord)) error {
	for seg := range Segments {
		var cursor []byte
		for {
			var err error
			cursor, err = s.ScanSegment(seg, cursor, 1<<20, SegmentVisitor{Record: func(item, u string, r crdt.Record) {
				if like, ok := r.(*crdt.LikeRecord); ok && u == user {
					fn(item, like)
				}
			}})
			if err != nil {
				return fmt.Errorf("like records of %s: %w", user, err)
			}
			if cursor == nil {
				break
			}
		}
	}
	return nil
}
