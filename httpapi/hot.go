package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/shard"
)

// Hot items (Config.Hot) are split into parts, each an item of its own
// (crdt.PartName) on its own shard. A like, unlike or like state of
// (item, user) goes to the user's part (shard.Hot.Name), always the same,
// so dedup stays one atomic commit at a holder of that part. A read of
// the whole item (its count, likers, window, series) reads every part,
// here for the parts whose shard this replica holds and from a holder
// for each other one: typed reads of the part (a count's, a page of
// likers, a window or series); one request per part not held here, all
// at once. A read of part k alone (?part=k) is read at a holder of its
// shard the same way.

// partParam is the query parameter naming one part of a split item: GET
// /v1/likes/{item}?part=k reads part k alone.
const partParam = "part"

// hotName is the item name user's like of item is stored under: the
// user's part of a split item, else item.
func (s *Server) hotName(item, user string) string {
	return s.cfg.Hot.Name(item, user)
}

// hotOps sends each like, unlike or toggle of a split item in ops to the user's
// part. A batch forwarded to the part's holders carries the events as
// they came, and the holder maps them alike.
func (s *Server) hotOps(ops []region.Op) {
	if len(s.cfg.Hot) == 0 {
		return
	}
	for i := range ops {
		if o := &ops[i]; o.Kind == region.OpLike || o.Kind == region.OpUnlike || o.Kind == region.OpToggle {
			o.Item = s.actionName(o.Item, o.User, o.Kind == region.OpUnlike)
		}
	}
}

// actionName is hotName for a like (unlike false) or unlike: the same
// part, but for the chaos build's bug split-user-two-parts.
func (s *Server) actionName(item, user string, unlike bool) string {
	if unlike && s.chaosSplitTwoParts() {
		if n := s.cfg.Hot.Parts(item); n > 0 {
			return crdt.PartName(item, (shard.PartOf(user, n)+1)%n)
		}
	}
	return s.hotName(item, user)
}

// queryPart parses ?part=k of a split item of n parts; ok false when the
// query names none.
func queryPart(r *http.Request, n int) (k int, ok bool, err error) {
	v, ok := r.URL.Query()[partParam]
	if !ok {
		return 0, false, nil
	}
	k, err = strconv.Atoi(v[0])
	if len(v) > 1 || err != nil || k < 0 || k >= n || strconv.Itoa(k) != v[0] {
		return 0, true, newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "part: want one part number 0..%d", n-1)
	}
	return k, true, nil
}

// partAnswers reads each of split item's n parts: with local (the JSON
// answer of part k) where this replica holds the part's shard, else with
// typed (the same answer, read at a holder as typed reads). answers[k]
// is part k's answer, nil for a part whose holders did not answer (or
// answered otherwise).
func (s *Server) partAnswers(item string, n int, local, typed func(k int) (any, error)) ([][]byte, error) {
	answers := make([][]byte, n)
	var wg sync.WaitGroup
	for k := range n {
		name := crdt.PartName(item, k)
		if s.holds(name) {
			v, err := local(k)
			if err != nil {
				return nil, fmt.Errorf("read part %d of %s: %w", k, item, err)
			}
			if answers[k], err = json.Marshal(v); err != nil {
				return nil, err
			}
			continue
		}
		wg.Go(func() {
			v, err := typed(k)
			if err != nil {
				return
			}
			answers[k], _ = json.Marshal(v) // nil, missing, if it does not marshal
		})
	}
	wg.Wait()
	return answers, nil
}

// partLikes is GET /v1/likes/{item} of part k of a split item of n parts,
// read here, or at a holder of the part's shard if elsewhere (its answer
// then names the holder on w).
func (s *Server) partLikes(w http.ResponseWriter, r *http.Request, item string, k, n int, elsewhere bool) (api.Likes, error) {
	name := crdt.PartName(item, k)
	rd, v, err := s.readLikesAt(w, r, name, elsewhere)
	if err != nil {
		return api.Likes{}, err
	}
	return api.Likes{
		Item: item, Count: rd.Value, Approx: v.approx, StalenessMs: v.staleness,
		Replicas: replicasJSON(rd.Vector), Unreconciled: rd.Unreconciled, Parts: n,
	}, nil
}

// getHotLikes is GET /v1/likes/{item} of a split item of n parts: part k
// alone with ?part=k, else the sum of every part.
func (s *Server) getHotLikes(w http.ResponseWriter, r *http.Request, item string, n int) error {
	k, one, err := queryPart(r, n)
	if err != nil {
		return err
	}
	if one {
		out, err := s.partLikes(w, r, item, k, n, s.readsElsewhere(r, crdt.PartName(item, k)))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	out, err := s.hotLikes(r, item, n)
	if err != nil {
		return err
	}
	if meta, _ := withMeta(r.URL.Query()); meta { // checked by getLikes
		out.Meta = s.typeMeta(item)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// hotLikes reads split item's count: every part's, summed; r is a read
// of the item (GET /v1/likes/{item}), each part not held here read at a
// holder of its shard, typed.
func (s *Server) hotLikes(r *http.Request, item string, n int) (api.Likes, error) {
	answers, err := s.partAnswers(item, n,
		func(k int) (any, error) { return s.partLikes(NewRecorder(), r, item, k, n, false) },
		func(k int) (any, error) { return s.partLikes(NewRecorder(), r, item, k, n, true) })
	if err != nil {
		return api.Likes{}, err
	}
	out := api.Likes{Item: item, Parts: n, Replicas: map[string]api.PN{}}
	for k, b := range answers {
		var p api.Likes
		if b == nil || json.Unmarshal(b, &p) != nil {
			out.MissingParts = append(out.MissingParts, k)
			continue
		}
		out.Count += p.Count
		out.Approx = out.Approx || p.Approx
		out.Unreconciled += p.Unreconciled
		for rep, pn := range p.Replicas {
			sum := out.Replicas[rep]
			out.Replicas[rep] = api.PN{P: sum.P + pn.P, N: sum.N + pn.N}
		}
		for rep, ms := range p.StalenessMs {
			if out.StalenessMs == nil {
				out.StalenessMs = map[string]int64{}
			}
			if old, ok := out.StalenessMs[rep]; !ok || old >= 0 && (ms < 0 || ms > old) {
				out.StalenessMs[rep] = ms // the oldest view of each peer
			}
		}
	}
	if len(out.MissingParts) > 0 {
		out.Partial, out.Approx = true, true
	}
	return out, nil
}

// hotFeed is a feed's entry of a split item.
type hotFeed struct {
	api.FeedItem
	approx, partial bool
}

// hotFeedItem is the feed's entry of split item for user: the item's
// count, summed over its parts as GET /v1/likes/{item} reads it, and the
// user's like state from the user's part (read at a holder, typed, when
// this replica does not hold it).
func (s *Server) hotFeedItem(r *http.Request, item, user string, n int) (hotFeed, error) {
	read := func(path string) (*http.Request, error) {
		q, err := http.NewRequestWithContext(r.Context(), http.MethodGet, path, nil)
		if err != nil {
			return nil, fmt.Errorf("feed of %s: %w", item, err)
		}
		q.Header, q.RemoteAddr = r.Header.Clone(), r.RemoteAddr
		q.Header.Del("Content-Type")
		q.Header.Del("Content-Length")
		return q, nil
	}
	q, err := read("/v1/likes/" + url.PathEscape(item))
	if err != nil {
		return hotFeed{}, err
	}
	likes, err := s.hotLikes(q, item, n)
	if err != nil {
		return hotFeed{}, err
	}
	out := hotFeed{FeedItem: api.FeedItem{Item: item, Count: likes.Count}, approx: likes.Approx, partial: likes.Partial}
	name := s.hotName(item, user)
	if s.holds(name) {
		st, err := s.rep.Likes().State(name, user)
		if err != nil {
			return hotFeed{}, err
		}
		out.Liked = st.Liked
		return out, nil
	}
	st, err := s.likeStateAt(NewRecorder(), r, name, user)
	if err != nil {
		out.approx, out.partial = true, true // not liked, as a feed's missing shard answers
		return out, nil
	}
	out.Liked = st.Liked
	return out, nil
}

// getHotLikers is GET /v1/likers/{item} of a split item of n parts: each
// user likes in one part, so a page is the first limit users of the
// parts' pages merged. A part that does not answer makes it 503: a list
// page cannot say what it leaves out.
func (s *Server) getHotLikers(w http.ResponseWriter, r *http.Request, item string, n int) error {
	limit, after, err := listQuery(r)
	if err != nil {
		return err
	}
	// page reads part k's page here, or at a holder of its shard if
	// elsewhere, typed (its answer then naming the holder on w).
	page := func(w http.ResponseWriter, k int, elsewhere bool) (api.Likers, error) {
		read := s.rep.Lists().Likers
		if elsewhere {
			read = func(name, after string, limit int) ([]region.Listed, bool, error) {
				return s.likersAt(w, r, name, after, limit)
			}
		}
		l, more, err := read(crdt.PartName(item, k), after, limit)
		if err != nil {
			return api.Likers{}, err
		}
		return api.Likers{Item: item, Users: listEntries(l), Next: nextCursor(l, more)}, nil
	}
	if k, one, err := queryPart(r, n); err != nil {
		return err
	} else if one {
		out, err := page(w, k, s.readsElsewhere(r, crdt.PartName(item, k)))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	answers, err := s.partAnswers(item, n,
		func(k int) (any, error) { return page(NewRecorder(), k, false) },
		func(k int) (any, error) { return page(NewRecorder(), k, true) })
	if err != nil {
		return err
	}
	out := api.Likers{Item: item, Users: []api.ListEntry{}}
	more := false
	for k, b := range answers {
		var p api.Likers
		if b == nil || json.Unmarshal(b, &p) != nil {
			return newError(http.StatusServiceUnavailable, frontdoor.CodeShardUnavailable,
				"no holder of part %d of %s answered in time", k, item)
		}
		out.Users = append(out.Users, p.Users...)
		more = more || p.Next != ""
	}
	sort.Slice(out.Users, func(i, j int) bool { return out.Users[i].ID < out.Users[j].ID })
	if len(out.Users) > limit {
		out.Users, more = out.Users[:limit], true
	}
	if more && len(out.Users) > 0 {
		out.Next = out.Users[len(out.Users)-1].ID
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// localPart runs one part's read here (serve, as a handler would) and
// returns its JSON answer.
func localPart(serve func(w http.ResponseWriter) error) (json.RawMessage, error) {
	rec := NewRecorder()
	if err := serve(rec); err != nil {
		return nil, err
	}
	return rec.Body(), nil
}

// getHotWindow is GET /v1/likes/{item}/window of a split item of n parts:
// part k alone with ?part=k, else the parts' windows summed.
func (s *Server) getHotWindow(w http.ResponseWriter, r *http.Request, item string, n int) error {
	read := func(w http.ResponseWriter, k int) error {
		return s.window(w, r, region.KindLikes, crdt.PartName(item, k))
	}
	if k, one, err := queryPart(r, n); err != nil {
		return err
	} else if one {
		return read(w, k)
	}
	// Each part here or at a holder of its shard, typed (readsElsewhere).
	part := func(k int) (any, error) {
		return localPart(func(w http.ResponseWriter) error { return read(w, k) })
	}
	answers, err := s.partAnswers(item, n, part, part)
	if err != nil {
		return err
	}
	var out api.Window
	first := true
	for k, b := range answers {
		var p api.Window
		if b == nil || json.Unmarshal(b, &p) != nil {
			out.MissingParts = append(out.MissingParts, k)
			continue
		}
		if first {
			out, first = p, false
			out.Replicas, out.Regions = map[string]api.PN{}, map[string]int64{}
			out.Value, out.Unreconciled = 0, 0
		}
		out.Value += p.Value
		out.Unreconciled += p.Unreconciled
		out.Approx, out.Final = out.Approx || p.Approx, out.Final && p.Final
		for rep, pn := range p.Replicas {
			sum := out.Replicas[rep]
			out.Replicas[rep] = api.PN{P: sum.P + pn.P, N: sum.N + pn.N}
		}
		for g, v := range p.Regions {
			out.Regions[g] += v
		}
	}
	if first {
		return newError(http.StatusServiceUnavailable, frontdoor.CodeShardUnavailable, "no holder of any part of %s answered in time", item)
	}
	out.Key, out.Parts = item, n
	if len(out.MissingParts) > 0 {
		out.Partial, out.Approx, out.Final = true, true, false
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getHotSeries is GET /v1/likes/{item}/series of a split item of n
// parts: part k alone with ?part=k, else the parts' series summed point
// by point.
func (s *Server) getHotSeries(w http.ResponseWriter, r *http.Request, item string, n int) error {
	read := func(w http.ResponseWriter, k int) error {
		return s.series(w, r, region.KindLikes, []string{crdt.PartName(item, k)})
	}
	if k, one, err := queryPart(r, n); err != nil {
		return err
	} else if one {
		return read(w, k)
	}
	// Each part here or at a holder of its shard, typed (readsElsewhere).
	part := func(k int) (any, error) {
		return localPart(func(w http.ResponseWriter) error { return read(w, k) })
	}
	answers, err := s.partAnswers(item, n, part, part)
	if err != nil {
		return err
	}
	var out api.Series
	var sum *api.SeriesOfKey
	for k, b := range answers {
		var p api.Series
		if b == nil || json.Unmarshal(b, &p) != nil || len(p.Series) != 1 || sum != nil && len(p.Times) != len(out.Times) {
			out.MissingParts = append(out.MissingParts, k)
			continue
		}
		if sum == nil {
			out = p
			sum = &out.Series[0]
			sum.Key = item
			continue
		}
		out.Approx, out.Final = out.Approx || p.Approx, out.Final && p.Final
		for i, v := range p.Series[0].Values {
			sum.Values[i] += v
		}
		for g, vs := range p.Series[0].Regions {
			if sum.Regions == nil {
				sum.Regions = map[string][]int64{}
			}
			if sum.Regions[g] == nil {
				sum.Regions[g] = make([]int64, len(vs))
			}
			for i, v := range vs {
				if i < len(sum.Regions[g]) {
					sum.Regions[g][i] += v
				}
			}
		}
	}
	if sum == nil {
		return newError(http.StatusServiceUnavailable, frontdoor.CodeShardUnavailable, "no holder of any part of %s answered in time", item)
	}
	out.Parts = n
	if len(out.MissingParts) > 0 {
		out.Partial, out.Approx, out.Final = true, true, false
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
