package region

import (
	"fmt"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// Lists is the replica's face for like lists: an item's likers and the
// items a user likes (Config.LikeLists).
type Lists struct{ r *Replica }

// Lists returns the replica's lists face.
func (r *Replica) Lists() Lists { return Lists{r} }

// MaxAllLikers bounds AllLikers: a set's members in one read, for a
// front door that answers a whole set at once (RESP's SMEMBERS); larger
// sets are read by page (Likers).
const MaxAllLikers = 10000

// AllLikers lists the users who like item in this replica's view, in id
// order, read from one view of the store (not page by page), up to max
// (1..MaxAllLikers) of them; more reports that the item has more likers
// than max, and then the list holds the first max.
func (l Lists) AllLikers(item string, max int) (users []storage.Listed, more bool, err error) {
	r := l.r
	if max < 1 || max > MaxAllLikers {
		return nil, false, fmt.Errorf("%w: max %d: want 1..%d", ErrInvalid, max, MaxAllLikers)
	}
	if err := r.checkList(item, "", 1); err != nil {
		return nil, false, err
	}
	return r.store.Likers(item, "", max)
}

// Likers lists up to limit users who like item in this replica's view,
// in id order, after the user id after ("" from the first); more reports
// whether any follow. Replicas whose records agree list the same.
func (l Lists) Likers(item, after string, limit int) ([]storage.Listed, bool, error) {
	r := l.r
	if err := r.checkList(crdt.ItemOf(item), after, limit); err != nil { // a part lists its likers too
		return nil, false, err
	}
	return r.store.Likers(item, after, limit)
}

// LikedItems lists up to limit items user likes, as Likers.
func (l Lists) LikedItems(user, after string, limit int) ([]storage.Listed, bool, error) {
	r := l.r
	if err := r.checkList(user, after, limit); err != nil {
		return nil, false, err
	}
	return r.store.LikedItems(user, after, limit)
}

// MaxListLimit bounds one page of Likers and LikedItems.
const MaxListLimit = 1000

func (r *Replica) checkList(id, after string, limit int) error {
	if !r.cfg.LikeLists {
		return ErrNoLists
	}
	if !crdt.ValidID(id) || after != "" && !crdt.ValidItemName(after) {
		return fmt.Errorf("%w: bad id", ErrInvalid)
	}
	if limit < 1 || limit > MaxListLimit {
		return fmt.Errorf("%w: limit %d: want 1..%d", ErrInvalid, limit, MaxListLimit)
	}
	return nil
}
