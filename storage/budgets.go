package storage

import (
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
	var out map[string]crdt.Vector
	for it.First(); it.Valid(); it.Next() {
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
