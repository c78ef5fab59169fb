package httpapi

import (
	"net/http"
	"time"

	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/internal/base/failpoint"
)

type chaosClockRequest struct {
	OffsetMs *int64 `json:"offset_ms"`
}

// PUT /v1/admin/chaos/clock {"offset_ms": n}: a chaos build's replica sets
// how far its wall clock is from the host's, to test clock steps. The route
// exists only when Config.ChaosClock is set, which only a chaos build does.
func (s *Server) putChaosClock(w http.ResponseWriter, r *http.Request) error {
	var req chaosClockRequest
	if err := s.decodeRequired(w, r, &req, `{"offset_ms":n}`); err != nil {
		return err
	}
	if req.OffsetMs == nil {
		return newError(http.StatusBadRequest, frontdoor.CodeMissingField, `body needs "offset_ms"`)
	}
	d := time.Duration(*req.OffsetMs) * time.Millisecond
	s.cfg.ChaosClock(d)
	s.log.Warn("chaos build: wall clock offset set", "offset", d)
	writeJSON(w, http.StatusOK, req)
	return nil
}

// chaosSplitTwoParts reports whether an unlike of a split item (Hot) goes
// to the part after the user's, not to the user's part where the like
// is, so the unlike undoes nothing: the failpoint split-user-two-parts
// (with the replica's own share of it). Never outside a chaos build.
func (s *Server) chaosSplitTwoParts() bool {
	return s.cfg.Failpoints.On(failpoint.SplitTwoParts)
}

// chaosServeUnheld reports whether apply serves r here although this
// replica does not hold its key's shard: a write, when the failpoint
// ack-unheld-writes is armed (the replica then acknowledges it unstored).
// Never outside a chaos build.
func (s *Server) chaosServeUnheld(r *http.Request) bool {
	return s.cfg.Failpoints.On(failpoint.AckUnheld) && r.Method != http.MethodGet
}
