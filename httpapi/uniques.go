package httpapi

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
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
	if s.sharded(r) {
		// Keys of one shard another replica holds: its holders answer.
		one := shard.Of(keys[0])
		for _, k := range keys {
			if shard.Of(k) != one || s.holds(k) {
				one = -1
				break
			}
		}
		if one >= 0 {
			if err := s.cfg.Shards.Forward(w, r, nil, one); err != nil {
				return forwardError(one, err)
			}
			return nil
		}
	}
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
	var rd region.UniqueRead
	var missing int // shards of keys nobody answered for
	if s.cfg.Shards != nil && (gathered(r) || !slices.ContainsFunc(keys, func(k string) bool { return !s.holds(k) })) {
		// Held here, or gathered: read the keys this replica holds.
		rd, err = s.readUniques(keys, fromMs, toMs, windowed)
	} else if s.cfg.Shards == nil {
		rd, err = s.readUniques(keys, fromMs, toMs, windowed)
	} else {
		rd, missing, err = s.gatherUniques(r, keys, fromMs, toMs, windowed)
	}
	if err != nil {
		return windowErr(err)
	}
	if gathered(r) {
		return writeUniquesPart(w, rd)
	}
	est := math.Round(rd.Estimate)
	out := api.Uniques{Keys: keys, Estimate: int64(est), RelStdError: crdt.HLLStdError,
		StdError: math.Round(est*crdt.HLLStdError*10) / 10, Approx: true, Replicas: rd.Replicas, Regions: []string{}}
	if out.Replicas == nil {
		out.Replicas = []string{} // a key nobody added to: [], as the API documents, not null
	}
	out.Stale = slices.ContainsFunc(keys, s.staleFor)
	out.Partial, out.MissingShards = missing > 0, missing
	regionOf := s.regionOf()
	for _, id := range rd.Replicas {
		out.Regions = append(out.Regions, regionName(regionOf, id))
	}
	slices.Sort(out.Regions)
	out.Regions = slices.Compact(out.Regions)
	if byRegion {
		perRegion := map[string]*crdt.HLL{}
		for id, h := range rd.ByReplica {
			name := regionName(regionOf, id)
			if perRegion[name] == nil {
				perRegion[name] = new(crdt.HLL)
			}
			perRegion[name].Merge(h)
		}
		out.ByRegion = map[string]int64{}
		for name, h := range perRegion {
			out.ByRegion[name] = int64(math.Round(h.Estimate()))
		}
	}
	if windowed {
		from, to := rd.From.UTC(), rd.To.UTC()
		out.From, out.To, out.SlotWidth = &from, &to, rd.SlotWidth.String()
		final := rd.Closed && !out.Stale
		out.Final = &final
	}
	writeJSON(w, http.StatusOK, out)
	return nil
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
// as an HTTP request (by a replica of an older build; this one asks
// tallyroute.AskUniques, uniquesReply): for the asked keys it holds,
// each writer's sketch (the union of that writer's sketches of those
// keys) as HLL pages. It passes only between the replicas of a region.
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

// gatherUniques is a union of keys on several shards: this replica's
// keys, and each other replica's writers' sketches of the keys it holds
// (tallyroute.AskUniques); missing counts the shards of keys no reply
// covered.
func (s *Server) gatherUniques(r *http.Request, keys []string, fromMs, toMs int64, windowed bool) (region.UniqueRead, int, error) {
	rd, err := s.readUniques(keys, fromMs, toMs, windowed)
	if err != nil {
		return rd, 0, err
	}
	replies, covered := s.ask(r.Context(), tallyroute.Question{Asked: tallyroute.AskUniques, Keys: keys,
		FromMs: fromMs, ToMs: toMs, Windowed: windowed})
	for _, rp := range replies {
		for _, it := range rp.Items {
			h, err := decodeHLL(it.Data)
			if err != nil {
				return rd, 0, fmt.Errorf("gathered answer of %s: %w", rp.Replica, err)
			}
			rd.Sketch.Merge(h)
			if rd.ByReplica[it.Key] == nil {
				rd.ByReplica[it.Key] = new(crdt.HLL)
			}
			rd.ByReplica[it.Key].Merge(h)
		}
		if w := rp.Window; windowed && rd.SlotWidth == 0 && w != nil {
			rd.From, rd.To, rd.SlotWidth, rd.Closed = time.UnixMilli(w.FromMs), time.UnixMilli(w.ToMs), time.Duration(w.SlotMs)*time.Millisecond, w.Closed
		}
	}
	var missing shard.Set // the asked keys' shards no answer covered
	for _, k := range keys {
		if !covered.Has(shard.Of(k)) {
			missing.Add(shard.Of(k))
		}
	}
	rd.Replicas = rd.Replicas[:0]
	for id := range rd.ByReplica {
		rd.Replicas = append(rd.Replicas, id)
	}
	slices.Sort(rd.Replicas)
	rd.Estimate = rd.Sketch.Estimate()
	return rd, missing.Len(), nil
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
// PFCOUNT over keys of several shards): the same read, sent to a holder
// or gathered from the region's replicas when this one does not hold
// every key.
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
