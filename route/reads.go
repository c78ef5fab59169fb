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
	out := make([]Result, len(ops))
	for i := range ops {
		if err := readOne(rep, &ops[i], &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func readOne(rep *region.Replica, o *Op, r *Result) error {
	switch o.Kind {
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
	default:
		return fmt.Errorf("%w: operation kind %d is not a read", region.ErrInvalid, o.Kind)
	}
	return nil
}
