package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
	tallyroute "github.com/tally-dev/tally/route"
	"github.com/tally-dev/tally/shard"
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
	out := api.EventType{Name: name, Owner: m.Value.Owner, Status: m.Value.Status, Description: m.Value.Description}
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
		return newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "%s", why)
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	res, err := s.rep.Admin().SetType(ctx, name, owner, status, desc)
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
	m, ok, err := s.rep.Admin().Type(name)
	if err != nil {
		return err
	}
	if !ok {
		return newError(http.StatusNotFound, frontdoor.CodeNotFound, "no event type %q is registered", name)
	}
	writeJSON(w, http.StatusOK, typeJSON(name, m))
	return nil
}

// GET /v1/types/{name}/total?kind=counters|likes: the all-time sum over
// the keys of the family (counters by default) that belong to the type;
// 404 not_found if the name was never registered.
func (s *Server) getTypeTotal(w http.ResponseWriter, r *http.Request) error {
	name, kind, err := s.typeQuery(r, "kind")
	if err != nil {
		return err
	}
	sums, err := s.rep.Admin().TypeTotal(kind, name, s.typeShardOf())
	if err != nil {
		return fmt.Errorf("type total: %w", err)
	}
	out := api.TypeTotal{Type: name, Kind: kind.String()}
	if s.cfg.Shards != nil {
		replies, covered := s.ask(r.Context(), tallyroute.Question{Asked: tallyroute.AskTypeTotal, Family: byte(kind), Key: name})
		addTypeReplies(sums, replies)
		out.MissingShards = shard.Count - covered.Len()
		out.Partial = out.MissingShards > 0
	}
	total, anyApprox, _ := addTypeSums(sums)
	for _, sum := range sums {
		out.Keys += sum.Keys
	}
	// A peer unheard-from may hold writes of the type's keys not here yet.
	out.Approx = anyApprox || out.Partial || s.staleFor("")
	out.Value, out.Replicas, out.Regions = total.Value(), replicasJSON(total), s.regionsOf(total)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// GET /v1/types/{name}/window?kind=counters|likes&last=1h (or
// from=&to=): the net change of the type's keys over the window, as
// GET /v1/window reads one key's; 404 not_found if the name was never
// registered, no_window if the type's name or one of its keys keeps no
// slots that cover the window.
func (s *Server) getTypeWindow(w http.ResponseWriter, r *http.Request) error {
	name, kind, err := s.typeQuery(r, "kind", "last", "from", "to")
	if err != nil {
		return err
	}
	fromMs, toMs, err := s.windowRange(r.URL.Query(), kind, name, 0)
	if err != nil {
		return err
	}
	win, sums, err := s.rep.Admin().TypeWindow(kind, name, fromMs, toMs, s.typeShardOf())
	if err != nil {
		return windowErr(err)
	}
	out := api.TypeWindow{Type: name, Kind: kind.String(), From: win.From.UTC(), To: win.To.UTC(), SlotWidth: fmtSpan(win.SlotWidth)}
	if s.cfg.Shards != nil {
		// Every holder reads the slots of the bounds read here, the
		// current one's too, whatever its clock says.
		replies, covered := s.ask(r.Context(), tallyroute.Question{Asked: tallyroute.AskTypeWindow, Family: byte(kind), Key: name,
			FromMs: win.From.UnixMilli(), ToMs: win.To.UnixMilli(), Windowed: true})
		for _, rp := range replies {
			if rp.Window == nil || rp.Window.FromMs != win.From.UnixMilli() || rp.Window.ToMs != win.To.UnixMilli() {
				return fmt.Errorf("gathered answer of %s: a holder read another window than [%v, %v)", rp.Replica, out.From, out.To)
			}
		}
		addTypeReplies(sums, replies)
		out.MissingShards = shard.Count - covered.Len()
		out.Partial = out.MissingShards > 0
	}
	total, anyApprox, unreconciled := addTypeSums(sums)
	for _, sum := range sums {
		out.Keys += sum.Keys
	}
	moving := unreconciled > 0 || out.Partial || s.staleFor("")
	out.Unreconciled, out.Approx, out.Final = unreconciled, moving || anyApprox, win.Closed && !moving
	if anyApprox {
		out.Mode = api.ModeApprox
	}
	out.Value, out.Replicas, out.Regions = total.Value(), replicasJSON(total), s.regionsOf(total)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// typeQuery reads the {name} of a route of a registered type (404
// not_found if it was never registered), its query's parameters each at
// most once, and kind= (counters by default).
func (s *Server) typeQuery(r *http.Request, params ...string) (string, region.Kind, error) {
	name, err := pathID(r, "name")
	if err != nil {
		return "", 0, err
	}
	q := r.URL.Query()
	for _, p := range params {
		if _, err := one(q, p); err != nil {
			return "", 0, err
		}
	}
	kind := region.KindCounters
	if v := q.Get("kind"); v != "" {
		if kind, err = parseKind(v); err != nil {
			return "", 0, err
		}
	}
	if _, ok, err := s.rep.Admin().Type(name); err != nil {
		return "", 0, err
	} else if !ok {
		return "", 0, newError(http.StatusNotFound, frontdoor.CodeNotFound, "no event type %q is registered", name)
	}
	return name, kind, nil
}

// typeShardOf is the shard of a key and whether this replica holds it,
// nil in a region that is not sharded.
func (s *Server) typeShardOf() func(string) (int, bool) {
	if s.cfg.Shards == nil {
		return nil
	}
	return func(key string) (int, bool) { sh := shard.Of(key); return sh, s.cfg.Shards.Holds(sh) }
}

// addTypeSums adds the shards' sums up, entry by entry.
func addTypeSums(sums map[int]region.TypeSum) (total crdt.Vector, approx bool, unreconciled int) {
	for _, sum := range sums {
		for _, e := range sum.Vector {
			cur := total.Get(e.Replica)
			total = total.Set(e.Replica, crdt.PN{P: cur.P + e.P, N: cur.N + e.N})
		}
		approx = approx || sum.Approx
		unreconciled += sum.Unreconciled
	}
	return total, approx, unreconciled
}

// regionsOf is the net of each region's replicas' entries in v.
func (s *Server) regionsOf(v crdt.Vector) map[string]int64 {
	regions, out := s.regionOf(), map[string]int64{}
	for _, e := range v {
		out[regionName(regions, e.Replica)] += e.Value()
	}
	return out
}

// GET /v1/types
func (s *Server) getTypes(w http.ResponseWriter, r *http.Request) error {
	limit, after, err := listQuery(r)
	if err != nil {
		return err
	}
	types, more, err := s.rep.Admin().Types(after, limit)
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
	return false, newError(http.StatusBadRequest, frontdoor.CodeBadRequest, `with=%s: want with=meta`, quoteShort(v))
}

// typeMeta is the metadata of key's event type, nil if it has none.
func (s *Server) typeMeta(key string) *api.TypeMeta {
	name, m, ok := s.rep.Admin().TypeOf(key)
	if !ok {
		return nil
	}
	return &api.TypeMeta{Type: name, Owner: m.Value.Owner, Status: m.Value.Status, Description: m.Value.Description}
}
