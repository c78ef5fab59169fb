package httpapi

import (
	"context"
	"encoding/binary"
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
	"time"

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
	keys := strings.Split(list, ",")
	if len(keys) > region.MaxUniqueKeys {
		return newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "%d keys; at most %d", len(keys), region.MaxUniqueKeys)
	}
	for _, k := range keys {
		if err := checkID("key", k); err != nil {
			return err
		}
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	return s.uniques(w, r, keys)
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
	uq := tallyroute.UniqueQuery{Keys: keys, Windowed: windowed, FromMs: fromMs, ToMs: toMs, ByRegion: byRegion}
	if gathered(r) {
		rd, err := s.readUniques(keys, fromMs, toMs, windowed)
		if err != nil {
			return windowErr(err)
		}
		return writeUniquesPart(w, rd)
	}
	var u tallyroute.Uniques
	var missing int // shards of keys nobody answered for
	switch sh, elsewhere := s.uniquesElsewhere(keys); {
	case elsewhere:
		// Keys of one shard another replica holds: a holder reads them,
		// sent typed, and its answer is rendered here.
		u, err = s.uniquesAt(r.Context(), w, sh, uq)
	case s.cfg.Shards == nil || !slices.ContainsFunc(keys, func(k string) bool { return !s.holds(k) }):
		var rd region.UniqueRead
		if rd, err = s.readUniques(keys, fromMs, toMs, windowed); err == nil {
			u = tallyroute.CountUniques(rd, uq, s.regionOf(), slices.ContainsFunc(keys, s.staleFor))
		}
	default:
		u, missing, err = s.unionUniques(r.Context(), uq)
	}
	if err != nil {
		return windowErr(err)
	}
	writeJSON(w, http.StatusOK, renderUniques(keys, &u, missing))
	return nil
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

// uniquesPart is a replica's answer to a union gathered from its region
// (route.KindGather) by a replica of an earlier release: for the asked
// keys it holds, each writer's sketch (the union of that writer's
// sketches of those keys) as HLL pages. It passes only between the
// replicas of a region. This release asks a holder of each shard instead
// (unionUniques) and only answers it, until KindGather goes.
type uniquesPart struct {
	Keys      []string          `json:"keys"`
	Sketches  map[string][]byte `json:"sketches"`
	From      time.Time         `json:"from"`
	To        time.Time         `json:"to"`
	SlotWidth time.Duration     `json:"slot_width"`
	Closed    bool              `json:"closed"`
}

func writeUniquesPart(w http.ResponseWriter, rd region.UniqueRead) error {
	part := uniquesPart{Sketches: map[string][]byte{}, From: rd.From, To: rd.To, SlotWidth: rd.SlotWidth, Closed: rd.Closed}
	for id, h := range rd.ByReplica {
		part.Sketches[id] = appendHLL(nil, h)
	}
	writeJSON(w, http.StatusOK, part)
	return nil
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

// appendHLL writes h's nonzero pages, each as its number and its page
// encoding (crdt.AppendHLLPage, which carries its own length).
func appendHLL(dst []byte, h *crdt.HLL) []byte {
	for i := range crdt.HLLPages {
		if p := h.Page(i); !p.IsZero() {
			dst = binary.AppendUvarint(dst, uint64(i))
			enc := crdt.AppendHLLPage(nil, p)
			dst = binary.AppendUvarint(dst, uint64(len(enc)))
			dst = append(dst, enc...)
		}
	}
	return dst
}

// decodeHLL reads what appendHLL writes.
func decodeHLL(b []byte) (*crdt.HLL, error) {
	h := new(crdt.HLL)
	for len(b) > 0 {
		i, n := binary.Uvarint(b)
		if n <= 0 || i >= crdt.HLLPages {
			return nil, fmt.Errorf("sketch part: bad page number")
		}
		b = b[n:]
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return nil, fmt.Errorf("sketch part: bad page length")
		}
		b = b[n:]
		var p crdt.HLLPage
		if err := crdt.DecodeHLLPage(b[:l], &p); err != nil {
			return nil, fmt.Errorf("sketch part: %w", err)
		}
		h.MergePage(int(i), &p)
		b = b[l:]
	}
	return h, nil
}

// UniquesUnion is GET /v1/uniques?keys=a,b,c for another front door of this
// replica that authenticated and rate-limited its client already (RESP's
// PFCOUNT over keys of several shards): the same read, served in this
// process, its keys of shards held elsewhere read at their holders, sent
// typed (uniquesAt, unionUniques).
func (s *Server) UniquesUnion(ctx context.Context, keys []string) (api.Uniques, error) {
	q := url.Values{"keys": {strings.Join(keys, ",")}}
	r, err := http.NewRequestWithContext(WithForwarded(ctx), http.MethodGet, "/v1/uniques?"+q.Encode(), nil)
	if err != nil {
		return api.Uniques{}, err
	}
	rec := NewRecorder()
	s.ServeHTTP(rec, r)
	if rec.Status() != http.StatusOK {
		var e api.Error
		if json.Unmarshal(rec.Body(), &e) != nil || e.Code == "" {
			e = api.Error{Code: frontdoor.CodeInternal, Error: fmt.Sprintf("the union answered http %d", rec.Status())}
		}
		return api.Uniques{}, &apiError{Status: rec.Status(), Code: e.Code, Msg: e.Error}
	}
	var out api.Uniques
	if err := json.Unmarshal(rec.Body(), &out); err != nil {
		return api.Uniques{}, fmt.Errorf("decode the union's answer: %w", err)
	}
	return out, nil
}
