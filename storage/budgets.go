package storage

import (
	"bytes"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tally-dev/tally/crdt"
)

// BudgetInboxes reads every inbox vector of budget key (Budgets kind,
// named crdt.BudgetInboxName), by receiving replica. They share the key's
// anti-entropy segment (VectorSegment hashes the part before '~'), so this is
// one range scan.
func (s *Store) BudgetInboxes(key string) (map[string]crdt.Vector, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("read budget %s inboxes: %w", key, ErrClosed)
	}
	base := vectorPrefix(Budgets, key) // "b<B>/v/g/<key>/"
	base = append(base[:len(base)-1], crdt.BudgetInboxSep)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: base, UpperBound: prefixEnd(base)})
	if err != nil {
		return nil, fmt.Errorf("read budget %s inboxes: %w", key, err)
	}
	return readInboxes(it, key, base)
}

// Budget reads budget key whole, its main vector and every inbox vector
// (as BudgetInboxes), through one iterator, so both come from one
// point in time: no commit falls between them. Reading them apart mixes
// commits: a read of the main vector from before a commit that raised
// it and moved rights on (a grant during a handoff) with the inboxes from
// after it shows the replica with fewer rights than it ever had, even
// below zero. The main vector's keys ("<key>/<replica>") sort before the
// inboxes' ("<key>~<to>/<replica>"), with other budgets' keys ("<key>2/")
// between them, which the iterator skips with one seek.
func (s *Store) Budget(key string) (main crdt.Vector, inboxes map[string]crdt.Vector, err error) {
	if s.closed.Load() {
		return nil, nil, fmt.Errorf("read budget %s: %w", key, ErrClosed)
	}
	prefix := vectorPrefix(Budgets, key) // "b<B>/v/g/<key>/"
	base := append(prefix[:len(prefix)-1:len(prefix)-1], crdt.BudgetInboxSep)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(base)})
	if err != nil {
		return nil, nil, fmt.Errorf("read budget %s: %w", key, err)
	}
	for it.First(); it.Valid() && bytes.HasPrefix(it.Key(), prefix); it.Next() {
		replica := string(it.Key()[len(prefix):])
		e, err := crdt.DecodePN(it.Value())
		if err != nil {
			_ = it.Close()
			return nil, nil, fmt.Errorf("read budget %s entry %s: %w", key, replica, err)
		}
		main = main.Set(replica, e) // keys iterate in replica order: appends
	}
	if inboxes, err = readInboxes(it, key, base); err != nil {
		return nil, nil, err
	}
	return main, inboxes, nil
}

// readInboxes reads budget key's inbox vectors from it, whose bounds end
// with them, from base on; it closes it.
func readInboxes(it *pebble.Iterator, key string, base []byte) (map[string]crdt.Vector, error) {
	var out map[string]crdt.Vector
	for it.SeekGE(base); it.Valid(); it.Next() {
		rest := it.Key()[len(base):] // "<to>/<replica>"
		to, replica, ok := cutSlash(rest)
		if !ok {
			_ = it.Close()
			return nil, fmt.Errorf("read budget %s inboxes: malformed key %q", key, it.Key())
		}
		e, err := crdt.DecodePN(it.Value())
		if err != nil {
			_ = it.Close()
			return nil, fmt.Errorf("read budget %s inbox %s entry %s: %w", key, to, replica, err)
		}
		if out == nil {
			out = make(map[string]crdt.Vector)
		}
		out[to] = out[to].Set(replica, e)
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("read budget %s inboxes: %w", key, err)
	}
	return out, nil
}

func cutSlash(b []byte) (string, string, bool) {
	for i, c := range b {
		if c == '/' {
			return string(b[:i]), string(b[i+1:]), true
		}
	}
	return "", "", false
}
