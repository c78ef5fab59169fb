package region

import (
	"fmt"

	"github.com/tally-dev/tally/storage"
)

// MaxAllLikers bounds AllLikers: a set's members in one read, for a
// front door that answers a whole set at once (RESP's SMEMBERS); larger
// sets are read by page (Likers).
const MaxAllLikers = 10000

// AllLikers lists the users who like item in this replica's view, in id
// order, read from one view of the store (not page by page), up to max
// (1..MaxAllLikers) of them; more reports that the item has more likers
// than max, and then the list holds the first max.
func (r *Replica) AllLikers(item string, max int) (users []storage.Listed, more bool, err error) {
	if max < 1 || max > MaxAllLikers {
		return nil, false, fmt.Errorf("%w: max %d: want 1..%d", ErrInvalid, max, MaxAllLikers)
	}
	if err := r.checkList(item, "", 1); err != nil {
		return nil, false, err
	}
	return r.store.Likers(item, "", max)
}
