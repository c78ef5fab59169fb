package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
)

// Replication is what the HTTP API asks of inter-replica replication
// (package replication's Replicator is one): its view of the peers, and a
// pair's history gathered from every replica. An interface, so that the
// front door stands on api/frontdoor/region and not on the replication
// transport.
type Replication interface {
	// Peers is this replica's view of each peer.
	Peers() []api.PeerStatus
	// Stale says whether some peer is unheard-from past its timeout, or
	// this replica has not finished recovering from its peers.
	Stale() bool
	// StaleFor is Stale counting only the peers holding key's shard.
	StaleFor(key string) bool
	// StalenessFor maps each peer holding key's shard to the ms since it
	// was last heard from (-1: never).
	StalenessFor(key string) map[string]int64
	// PeerHolds says whether peer holds key's shard.
	PeerHolds(peer, key string) bool
	// Recovered says whether this replica finished recovering from its
	// peers.
	Recovered() bool
	// Pending is how many changes wait to be sent.
	Pending() int
	// Convergence is GET /v1/convergence's answer.
	Convergence() api.Convergence
	// History gathers the like history of (item, user) from every replica.
	History(ctx context.Context, item, user string, limit int) (region.PairHistory, error)
}

// Link is one inter-region link of a local deployment.
type Link = api.Link

// LinkAdmin cuts and heals links between regions. `tallyd local` provides
// one over its fault-injecting gateway proxies; production has none.
type LinkAdmin interface {
	SetLink(a, b string, up bool) error
	Links() []Link
}

// ErrUnknownLink is returned by a LinkAdmin for regions it does not link.
var ErrUnknownLink = errors.New("httpapi: unknown link")

// approx says whether a read may still move: some record of the item is
// unreconciled, a peer is unheard-from past its timeout, or this replica has
// not finished recovering from its peers.
// In a sharded region only the peers holding the key's shard count.
func (s *Server) approx(rd region.Read, key string) bool {
	if rd.Unreconciled > 0 {
		return true
	}
	return s.staleFor(key)
}

// staleFor says whether a read of key may still move because a peer
// holding its shard is unheard-from (key "": any peer, as for a family's
// total, which every replica holds).
func (s *Server) staleFor(key string) bool {
	if s.cfg.Replication == nil {
		return false
	}
	if key == "" {
		return s.cfg.Replication.Stale()
	}
	return s.cfg.Replication.StaleFor(key)
}

// staleness maps each peer holding key's shard (every peer, unsharded) to
// ms since it was last heard from (-1: never), so a read says how old its
// view of each replica may be.
func (s *Server) staleness(key string) map[string]int64 {
	if s.cfg.Replication == nil {
		return nil
	}
	return s.cfg.Replication.StalenessFor(key)
}

// replicationStatus adds peers and pending work to /v1/status.
func (s *Server) replicationStatus(out *api.Status) {
	rep := s.cfg.Replication
	if rep == nil {
		out.Replication = "off"
		return
	}
	recovered, pending := rep.Recovered(), rep.Pending()
	out.Replication = "nats"
	out.Recovered = &recovered
	out.PendingReplication = &pending
	out.Peers = rep.Peers()
}

// GET /v1/convergence: per peer, whether this replica's state matched the
// peer's at the last anti-entropy comparison (digest compare), since when,
// and how far behind its messages arrive.
func (s *Server) convergence(w http.ResponseWriter, _ *http.Request) error {
	out := api.Convergence{Replica: s.rep.ID(), Converged: true, Recovered: true, Peers: []api.PeerStatus{}}
	if rep := s.cfg.Replication; rep != nil {
		out = rep.Convergence()
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// GET /v1/admin/links
func (s *Server) getLinks(w http.ResponseWriter, _ *http.Request) error {
	if s.cfg.Links == nil {
		return newError(http.StatusNotFound, frontdoor.CodeNotFound, "no link admin: links can be cut only in a local deployment (tallyd local)")
	}
	writeJSON(w, http.StatusOK, api.Links{Links: s.cfg.Links.Links(), At: time.Now().UTC()})
	return nil
}

type linkRequest struct {
	Up *bool `json:"up"`
}

// PUT /v1/admin/links/{a}/{b} {"up": bool}
func (s *Server) putLink(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.Links == nil {
		return newError(http.StatusNotFound, frontdoor.CodeNotFound, "no link admin: links can be cut only in a local deployment (tallyd local)")
	}
	ids, err := pathIDs(r, "a", "b")
	if err != nil {
		return err
	}
	var req linkRequest
	if err := s.decodeRequired(w, r, &req, `{"up":true}`); err != nil {
		return err
	}
	if req.Up == nil {
		return newError(http.StatusBadRequest, frontdoor.CodeMissingField, `body needs "up": true or false`)
	}
	if err := s.cfg.Links.SetLink(ids[0], ids[1], *req.Up); err != nil {
		if errors.Is(err, ErrUnknownLink) {
			return newError(http.StatusNotFound, frontdoor.CodeNotFound, "%s", err.Error())
		}
		return err
	}
	s.log.Warn("link changed by admin", "a", ids[0], "b", ids[1], "up", *req.Up)
	for _, l := range s.cfg.Links.Links() {
		if l.A == ids[0] && l.B == ids[1] || l.A == ids[1] && l.B == ids[0] {
			writeJSON(w, http.StatusOK, l)
			return nil
		}
	}
	writeJSON(w, http.StatusOK, Link{A: ids[0], B: ids[1], Up: *req.Up})
	return nil
}
