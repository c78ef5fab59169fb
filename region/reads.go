// The reads of counts and likes: vectors, a user's like, like lists and
// records.

package region

import (
	"fmt"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// Read is a vector read.
type Read struct {
	Value  int64
	Vector crdt.Vector
	// Unreconciled counts like records of the item (keyed records of the
	// counter) whose excess is not yet zero in this replica's view: the
	// count may still move.
	Unreconciled int
	// ApproxError is the relative error target of an approximate counter
	// (Config.Approx), 0 for an exact one and for likes. CounterStd turns
	// it and Vector into a bound on the value's standard deviation.
	ApproxError float64
}

// After a storage failure reads are refused too: the failed commit may or
// may not be in the store (Pebble may have applied it before its WAL sync
// failed), so what a read would see is not known to be durable. Clients
// go to another replica until this one restarts.
func (r *Replica) read(kind storage.Kind, item string) (Read, error) {
	if !storage.ValidItem(kind, item) {
		return Read{}, fmt.Errorf("%w: bad id %q", ErrInvalid, item)
	}
	if err := r.Err(); err != nil {
		return Read{}, err
	}
	v, ok := r.cache.get(vkey{kind, item})
	if !ok {
		var err error
		if v, err = r.store.Vector(kind, item); err != nil {
			return Read{}, err
		}
	}
	r.umu.RLock()
	u := r.unreconciled[vkey{kind, item}]
	r.umu.RUnlock()
	rd := Read{Value: v.Value(), Vector: v, Unreconciled: u}
	if kind == storage.Counters {
		rd.ApproxError = r.approx.errorOf(item)
	}
	return rd, nil
}

// LikeState is a user's like of an item as this replica sees it.
type LikeState struct {
	Liked bool
	// HLC and Origin are the winning like or unlike's stamp and the
	// replica that accepted it (zero if the user never liked the item).
	HLC    crdt.HLC
	Origin string
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
