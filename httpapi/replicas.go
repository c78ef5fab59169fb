package httpapi

import (
	"errors"
	"net/http"

	"github.com/tally-dev/tally/api"
)

// ReplicaAdmin stops and starts the replicas of a local deployment (tallyd
// local), as LinkAdmin cuts its links: /v1/admin/replicas.
type ReplicaAdmin interface {
	// SetReplicaUp stops (up false) or starts again (up true) a replica
	// on its data and address, and returns at once with the state it
	// left the replica in; the stop or start follows.
	SetReplicaUp(replica string, up bool) (api.ReplicaState, error)
	// ReplicaStates lists every replica.
	ReplicaStates() []api.ReplicaState
}

// ErrUnknownReplicaAdmin is returned by a ReplicaAdmin for a replica it
// does not run.
var ErrUnknownReplicaAdmin = errors.New("httpapi: no such replica in this deployment")

func (s *Server) noReplicaAdmin() error {
	return newError(http.StatusNotFound, CodeNotFound, "no replica admin: replicas can be stopped only in a local deployment (tallyd local)")
}

// GET /v1/admin/replicas
func (s *Server) getReplicas(w http.ResponseWriter, _ *http.Request) error {
	if s.cfg.Replicas == nil {
		return s.noReplicaAdmin()
	}
	writeJSON(w, http.StatusOK, api.Replicas{Replicas: s.cfg.Replicas.ReplicaStates()})
	return nil
}

// PUT /v1/admin/replicas/{replica} {"up": bool}
func (s *Server) putReplica(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.Replicas == nil {
		return s.noReplicaAdmin()
	}
	id, err := pathID(r, "replica")
	if err != nil {
		return err
	}
	var req linkRequest
	if err := s.decodeRequired(w, r, &req, `{"up":false}`); err != nil {
		return err
	}
	if req.Up == nil {
		return newError(http.StatusBadRequest, CodeMissingField, `body needs "up": true or false`)
	}
	st, err := s.cfg.Replicas.SetReplicaUp(id, *req.Up)
	if err != nil {
		if errors.Is(err, ErrUnknownReplicaAdmin) {
			return newError(http.StatusNotFound, CodeNotFound, "%s", err.Error())
		}
		return err
	}
	s.log.Warn("replica stopped or started by admin", "replica", id, "up", *req.Up, "state", st.State)
	writeJSON(w, http.StatusOK, st)
	return nil
}
