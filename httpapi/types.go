package httpapi

import (
	"context"
	"net/http"
	"net/url"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/crdt"
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
