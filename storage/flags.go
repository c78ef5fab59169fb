package storage

import (
	"fmt"

	"github.com/tally-dev/tally/crdt"
)

// Block flags (crdt.Flag): one register per user ever blocked or
// unblocked (registers.go).

// FlagSegment is the anti-entropy segment of a user's flag.
func FlagSegment(user string) int { return RegisterSegment(prefixFlag, user) }

// PutFlag writes user's flag, replacing old (the zero Flag if none). The
// store's in-memory copy follows when the batch commits.
func (b *Batch) PutFlag(user string, old, f crdt.Flag) {
	putRegister(b, b.s.flags, &b.flags, user, old, f)
}

// Flag returns user's committed flag (the zero Flag if it was never set).
// It reads memory only.
func (s *Store) Flag(user string) crdt.Flag {
	f, _ := s.flags.get(user)
	return f
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
	users, flags, more := s.flags.list(after, limit, func(f crdt.Flag) bool { return f.Value.Blocked || !blockedOnly })
	for i, u := range users {
		out = append(out, Flagged{u, flags[i]})
	}
	return out, more
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
