package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
	tallyroute "github.com/tally-dev/tally/route"
	"github.com/tally-dev/tally/shard"
)

// Reads of the like records: a user's like with its time, paginated liker
// and liked-item lists, and a feed of many items' counts for one user.

// defaultListLimit is a list page's size without ?limit=.
const defaultListLimit = 100

// maxFeedItems bounds the items of one feed read (GET: ?items=, POST: body).
const (
	maxFeedItemsGet  = 100
	maxFeedItemsPost = 1000
)

// hlcTime is the wall time of a stamp.
func hlcTime(h crdt.HLC) time.Time { return time.UnixMilli(h.WallMs()).UTC() }

// GET /v1/likes/{item}/{user}
func (s *Server) getLiked(w http.ResponseWriter, r *http.Request) error {
	ids, err := pathIDs(r, "item", "user")
	if err != nil {
		return err
	}
	st, err := s.likeState(w, r, s.hotName(ids[0], ids[1]), ids[1])
	if err != nil {
		return err
	}
	out := api.Liked{Item: ids[0], User: ids[1], Liked: st.Liked, Replica: st.Origin}
	if st.HLC != 0 {
		at := hlcTime(st.HLC)
		out.At = &at
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// listQuery parses ?limit= and ?after= of a list route.
func listQuery(r *http.Request) (limit int, after string, err error) {
	q := r.URL.Query()
	limit = defaultListLimit
	if v := q["limit"]; len(v) > 0 {
		n, err := strconv.Atoi(v[0])
		if len(v) > 1 || err != nil || n < 1 || n > region.MaxListLimit {
			return 0, "", newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "limit: want one whole number 1..%d", region.MaxListLimit)
		}
		limit = n
	}
	if v := q["after"]; len(v) > 0 {
		if len(v) > 1 || !crdt.ValidItemName(v[0]) { // a user's likes list pages by stored name: a part's too
			return 0, "", newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "after: want one id, the next cursor of the previous page")
		}
		after = v[0]
	}
	return limit, after, nil
}

func listEntries(l []region.Listed) []api.ListEntry {
	out := make([]api.ListEntry, len(l))
	for i, e := range l {
		out[i] = api.ListEntry{ID: e.ID, At: hlcTime(e.HLC)}
	}
	return out
}

func nextCursor(l []region.Listed, more bool) string {
	if !more || len(l) == 0 {
		return ""
	}
	return l[len(l)-1].ID
}

// list serves one page of a like list: the list of the path's variable
// id, read by page.
func (s *Server) list(w http.ResponseWriter, r *http.Request, id string,
	page func(id, after string, limit int) ([]region.Listed, bool, error),
	answer func(id string, entries []api.ListEntry, next string) any) error {
	v, err := pathID(r, id)
	if err != nil {
		return err
	}
	limit, after, err := listQuery(r)
	if err != nil {
		return err
	}
	l, more, err := page(v, after, limit)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, answer(v, listEntries(l), nextCursor(l, more)))
	return nil
}

// GET /v1/likers/{item}
func (s *Server) getLikers(w http.ResponseWriter, r *http.Request) error {
	if item, err := pathID(r, "item"); err == nil && s.cfg.Hot.Parts(item) > 0 {
		return s.getHotLikers(w, r, item, s.cfg.Hot.Parts(item))
	}
	page := s.rep.Lists().Likers
	if item, err := pathID(r, "item"); err == nil && s.readsElsewhere(r, item) {
		page = func(item, after string, limit int) ([]region.Listed, bool, error) {
			return s.likersAt(w, r, item, after, limit)
		}
	}
	return s.list(w, r, "item", page, func(item string, users []api.ListEntry, next string) any {
		return api.Likers{Item: item, Users: users, Next: next}
	})
}

// likeState reads user's like of name (an item, or a split item's part)
// here, or at a holder of its shard (readsElsewhere).
func (s *Server) likeState(w http.ResponseWriter, r *http.Request, name, user string) (region.LikeState, error) {
	if !s.readsElsewhere(r, name) {
		return s.rep.Likes().State(name, user)
	}
	return s.likeStateAt(w, r, name, user)
}

// likeStateAt reads user's like of name at a holder of its shard.
func (s *Server) likeStateAt(w http.ResponseWriter, r *http.Request, name, user string) (region.LikeState, error) {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	res, err := s.readAt(ctx, w, name, tallyroute.Op{Kind: tallyroute.OpLikedView, Key: name, User: user})
	if err != nil {
		return region.LikeState{}, err
	}
	if len(res.Detail.HLCs) != 1 {
		return region.LikeState{}, fmt.Errorf("the holder answered %d stamps of one like", len(res.Detail.HLCs))
	}
	return region.LikeState{Liked: res.Liked, HLC: crdt.HLC(res.Detail.HLCs[0]), Origin: res.Detail.Origin}, nil
}

// likersAt reads a page of item's likers at a holder of its shard, as
// this replica's Lists().Likers would.
func (s *Server) likersAt(w http.ResponseWriter, r *http.Request, item, after string, limit int) ([]region.Listed, bool, error) {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	res, err := s.readAt(ctx, w, item, tallyroute.Op{Kind: tallyroute.OpLikersView, Key: item, User: after, By: int64(limit)})
	if err != nil {
		return nil, false, err
	}
	if len(res.Detail.HLCs) != len(res.Users) {
		return nil, false, fmt.Errorf("the holder answered %d stamps for %d likers", len(res.Detail.HLCs), len(res.Users))
	}
	out := make([]region.Listed, len(res.Users))
	for i, u := range res.Users {
		out[i] = region.Listed{ID: u, HLC: crdt.HLC(res.Detail.HLCs[i])}
	}
	return out, res.More, nil
}

// GET /v1/users/{user}/likes. In a sharded region a user's likes are on
// many shards: each replica lists the page from its own, and the pages
// merge by item.
func (s *Server) getUserLikes(w http.ResponseWriter, r *http.Request) error {
	if !s.sharded() {
		return s.list(w, r, "user", s.rep.Lists().LikedItems, func(user string, items []api.ListEntry, next string) any {
			partsAsItems(items)
			return api.UserLikes{User: user, Items: items, Next: next}
		})
	}
	user, err := pathID(r, "user")
	if err != nil {
		return err
	}
	limit, after, err := listQuery(r)
	if err != nil {
		return err
	}
	l, more, err := s.rep.Lists().LikedItems(user, after, limit)
	if err != nil {
		return err
	}
	items := listEntries(l)
	replies, covered := s.ask(r.Context(), tallyroute.Question{Asked: tallyroute.AskUserLikes, Key: user, After: after, N: int64(limit)})
	for _, rp := range replies {
		for _, it := range rp.Items {
			items = append(items, api.ListEntry{ID: it.Key, At: hlcTime(crdt.HLC(it.HLC))})
		}
		more = more || rp.More
	}
	missing := shard.Count - covered.Len()
	slices.SortFunc(items, func(a, b api.ListEntry) int { return strings.Compare(a.ID, b.ID) })
	items = slices.CompactFunc(items, func(a, b api.ListEntry) bool { return a.ID == b.ID })
	out := api.UserLikes{User: user, Items: items, Partial: missing > 0, MissingShards: missing}
	if len(items) > limit {
		out.Items, more = items[:limit], true
	}
	if more && len(out.Items) > 0 {
		out.Next = out.Items[len(out.Items)-1].ID
	}
	partsAsItems(out.Items)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// partsAsItems names the item of each part of a split item a user likes
// (a user likes in one part only): a list shows items, never parts,
// while its cursor (Next, ?after=) stays the stored name.
func partsAsItems(items []api.ListEntry) {
	for i := range items {
		items[i].ID = crdt.ItemOf(items[i].ID)
	}
}

// feedRequest is POST /v1/feed's body.
type feedRequest struct {
	User  string   `json:"user"`
	Items []string `json:"items"`
}

// GET /v1/feed?user=U&items=a,b,c and POST /v1/feed {"user","items"}
func (s *Server) feed(w http.ResponseWriter, r *http.Request) error {
	var req feedRequest
	maxItems := maxFeedItemsGet
	if r.Method == http.MethodPost {
		maxItems = maxFeedItemsPost
		if err := s.decodeRequired(w, r, &req, `{"user":"...","items":["..."]}`); err != nil {
			return err
		}
	} else {
		q := r.URL.Query()
		if len(q["user"]) != 1 || len(q["items"]) != 1 {
			return newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "want ?user=ID&items=ID,ID,... (each once)")
		}
		req.User, req.Items = q.Get("user"), strings.Split(q.Get("items"), ",")
	}
	if !crdt.ValidID(req.User) {
		return newError(http.StatusBadRequest, frontdoor.CodeBadID, "user: want an id of 1-%d of [A-Za-z0-9_.:@-]", crdt.MaxIDLen)
	}
	if len(req.Items) == 0 || len(req.Items) > maxItems {
		return newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "items: want 1..%d ids", maxItems)
	}
	out := api.Feed{User: req.User, Items: make([]api.FeedItem, 0, len(req.Items))}
	var elsewhere []int // in a sharded region: the items of shards this replica does not hold
	for _, item := range req.Items {
		if !crdt.ValidID(item) {
			return newError(http.StatusBadRequest, frontdoor.CodeBadID, "item %q: want an id of 1-%d of [A-Za-z0-9_.:@-]", item, crdt.MaxIDLen)
		}
		if n := s.cfg.Hot.Parts(item); n > 0 {
			it, err := s.hotFeedItem(r, item, req.User, n) // hot.go
			if err != nil {
				return err
			}
			out.Approx = out.Approx || it.approx
			out.Partial = out.Partial || it.partial
			out.Items = append(out.Items, it.FeedItem)
			continue
		}
		if !s.holds(item) {
			elsewhere = append(elsewhere, len(out.Items))
			out.Items = append(out.Items, api.FeedItem{Item: item})
			continue
		}
		it, approx, err := s.feedItem(item, req.User)
		if err != nil {
			return err
		}
		out.Approx = out.Approx || approx
		out.Items = append(out.Items, it)
	}
	if len(elsewhere) > 0 {
		s.gatherFeed(r, req, &out, elsewhere)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// feedItem reads item's like count and whether user likes it here, and
// whether the count may move.
func (s *Server) feedItem(item, user string) (api.FeedItem, bool, error) {
	rd, err := s.rep.Likes().Count(item)
	if err != nil {
		return api.FeedItem{}, false, err
	}
	st, err := s.rep.Likes().State(item, user)
	if err != nil {
		return api.FeedItem{}, false, err
	}
	return api.FeedItem{Item: item, Count: rd.Value, Liked: st.Liked}, s.approx(rd, item), nil
}

// gatherFeed fills the feed's items of shards this replica does not hold
// (out.Items[i] for i in elsewhere) from the region's other replicas.
func (s *Server) gatherFeed(r *http.Request, req feedRequest, out *api.Feed, elsewhere []int) {
	q := tallyroute.Question{Asked: tallyroute.AskFeed, Key: req.User, Keys: make([]string, len(elsewhere))}
	for i, at := range elsewhere {
		q.Keys[i] = out.Items[at].Item
	}
	replies, _ := s.ask(r.Context(), q)
	got := map[string]api.FeedItem{}
	for _, rp := range replies {
		for _, it := range rp.Items {
			got[it.Key] = api.FeedItem{Item: it.Key, Count: it.Count, Liked: it.Liked}
		}
		out.Approx = out.Approx || rp.Approx
	}
	missing := shard.Set{}
	for _, i := range elsewhere {
		it, ok := got[out.Items[i].Item]
		if !ok {
			missing.Add(shard.Of(out.Items[i].Item))
			continue
		}
		out.Items[i] = it
	}
	if n := missing.Len(); n > 0 {
		out.Partial, out.MissingShards, out.Approx = true, out.MissingShards+n, true
	}
}
