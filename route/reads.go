package route

import (
	"fmt"
	"math"

	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

// Read answers reads (OpGet and the kinds after it) from rep's view, in
// order: what a holder answers a request of reads, and what an entry
// replica that holds their shard answers itself, so a front door renders
// the same results wherever they were read. The first read that fails
// fails them all, with the replica's error as it is (a front door
// answers it as it would the replica's own read).
func Read(rep *region.Replica, ops []Op) ([]Result, error) {
	return ReadFrom(Source{Replica: rep}, ops)
}

// Staleness is a replica's word on how old its view of the peers holding
// a key's shard is (its replication's; httpapi.Replication has the same
// two methods).
type Staleness interface {
	// StaleFor says whether a peer holding key's shard is unheard-from
	// past its timeout (or recovery is not finished).
	StaleFor(key string) bool
	// StalenessFor maps each peer holding key's shard to the ms since it
	// was last heard from (-1: never).
	StalenessFor(key string) map[string]int64
}

// Source is what reads are answered from: a replica, and its
// replication's staleness for the view reads' Detail and its gathering of
// a like's history (nil: none, a replica without replication).
type Source struct {
	Replica   *region.Replica
	Staleness Staleness
	Historian Historian
}

// ReadFrom is Read from src, the view reads (OpCounterView and after)
// with their Detail.
func ReadFrom(src Source, ops []Op) ([]Result, error) {
	out := make([]Result, len(ops))
	for i := range ops {
		if err := readOne(src, &ops[i], &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// staleness fills d's Stale and Staleness for key from src.
func (src Source) staleness(d *Detail, key string) {
	if src.Staleness == nil {
		return
	}
	d.Stale = src.Staleness.StaleFor(key)
	d.Staleness = src.Staleness.StalenessFor(key)
	if len(d.Staleness) > MaxList {
		d.Staleness = nil // never so many peers; the decoder would refuse it
	}
}

// vectorDetail is a view read's Detail of rd, read from key.
func (src Source) vectorDetail(rd region.Read, key string) *Detail {
	d := &Detail{Vector: rd.Vector, Unreconciled: int64(rd.Unreconciled), ApproxError: rd.ApproxError}
	src.staleness(d, key)
	return d
}

func readOne(src Source, o *Op, r *Result) error {
	rep := src.Replica
	switch o.Kind {
	case OpCounterView:
		rd, err := rep.Counters().Get(o.Key)
		if err != nil {
			return err
		}
		r.Value, r.Found, r.Detail = rd.Value, len(rd.Vector) > 0, src.vectorDetail(rd, o.Key)
	case OpLikesView:
		rd, err := rep.Likes().Count(o.Key)
		if err != nil {
			return err
		}
		r.Value, r.Detail = rd.Value, src.vectorDetail(rd, o.Key)
	case OpLikedView:
		st, err := rep.Likes().State(o.Key, o.User)
		if err != nil {
			return err
		}
		r.Liked, r.Detail = st.Liked, &Detail{Origin: st.Origin, HLCs: []uint64{uint64(st.HLC)}}
	case OpBudgetView:
		rd, err := rep.Budgets().Get(o.Key)
		if err != nil {
			return err
		}
		r.Value, r.Rights = rd.Remaining, rd.LocalRights
		r.Detail = &Detail{Granted: rd.Granted, Spent: rd.Spent, Rights: rd.Rights, Unreconciled: int64(rd.Unreconciled), Origin: rep.ID()}
		if len(rd.Rights) > MaxList {
			return fmt.Errorf("%w: budget %s has rights at %d replicas", region.ErrInvalid, o.Key, len(rd.Rights))
		}
	case OpLikersView:
		page, more, err := rep.Lists().Likers(o.Key, o.User, int(min(max(o.By, 0), math.MaxInt32)))
		if err != nil {
			return err
		}
		r.More, r.Detail = more, &Detail{}
		for _, u := range page {
			r.Users = append(r.Users, u.ID)
			r.Detail.HLCs = append(r.Detail.HLCs, uint64(u.HLC))
		}
	case OpGet:
		rd, err := rep.Counters().Get(o.Key)
		if err != nil {
			return err
		}
		r.Value, r.Found = rd.Value, len(rd.Vector) > 0
	case OpUniqueCount:
		if len(o.List) == 0 {
			return fmt.Errorf("%w: a unique count of no keys", region.ErrInvalid)
		}
		rd, err := rep.Uniques().Read(o.List)
		if err != nil {
			return err
		}
		r.Value = int64(math.Round(rd.Estimate))
	case OpLiked:
		liked, err := rep.Likes().Liked(o.Key, o.User)
		if err != nil {
			return err
		}
		r.Liked = liked
	case OpLikeCount:
		rd, err := rep.Likes().Count(o.Key)
		if err != nil {
			return err
		}
		r.Value = rd.Value
	case OpLikers, OpAllLikers:
		var err error
		var page []storage.Listed
		if o.Kind == OpLikers {
			page, r.More, err = rep.Lists().Likers(o.Key, o.User, int(min(max(o.By, 0), math.MaxInt32)))
		} else {
			page, r.More, err = rep.Lists().AllLikers(o.Key, int(min(max(o.By, 0), math.MaxInt32)))
		}
		if err != nil {
			return err
		}
		for _, u := range page {
			r.Users = append(r.Users, u.ID)
		}
	case OpHistory:
		return fmt.Errorf("%w: a like's history is read alone (ReadHistory)", region.ErrInvalid)
	case OpUniqueRead:
		return fmt.Errorf("%w: a unique count's read is alone (ReadUniques)", region.ErrInvalid)
	default:
		return fmt.Errorf("%w: operation kind %d is not a read", region.ErrInvalid, o.Kind)
	}
	return nil
}
