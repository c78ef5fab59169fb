package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/gorilla/mux"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/milestone"
)

// MilestoneFeed is what GET /v1/milestones reads: this region's view of
// the milestone stream (milestone.Feed).
type MilestoneFeed interface {
	Events() []milestone.Event
	Synced() (bool, error)
}

// ErrNoSequence is what Config.Sequence returns for a name it does not
// number: 404.
var ErrNoSequence = errors.New("httpapi: no such sequence")

// maxMilestonesLimit bounds ?limit= on GET /v1/milestones.
const maxMilestonesLimit = 100000

func (s *Server) getMilestones(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.Milestones == nil {
		return newError(http.StatusNotFound, frontdoor.CodeNotFound, "milestones are off: start tallyd with --milestones (tallyd local has them on)")
	}
	limit := -1
	if q := r.URL.Query()["limit"]; len(q) > 0 {
		n, err := strconv.Atoi(q[0])
		if len(q) > 1 || err != nil || n < 0 || n > maxMilestonesLimit {
			return newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "limit: want one whole number 0..%d", maxMilestonesLimit)
		}
		limit = n
	}
	events := s.cfg.Milestones.Events()
	out := api.Milestones{Milestones: events, Total: len(events)}
	if limit >= 0 && len(events) > limit {
		out.Milestones = events[len(events)-limit:]
	}
	if out.Milestones == nil {
		out.Milestones = []milestone.Event{} // [] rather than null
	}
	synced, err := s.cfg.Milestones.Synced()
	out.Synced = synced
	if err != nil {
		out.StreamError = err.Error()
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getSequence is GET /v1/sequences/{name}: the allocator's state of a
// sequence (high-water mark, free spans, leases), read from the KV now.
func (s *Server) getSequence(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.Sequence == nil {
		return newError(http.StatusNotFound, frontdoor.CodeNotFound, "milestones are off: start tallyd with --milestones (tallyd local has them on)")
	}
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	name := mux.Vars(r)["name"]
	st, err := s.cfg.Sequence(ctx, name)
	if errors.Is(err, ErrNoSequence) {
		return newError(http.StatusNotFound, frontdoor.CodeNotFound, "no sequence %q", name)
	}
	if err != nil {
		return newError(http.StatusServiceUnavailable, frontdoor.CodeNotReady, "read the allocator: %v", err)
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}
