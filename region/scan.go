package region

import (
	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// ScanItems pages through the items of kind k (storage.Likes or
// storage.Counters) that have an all-time vector, committed, as
// storage.Store.ScanVectorsFrom does: from segment seg after item after,
// at most maxSegs segments, until fn returns false. It returns where the
// next page starts, next == storage.Segments at the end. A page costs a
// seek per segment it reads, so listing the keyspace by pages reads each
// key once; there is no count of keys kept, so counting them reads them
// all.
func (r *Replica) ScanItems(k storage.Kind, seg int, after string, maxSegs int, fn func(item string, v crdt.Vector) bool) (next int, nextAfter string, err error) {
	if err := r.Err(); err != nil {
		return seg, after, err
	}
	return r.store.ScanVectorsFrom(k, seg, after, maxSegs, fn)
}
