package httpapi

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/shard"
	"github.com/tally-dev/tally/storage"
)

// Event types: PUT /v1/types/{name} (admin) registers a type or updates
// its metadata in every region, GET /v1/types/{name} reads one, GET
// /v1/types lists them. Reads of counters, likes and trending show a
// key's type with ?with=meta.

type typeRequest struct {
	Owner       *string `json:"owner"`
	Status      *string `json:"status"`
	Description *string `json:"description"`
}

func typeJSON(name string, m crdt.TypeMeta) api.EventType {
	out := api.EventType{Name: name, Owner: m.Owner, Status: m.Status, Description: m.Description}
	if m.HLC != 0 {
		at := hlcTime(m.HLC)
		out.HLC, out.Replica, out.At = m.HLC.String(), m.Origin, &at
	}
	return out
}

// PUT /v1/types/{name} {"owner","status","description"}: status defaults
// to active, the texts to empty.
func (s *Server) putType(w http.ResponseWriter, r *http.Request) error {
	name, err := pathID(r, "name")
	if err != nil {
		return err
	}
	var req typeRequest
	if err := s.decodeRequired(w, r, &req, `{"owner":"media-team","status":"active","description":"views of a video"}`); err != nil {
		return err
	}
	owner, status, desc := deref(req.Owner), crdt.TypeActive, deref(req.Description)
	if req.Status != nil {
		status = *req.Status
	}
	if why := crdt.ValidTypeTexts(owner, status, desc); why != "" {
		return newError(http.StatusBadRequest, CodeBadRequest, "%s", why)
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	res, err := s.rep.SetType(ctx, name, owner, status, desc)
	if err != nil {
		return err
	}
	out := typeJSON(name, *res.Meta)
	out.Changed = res.Changed
	writeJSON(w, http.StatusOK, out)
	return nil
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// GET /v1/types/{name}: 404 not_found if the name was never registered.
func (s *Server) getType(w http.ResponseWriter, r *http.Request) error {
	name, err := pathID(r, "name")
	if err != nil {
		return err
	}
	m, ok, err := s.rep.Type(name)
	if err != nil {
		return err
	}
	if !ok {
		return newError(http.StatusNotFound, CodeNotFound, "no event type %q is registered", name)
	}
	writeJSON(w, http.StatusOK, typeJSON(name, m))
	return nil
}

// GET /v1/types/{name}/total?kind=counters|likes: the all-time sum over
// the keys of the family (counters by default) that belong to the type;
// 404 not_found if the name was never registered.
func (s *Server) getTypeTotal(w http.ResponseWriter, r *http.Request) error {
	name, err := pathID(r, "name")
	if err != nil {
		return err
	}
	q := r.URL.Query()
	for _, p := range []string{"kind"} {
		if _, err := one(q, p); err != nil {
			return err
		}
	}
	kind := storage.Counters
	if v := q.Get("kind"); v != "" {
		if kind, err = parseKind(v); err != nil {
			return err
		}
	}
	if _, ok, err := s.rep.Type(name); err != nil {
		return err
	} else if !ok {
		return newError(http.StatusNotFound, CodeNotFound, "no event type %q is registered", name)
	}
	var shardOf func(string) (int, bool)
	if s.cfg.Shards != nil {
		shardOf = func(key string) (int, bool) { sh := shard.Of(key); return sh, s.cfg.Shards.Holds(sh) }
	}
	sums, err := s.rep.TypeTotal(kind, name, shardOf)
	if err != nil {
		return fmt.Errorf("type total: %w", err)
	}
	out := api.TypeTotal{Type: name, Kind: kind.String(), Regions: map[string]int64{}}
	if gathered(r) {
		for sh, sum := range sums {
			out.Shards = append(out.Shards, api.TypeTotalShard{Shard: sh, Keys: sum.Keys, Replicas: replicasJSON(sum.Vector), Approx: sum.Approx})
		}
		slices.SortFunc(out.Shards, func(a, b api.TypeTotalShard) int { return cmp.Compare(a.Shard, b.Shard) })
	}
	if s.sharded(r) {
		// Each holder of a shard sums its keys alike; the first sum of a
		// shard heard counts, this replica's own first.
		missing, err := s.gather(r, nil, func(b []byte) error {
			var other api.TypeTotal
			if err := json.Unmarshal(b, &other); err != nil {
				return err
			}
			for _, o := range other.Shards {
				if _, ok := sums[o.Shard]; ok {
					continue
				}
				var v crdt.Vector
				for id, pn := range o.Replicas {
					v = v.Set(id, crdt.PN{P: pn.P, N: pn.N})
				}
				sums[o.Shard] = region.TypeSum{Vector: v, Keys: o.Keys, Approx: o.Approx}
			}
			return nil
		})
		if err != nil {
			return err
		}
		out.Partial, out.MissingShards = missing > 0, missing
	}
	var total crdt.Vector
	for _, sum := range sums {
		for _, e := range sum.Vector {
			cur := total.Get(e.Replica)
			total = total.Set(e.Replica, crdt.PN{P: cur.P + e.P, N: cur.N + e.N})
		}
		out.Keys += sum.Keys
		out.Approx = out.Approx || sum.Approx
	}
	// A peer unheard-from may hold writes of the type's keys not here yet.
	out.Approx = out.Approx || out.Partial || s.staleFor("")
	out.Value, out.Replicas = total.Value(), replicasJSON(total)
	regions := s.regionOf()
	for _, e := range total {
		out.Regions[regionName(regions, e.Replica)] += e.Value()
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// GET /v1/types
func (s *Server) getTypes(w http.ResponseWriter, r *http.Request) error {
	limit, after, err := listQuery(r)
	if err != nil {
		return err
	}
	types, more, err := s.rep.Types(after, limit)
	if err != nil {
		return err
	}
	out := api.EventTypes{Types: make([]api.EventType, len(types))}
	for i, t := range types {
		out.Types[i] = typeJSON(t.Name, t.Meta)
	}
	if more && len(types) > 0 {
		out.Next = types[len(types)-1].Name
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// withMeta reads with=: absent, or "meta" (show each key's event type).
func withMeta(q url.Values) (bool, error) {
	v, err := one(q, "with")
	switch {
	case err != nil:
		return false, err
	case v == "":
		return false, nil
	case v == "meta":
		return true, nil
	}
	return false, newError(http.StatusBadRequest, CodeBadRequest, `with=%s: want with=meta`, quoteShort(v))
}

// typeMeta is the metadata of key's event type, nil if it has none.
func (s *Server) typeMeta(key string) *api.TypeMeta {
	name, m, ok := s.rep.TypeOf(key)
	if !ok {
		return nil
	}
	return &api.TypeMeta{Type: name, Owner: m.Owner, Status: m.Status, Description: m.Description}
}
