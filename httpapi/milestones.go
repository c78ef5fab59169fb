package httpapi

import (
	"net/http"

	"github.com/tally-dev/tally/milestone"
)

// MilestoneFeed is what GET /v1/milestones reads: this region's view of
// the milestone stream (milestone.Feed).
type MilestoneFeed interface {
	Events() []milestone.Event
	Synced() (bool, error)
}

// milestonesResponse is GET /v1/milestones.
type milestonesResponse struct {
	Milestones []milestone.Event `json:"milestones"`
	// Synced: this region has read the whole stream at least once. While
	// the stream is out of reach the list is what was read before, and
	// StreamError says why it is not current.
	Synced      bool   `json:"synced"`
	StreamError string `json:"stream_error,omitempty"`
}

func (s *Server) getMilestones(w http.ResponseWriter, _ *http.Request) error {
	if s.cfg.Milestones == nil {
		return newError(http.StatusNotFound, CodeNotFound, "milestones are off: start tallyd with --milestones (tallyd local has them on)")
	}
	out := milestonesResponse{Milestones: s.cfg.Milestones.Events()}
	synced, err := s.cfg.Milestones.Synced()
	out.Synced = synced
	if err != nil {
		out.StreamError = err.Error()
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
