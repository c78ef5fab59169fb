package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
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
			return newError(http.StatusBadRequest, CodeMissingField, `give "ids": [...] or "id"`)
		}
		return err
	}
	ids := body.IDs
	switch {
	case body.ID != nil && ids != nil:
		return newError(http.StatusBadRequest, CodeBadRequest, `give "ids" or "id", not both`)
	case body.ID != nil:
		ids = []string{*body.ID}
	case len(ids) == 0:
		return newError(http.StatusBadRequest, CodeMissingField, `give "ids": [...] (1 to %d ids) or "id"`, region.MaxUniqueIDs)
	case len(ids) > region.MaxUniqueIDs:
		return newError(http.StatusBadRequest, CodeBadRequest, "%d ids in one request; at most %d", len(ids), region.MaxUniqueIDs)
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
	res, err := s.rep.Apply(ctx, region.Op{Kind: region.OpUniques, Item: key, IDs: ids, At: at})
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
		return newError(http.StatusBadRequest, CodeMissingField, "give keys=a,b,c (1 to %d keys)", region.MaxUniqueKeys)
	}
	keys := strings.Split(list, ",")
	if len(keys) > region.MaxUniqueKeys {
		return newError(http.StatusBadRequest, CodeBadRequest, "%d keys; at most %d", len(keys), region.MaxUniqueKeys)
	}
	for _, k := range keys {
		if err := checkID("key", k); err != nil {
			return err
		}
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	if s.sharded(r) {
		// A union needs every key's registers: keys of one shard are
		// answered by its holders, keys of several only where all are held.
		one, held := shard.Of(keys[0]), true
		for _, k := range keys {
			held = held && s.holds(k)
			if shard.Of(k) != one {
				one = -1
			}
		}
		switch {
		case held:
		case one >= 0:
			if err := s.cfg.Shards.Forward(w, r, nil, one); err != nil {
				return forwardError(one, err)
			}
			return nil
		default:
			return newError(http.StatusMisdirectedRequest, CodeShardNotHeld,
				"keys of several shards, not all held by this replica: a union of unique counts needs every key's sketch in one place (GET /v1/shards)")
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
	if windowed {
		rd, err = s.rep.UniquesWindow(keys, fromMs, toMs)
	} else {
		rd, err = s.rep.Uniques(keys)
	}
	if err != nil {
		return windowErr(err)
	}
	est := math.Round(rd.Estimate)
	out := api.Uniques{Keys: keys, Estimate: int64(est), RelStdError: crdt.HLLStdError,
		StdError: math.Round(est*crdt.HLLStdError*10) / 10, Approx: true, Replicas: rd.Replicas, Regions: []string{}}
	if out.Replicas == nil {
		out.Replicas = []string{} // a key nobody added to: [], as the API documents, not null
	}
	out.Stale = slices.ContainsFunc(keys, s.staleFor)
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
		fromMs, toMs, err := s.rep.UniqueRange(d)
		return fromMs, toMs, true, windowErr(err)
	case from == "":
		return 0, 0, false, newError(http.StatusBadRequest, CodeMissingField, "give last (e.g. last=24h) or from (and to)")
	}
	fromMs, toMs, err = s.fromTo(from, to)
	return fromMs, toMs, err == nil, err
}
