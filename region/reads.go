// The reads of vectors, which Likes.Count and Counters.Get are.

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
