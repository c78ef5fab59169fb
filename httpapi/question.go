package httpapi

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
	tallyroute "github.com/tally-dev/tally/route"
	"github.com/tally-dev/tally/shard"
)

// Gathered reads, typed: a read of many keys in a sharded region is
// parsed and checked here, asked of every other replica as a
// tallyroute.Question (Shards.Ask), each answering a tallyroute.Reply
// from the shards it holds (AnswerQuestion), and merged and rendered
// here.

// Replied is one replica's reply to a gathered read.
type Replied struct {
	Replica string
	tallyroute.Reply
}

// ask asks q of the region's other replicas and returns their replies
// and the shards this replica and the replying ones hold (the shards
// the merged read covers).
func (s *Server) ask(ctx context.Context, q tallyroute.Question) ([]Replied, shard.Set) {
	m := s.cfg.Shards.Map()
	covered := m.Held(s.cfg.Replica.ID())
	q.Shards = shard.All().Minus(covered)
	replies := s.cfg.Shards.Ask(ctx, q)
	for _, r := range replies {
		covered = covered.Or(m.Held(r.Replica))
	}
	return replies, covered
}

// AnswerQuestion answers q, a gathered read another replica of the
// region asks, from this replica's shards. A read it cannot answer is a
// Reply with the error's code, which the asker leaves out.
func (s *Server) AnswerQuestion(ctx context.Context, q *tallyroute.Question) tallyroute.Reply {
	var (
		r   tallyroute.Reply
		err error
	)
	switch q.Asked {
	case tallyroute.AskTrending:
		r, err = s.trendingReply(q)
	case tallyroute.AskUserLikes:
		r, err = s.userLikesReply(q)
	case tallyroute.AskFeed:
		r, err = s.feedReply(q)
	case tallyroute.AskTypeTotal, tallyroute.AskTypeWindow:
		r, err = s.typeSumsReply(q)
	case tallyroute.AskHolding:
		r = s.holdingReply()
	default:
		err = fmt.Errorf("%w: gathered read %d", region.ErrInvalid, q.Asked)
	}
	if err != nil {
		return tallyroute.Reply{Code: replyCode(err), Msg: strings.TrimPrefix(err.Error(), "region: ")}
	}
	return r
}

// replyCode is the code a failed gathered read replies: its API code,
// else "internal".
func replyCode(err error) string {
	if ae := knownError(err); ae != nil {
		return ae.Code
	}
	return "internal"
}

// trendingReply is this replica's part of a gathered trending read: its
// top n keys, unmerged (a split item's parts apart), each approx if it
// is an approximate counter, and approx if any is, its list of split
// items was cut, or a peer is unheard-from.
func (s *Server) trendingReply(q *tallyroute.Question) (tallyroute.Reply, error) {
	kind := region.Kind(q.Family)
	if kind != region.KindLikes && kind != region.KindCounters {
		return tallyroute.Reply{}, fmt.Errorf("%w: family %d", region.ErrInvalid, q.Family)
	}
	if q.N < 1 || q.N > region.MaxTrendingN || q.SpanMs < 0 {
		return tallyroute.Reply{}, fmt.Errorf("%w: n %d, window %d ms", region.ErrInvalid, q.N, q.SpanMs)
	}
	tr, items, anyApprox, err := s.trending(kind, q.Key, time.Duration(q.SpanMs)*time.Millisecond, int(q.N), q.Zone, false)
	if err != nil {
		return tallyroute.Reply{}, err
	}
	out := tallyroute.Reply{Candidates: int64(tr.Candidates), Items: make([]tallyroute.ReplyItem, len(items))}
	for i, it := range items {
		out.Items[i] = tallyroute.ReplyItem{Key: it.Item, Count: it.Count, Approx: it.Approx}
	}
	out.Approx = anyApprox || s.cfg.Replication != nil && s.cfg.Replication.Stale()
	return out, nil
}

// trendingItems merges the replies of a gathered trending read into
// items, and returns how many keys they scored and whether any is
// approx; with meta, each item has its type's metadata.
func (s *Server) trendingItems(replies []Replied, items []api.TrendingItem, meta bool) ([]api.TrendingItem, int, bool) {
	candidates, approx := 0, false
	for _, r := range replies {
		for _, it := range r.Items {
			ti := api.TrendingItem{Item: it.Key, Count: it.Count, Approx: it.Approx}
			if meta {
				ti.Meta = s.typeMeta(it.Key)
			}
			items = append(items, ti)
		}
		candidates += int(r.Candidates)
		approx = approx || r.Approx
	}
	return items, candidates, approx
}

// userLikesReply is this replica's part of a gathered list of a user's
// likes: a page of the items it lists, by stored name (a part's, never
// named as its item here: the asker does), and whether it has more.
func (s *Server) userLikesReply(q *tallyroute.Question) (tallyroute.Reply, error) {
	if !crdt.ValidID(q.Key) || q.After != "" && !crdt.ValidItemName(q.After) || q.N < 1 || q.N > region.MaxListLimit {
		return tallyroute.Reply{}, fmt.Errorf("%w: a list of user %q's likes after %q, %d of them", region.ErrInvalid, q.Key, q.After, q.N)
	}
	l, more, err := s.rep.Lists().LikedItems(q.Key, q.After, int(q.N))
	if err != nil {
		return tallyroute.Reply{}, err
	}
	out := tallyroute.Reply{More: more, Items: make([]tallyroute.ReplyItem, len(l))}
	for i, e := range l {
		out.Items[i] = tallyroute.ReplyItem{Key: e.ID, HLC: uint64(e.HLC)}
	}
	return out, nil
}

// feedReply is this replica's part of a gathered feed: of the items
// asked, each one on an asked shard it holds, not split, its like count
// and whether the user likes it, and approx if any count may move.
func (s *Server) feedReply(q *tallyroute.Question) (tallyroute.Reply, error) {
	if !crdt.ValidID(q.Key) || len(q.Keys) > maxFeedItemsPost {
		return tallyroute.Reply{}, fmt.Errorf("%w: a feed of user %q, %d items", region.ErrInvalid, q.Key, len(q.Keys))
	}
	var out tallyroute.Reply
	for _, item := range q.Keys {
		if !crdt.ValidID(item) {
			return tallyroute.Reply{}, fmt.Errorf("%w: item %q", region.ErrInvalid, item)
		}
		if s.cfg.Hot.Parts(item) > 0 || !q.Shards.Has(shard.Of(item)) || !s.holds(item) {
			continue
		}
		it, approx, err := s.feedItem(item, q.Key)
		if err != nil {
			return tallyroute.Reply{}, err
		}
		out.Approx = out.Approx || approx
		out.Items = append(out.Items, tallyroute.ReplyItem{Key: item, Count: it.Count, Liked: it.Liked})
	}
	return out, nil
}

// typeSumsReply is this replica's part of a gathered type total or
// window: its sums per shard it holds of the type's keys, and for a
// window, the window it read (the asker's, unless its slots differ).
func (s *Server) typeSumsReply(q *tallyroute.Question) (tallyroute.Reply, error) {
	kind := region.Kind(q.Family)
	if kind != region.KindLikes && kind != region.KindCounters {
		return tallyroute.Reply{}, fmt.Errorf("%w: family %d", region.ErrInvalid, q.Family)
	}
	if _, ok, err := s.rep.Admin().Type(q.Key); err != nil {
		return tallyroute.Reply{}, err
	} else if !ok {
		return tallyroute.Reply{}, newError(http.StatusNotFound, frontdoor.CodeNotFound, "no event type %q is registered", q.Key)
	}
	var out tallyroute.Reply
	var sums map[int]region.TypeSum
	if q.Asked == tallyroute.AskTypeTotal {
		var err error
		if sums, err = s.rep.Admin().TypeTotal(kind, q.Key, s.typeShardOf()); err != nil {
			return tallyroute.Reply{}, fmt.Errorf("type total: %w", err)
		}
	} else {
		if q.ToMs <= q.FromMs || time.Duration(q.ToMs-q.FromMs)*time.Millisecond > maxLast {
			return tallyroute.Reply{}, newError(http.StatusBadRequest, frontdoor.CodeBadTime, "to must be after from, by at most %v", maxLast)
		}
		win, ws, err := s.rep.Admin().TypeWindow(kind, q.Key, q.FromMs, q.ToMs, s.typeShardOf())
		if err != nil {
			return tallyroute.Reply{}, windowErr(err)
		}
		sums = ws
		out.Window = &tallyroute.ReplyWindow{FromMs: win.From.UnixMilli(), ToMs: win.To.UnixMilli(), SlotMs: win.SlotWidth.Milliseconds(), Closed: win.Closed}
	}
	for sh, sum := range sums {
		rs := tallyroute.ReplyShard{Shard: sh, Keys: int64(sum.Keys), Unreconciled: int64(sum.Unreconciled), Approx: sum.Approx}
		for _, e := range sum.Vector {
			rs.Vector = append(rs.Vector, tallyroute.ReplyPN{Replica: e.Replica, P: e.P, N: e.N})
		}
		out.Shards = append(out.Shards, rs)
	}
	slices.SortFunc(out.Shards, func(a, b tallyroute.ReplyShard) int { return cmp.Compare(a.Shard, b.Shard) })
	return out, nil
}

// addTypeReplies adds the sums of the shards the replies hold to sums:
// each holder of a shard sums its keys alike; the first sum of a shard
// heard counts, this replica's own first.
func addTypeReplies(sums map[int]region.TypeSum, replies []Replied) {
	for _, r := range replies {
		for _, o := range r.Shards {
			if _, ok := sums[o.Shard]; ok {
				continue
			}
			var v crdt.Vector
			for _, e := range o.Vector {
				v = v.Set(e.Replica, crdt.PN{P: e.P, N: e.N})
			}
			sums[o.Shard] = region.TypeSum{Vector: v, Keys: int(o.Keys), Approx: o.Approx, Unreconciled: int(o.Unreconciled)}
		}
	}
}

// holdingReply is this replica's word on itself in the region's map, as
// GET /v1/shards shows it: its address, the map's revision it serves by,
// and its move's state; none if its map does not list it.
func (s *Server) holdingReply() tallyroute.Reply {
	if s.cfg.Shards == nil {
		return tallyroute.Reply{}
	}
	m := s.cfg.Shards.Map()
	if !slices.Contains(m.Replicas(), s.cfg.Replica.ID()) {
		return tallyroute.Reply{}
	}
	h := &tallyroute.ReplyHolding{URL: s.cfg.Shards.URL(), MapRevision: m.Revision}
	h.Synced, h.Released = s.cfg.Shards.MoveState()
	return tallyroute.Reply{Holding: h}
}
