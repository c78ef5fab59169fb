package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/tally-dev/tally/shard"
)

// Shards is a sharded region's routing, as one replica sees it (package
// shard; node implements it over NATS).
type Shards interface {
	// Map is the region's shard map.
	Map() shard.Map
	// Holds reports whether this replica holds shard s.
	Holds(s int) bool
	// Forward sends r, whose body is body, to a holder of shard s in this
	// region and writes the holder's answer to w. It returns an error
	// (nothing written) when no holder answers.
	Forward(w http.ResponseWriter, r *http.Request, body []byte, s int) error
}

// forwardedKey marks a request a replica forwarded to this one over NATS
// (WithForwarded): it is served here, never forwarded again, and was
// rate-limited where it arrived. A context value, so no client can set it.
type forwardedKey struct{}

// WithForwarded marks ctx as carrying a request another replica of the
// region forwarded to this one, a holder of its key's shard.
func WithForwarded(ctx context.Context) context.Context {
	return context.WithValue(ctx, forwardedKey{}, true)
}

func forwarded(r *http.Request) bool {
	v, _ := r.Context().Value(forwardedKey{}).(bool)
	return v
}

// ServedByHeader names the replica that served a request: the one it
// arrived at, or the holder it was forwarded to.
const ServedByHeader = "Tally-Served-By"

// routeShard sends a request for a key on a shard this replica does not
// hold to a holder: the key is the route's {item} or {key}, or the
// videoId/item of a POST /v1/likes body. One hop at most: a forwarded
// request is served where it lands. Requests of several keys (event
// batches, cashback) are served here, and their writes refused unless
// this replica holds every key (region.ErrNotHeld).
func (s *Server) routeShard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(ServedByHeader, s.cfg.Replica.ID())
		if s.cfg.Shards == nil || forwarded(r) {
			next.ServeHTTP(w, r)
			return
		}
		vars := mux.Vars(r)
		name, ok := vars["item"]
		if !ok {
			name, ok = vars["key"]
		}
		var body []byte
		if !ok && r.Method == http.MethodPost && r.URL.Path == "/v1/likes" {
			var err error
			if body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)); err != nil {
				s.writeError(w, r, jsonError(err, s.cfg.MaxBodyBytes))
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			var peek struct{ VideoID, Item string }
			if json.Unmarshal(body, &peek) == nil { // a bad body gets its 400 from the handler
				name = peek.VideoID + peek.Item
				ok = name != ""
			}
		}
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		sh := shard.Of(name)
		if s.cfg.Shards.Holds(sh) || s.chaosServeUnheld(r) {
			next.ServeHTTP(w, r)
			return
		}
		if body == nil && r.Body != nil && r.Method != http.MethodGet {
			var err error
			if body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)); err != nil {
				s.writeError(w, r, jsonError(err, s.cfg.MaxBodyBytes))
				return
			}
		}
		w.Header().Del(ServedByHeader) // the holder's answer says who served it
		if err := s.cfg.Shards.Forward(w, r, body, sh); err != nil {
			w.Header().Set(ServedByHeader, s.cfg.Replica.ID())
			s.writeError(w, r, newError(http.StatusServiceUnavailable, CodeShardUnavailable,
				"no replica of this region holding shard %d answered: %v", sh, err))
		}
	})
}

// GET /v1/shards: the region's shard map.
func (s *Server) getShards(w http.ResponseWriter, r *http.Request) error {
	m := shard.Single(s.cfg.Replica.Region(), s.cfg.Replica.ID())
	if s.cfg.Shards != nil {
		m = s.cfg.Shards.Map()
	}
	writeJSON(w, http.StatusOK, m.API())
	return nil
}
