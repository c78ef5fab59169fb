package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
	tallyroute "github.com/tally-dev/tally/route"
	"github.com/tally-dev/tally/shard"
)

// uniquesRequest is the body of POST /v1/uniques/{key}: one id or many.
type uniquesRequest struct {
	IDs []string `json:"ids"`
	ID  *string  `json:"id"`
	// At (or Timestamp) is when the ids were seen by the client: they are
	// booked into the hourly and daily slots of that moment.
	At        json.RawMessage `json:"at"`
	Timestamp json.RawMessage `json:"timestamp"`
}

// POST /v1/uniques/{key} {"ids": ["alice", "bob"]} or {"id": "alice"}
func (s *Server) postUniques(w http.ResponseWriter, r *http.Request) error {
	key, err := pathID(r, "key")
	if err != nil {
		return err
	}
	var body uniquesRequest
	if err := s.decodeBody(w, r, &body); err != nil {
		if errors.Is(err, errEmptyBody) {
			return newError(http.StatusBadRequest, frontdoor.CodeMissingField, `give "ids": [...] or "id"`)
		}
		return err
	}
	ids := body.IDs
	switch {
	case body.ID != nil && ids != nil:
		return newError(http.StatusBadRequest, frontdoor.CodeBadRequest, `give "ids" or "id", not both`)
	case body.ID != nil:
		ids = []string{*body.ID}
	case len(ids) == 0:
		return newError(http.StatusBadRequest, frontdoor.CodeMissingField, `give "ids": [...] (1 to %d ids) or "id"`, region.MaxUniqueIDs)
	case len(ids) > region.MaxUniqueIDs:
		return newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "%d ids in one request; at most %d", len(ids), region.MaxUniqueIDs)
	}
	for _, id := range ids {
		if err := checkID("id", id); err != nil {
			return err
		}
	}
	at, err := eventTime(body.At, body.Timestamp)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	res, err := s.apply(ctx, w, r, region.Op{Kind: region.OpUniques, Item: key, IDs: ids, At: at})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.UniquesAdded{Key: key, IDs: len(ids), Changed: res.Changed})
	return nil
}

// GET /v1/uniques/{key}[?last=24h | from=&to=]
func (s *Server) getUniques(w http.ResponseWriter, r *http.Request) error {
	key, err := pathID(r, "key")
	if err != nil {
		return err
	}
	return s.uniques(w, r, []string{key})
}

// GET /v1/uniques?keys=a,b,c[&last=7d | from=&to=]: the distinct ids of
// the union of the keys.
func (s *Server) getUniquesUnion(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	list, err := one(q, "keys")
	if err != nil {
		return err
	}
	if list == "" {
		return newError(http.StatusBadRequest, frontdoor.CodeMissingField, "give keys=a,b,c (1 to %d keys)", region.MaxUniqueKeys)
	}
	keys, err := unionKeys(strings.Split(list, ","))
	if err != nil {
		return err
	}
	return s.uniques(w, r, keys)
}

// unionKeys checks the keys of a union and returns them sorted, each
// once.
func unionKeys(keys []string) ([]string, error) {
	if len(keys) > region.MaxUniqueKeys {
		return nil, newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "%d keys; at most %d", len(keys), region.MaxUniqueKeys)
	}
	for _, k := range keys {
		if err := checkID("key", k); err != nil {
			return nil, err
		}
	}
	keys = slices.Clone(keys)
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

func (s *Server) uniques(w http.ResponseWriter, r *http.Request, keys []string) error {
	q := r.URL.Query()
	fromMs, toMs, windowed, err := s.uniqueRange(q)
	if err != nil {
		return err
	}
	byRegion, err := byRegionParam(q)
	if err != nil {
		return err
	}
	out, err := s.countUniques(r.Context(), w, tallyroute.UniqueQuery{Keys: keys, Windowed: windowed, FromMs: fromMs, ToMs: toMs, ByRegion: byRegion})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// countUniques answers q, its keys checked, sorted and once each: read
// here, at a holder of their one shard, or, over several shards, here
// and at a holder of each other shard, merged (unionUniques). The answer
// names who served it in w's header (ServedByHeader).
func (s *Server) countUniques(ctx context.Context, w http.ResponseWriter, q tallyroute.UniqueQuery) (api.Uniques, error) {
	var (
		u       tallyroute.Uniques
		missing int // shards of keys nobody answered for
		err     error
	)
	switch sh, elsewhere := s.uniquesElsewhere(q.Keys); {
	case elsewhere:
		// Keys of one shard another replica holds: a holder reads them,
		// sent typed, and its answer is rendered here.
		u, err = s.uniquesAt(ctx, w, sh, q)
	case s.cfg.Shards == nil || !slices.ContainsFunc(q.Keys, func(k string) bool { return !s.holds(k) }):
		var rd region.UniqueRead
		if rd, err = s.readUniques(q.Keys, q.FromMs, q.ToMs, q.Windowed); err == nil {
			u = tallyroute.CountUniques(rd, q, s.regionOf(), slices.ContainsFunc(q.Keys, s.staleFor))
		}
	default:
		u, missing, err = s.unionUniques(ctx, q)
	}
	if err != nil {
		return api.Uniques{}, windowErr(err)
	}
	return renderUniques(q.Keys, &u, missing), nil
}

// uniquesElsewhere reports whether keys, read from a client in a sharded
// region, are all of one shard, sh, that this replica does not hold: a
// holder of sh reads them (uniquesAt).
func (s *Server) uniquesElsewhere(keys []string) (sh int, ok bool) {
	if s.cfg.Shards == nil {
		return 0, false
	}
	sh = shard.Of(keys[0])
	for _, k := range keys {
		if shard.Of(k) != sh {
			return 0, false
		}
	}
	return sh, !s.cfg.Shards.Holds(sh)
}

// uniquesAt reads q, of keys on shard sh, at a holder of sh
// (Shards.Uniques): nothing of the request but the read leaves, and the
// answer names who served it (ServedByHeader).
func (s *Server) uniquesAt(ctx context.Context, w http.ResponseWriter, sh int, q tallyroute.UniqueQuery) (tallyroute.Uniques, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	u, by, err := s.cfg.Shards.Uniques(ctx, sh, q)
	if err != nil {
		return tallyroute.Uniques{}, s.holderError(w, sh, by, err)
	}
	w.Header().Set(ServedByHeader, by)
	return u, nil
}

// renderUniques is the API's answer of u, a unique count of keys read
// here or at a holder, missing the keys of missing shards.
func renderUniques(keys []string, u *tallyroute.Uniques, missing int) api.Uniques {
	est := math.Round(u.Estimate)
	out := api.Uniques{Keys: keys, Estimate: int64(est), RelStdError: crdt.HLLStdError,
		StdError: math.Round(est*crdt.HLLStdError*10) / 10, Approx: true, Replicas: u.Replicas, Regions: []string{}}
	if out.Replicas == nil {
		out.Replicas = []string{} // a key nobody added to: [], as the API documents, not null
	}
	out.Stale = u.Stale
	out.Partial, out.MissingShards = missing > 0, missing
	out.Regions = append(out.Regions, u.Regions...)
	slices.Sort(out.Regions)
	out.Regions = slices.Compact(out.Regions)
	out.ByRegion = u.ByRegion
	if u.Windowed {
		from, to := u.From.UTC(), u.To.UTC()
		out.From, out.To, out.SlotWidth = &from, &to, u.SlotWidth.String()
		final := u.Closed && !out.Stale
		out.Final = &final
	}
	return out
}

// uniqueRange reads last= or from=&to= (to defaults to now); windowed is
// false if neither is given (the all-time count).
func (s *Server) uniqueRange(q url.Values) (fromMs, toMs int64, windowed bool, err error) {
	last, from, to, err := rangeParams(q)
	switch {
	case err != nil:
		return 0, 0, false, err
	case last == "" && from == "" && to == "":
		return 0, 0, false, nil
	case last != "":
		d, err := parseSpan("last", last)
		if err != nil {
			return 0, 0, false, err
		}
		fromMs, toMs, err := s.rep.Uniques().Range(d)
		return fromMs, toMs, true, windowErr(err)
	case from == "":
		return 0, 0, false, newError(http.StatusBadRequest, frontdoor.CodeMissingField, "give last (e.g. last=24h) or from (and to)")
	}
	fromMs, toMs, err = s.fromTo(from, to)
	return fromMs, toMs, err == nil, err
}

// readUniques reads the keys this replica holds (every key, unsharded).
func (s *Server) readUniques(keys []string, fromMs, toMs int64, windowed bool) (region.UniqueRead, error) {
	held := slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return !s.holds(k) })
	if len(held) == 0 { // a gathered read of keys all held elsewhere
		return region.UniqueRead{Sketch: new(crdt.HLL), ByReplica: map[string]*crdt.HLL{}}, nil
	}
	if windowed {
		return s.rep.Uniques().Window(held, fromMs, toMs)
	}
	return s.rep.Uniques().Read(held)
}

// unionUniques is q, a union of keys on several shards not all held
// here: the keys this replica holds read here, and each other shard's
// keys read at a holder of it, sent typed with each replica's sketch
// (tallyroute.OpUniqueRead), all asked at once and merged here; missing
// counts the shards no holder answered for in time. A holder's failed
// read fails the union, as this replica's own would.
func (s *Server) unionUniques(ctx context.Context, q tallyroute.UniqueQuery) (tallyroute.Uniques, int, error) {
	rd, err := s.readUniques(q.Keys, q.FromMs, q.ToMs, q.Windowed)
	if err != nil {
		return tallyroute.Uniques{}, 0, err
	}
	byShard := map[int][]string{} // shards held elsewhere -> their keys, sorted as q's
	for _, k := range q.Keys {
		if !s.holds(k) {
			byShard[shard.Of(k)] = append(byShard[shard.Of(k)], k)
		}
	}
	type part struct {
		sh  int
		u   tallyroute.Uniques
		err error
	}
	parts := make([]*part, 0, len(byShard))
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for sh, keys := range byShard {
		p := &part{sh: sh}
		parts = append(parts, p)
		pq := tallyroute.UniqueQuery{Keys: keys, Windowed: q.Windowed, FromMs: q.FromMs, ToMs: q.ToMs, Sketches: true}
		wg.Go(func() { p.u, _, p.err = s.cfg.Shards.Uniques(ctx, sh, pq) })
	}
	wg.Wait()
	slices.SortFunc(parts, func(a, b *part) int { return a.sh - b.sh })
	missing := 0
	stale := slices.ContainsFunc(q.Keys, s.staleFor)
	regionOf := map[string]string{}
	for _, p := range parts {
		switch {
		case errors.Is(p.err, ErrNoHolder), errors.Is(p.err, context.DeadlineExceeded):
			missing++ // left out: the union says partial
			continue
		case p.err != nil:
			return tallyroute.Uniques{}, 0, p.err // the holder's error, as this replica's own would read
		case len(p.u.Sketches) != len(p.u.Replicas):
			return tallyroute.Uniques{}, 0, fmt.Errorf("the union's keys of shard %d: %d sketches for %d replicas", p.sh, len(p.u.Sketches), len(p.u.Replicas))
		}
		for i, id := range p.u.Replicas {
			rd.Sketch.Merge(p.u.Sketches[i])
			if rd.ByReplica[id] == nil {
				rd.ByReplica[id] = new(crdt.HLL)
			}
			rd.ByReplica[id].Merge(p.u.Sketches[i])
			regionOf[id] = p.u.Regions[i]
		}
		if q.Windowed && rd.SlotWidth == 0 {
			rd.From, rd.To, rd.SlotWidth, rd.Closed = p.u.From, p.u.To, p.u.SlotWidth, p.u.Closed
		}
		stale = stale || p.u.Stale
	}
	maps.Copy(regionOf, s.regionOf()) // this replica's word on its peers first, as for its own keys
	rd.Estimate = rd.Sketch.Estimate()
	return tallyroute.CountUniques(rd, q, regionOf, stale), missing, nil
}

// UniquesUnion is GET /v1/uniques?keys=a,b,c for another front door of this
// replica that authenticated and rate-limited its client already (RESP's
// PFCOUNT over keys of several shards): the same read (countUniques),
// its keys of shards held elsewhere read at their holders, sent typed.
func (s *Server) UniquesUnion(ctx context.Context, keys []string) (api.Uniques, error) {
	keys, err := unionKeys(keys)
	if err != nil {
		return api.Uniques{}, err
	}
	return s.countUniques(ctx, NewRecorder(), tallyroute.UniqueQuery{Keys: keys})
}
