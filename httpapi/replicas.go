package httpapi

import (
	"errors"
	"net/http"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/frontdoor"
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
	// MoveShards begins moving region's shards, to copies holders each
	// (0: as they are) with the drain replicas serving none, at most
	// maxMove shard copies at a time (0: no bound), and returns at once;
	// ErrMoving if the region's shards move already.
	MoveShards(region string, copies int, drain []string, maxMove int) (api.ShardMove, error)
	// AddReplica starts a new replica in region and begins moving the
	// region's shards to spread them over it, as MoveShards.
	AddReplica(region string, maxMove int) (api.ShardMove, error)
}

// ErrMoving is returned by a ReplicaAdmin asked to move the shards of a
// region whose shards move already.
var ErrMoving = errors.New("httpapi: the region's shards are moving already")

// shardMoveRequest is PUT /v1/admin/shards/{region}'s body.
type shardMoveRequest struct {
	// Copies is how many replicas hold each shard afterwards (0: as now).
	Copies int `json:"copies,omitempty"`
	// Drain are replicas that serve no keyed shard afterwards.
	Drain []string `json:"drain,omitempty"`
	// Add is how many replicas join the region, its shards spread over
	// them (1; with neither copies nor drain).
	Add int `json:"add,omitempty"`
	// MaxMove bounds the shard copies synced at once (0: no bound).
	MaxMove int `json:"max_move,omitempty"`
}

// PUT /v1/admin/shards/{region} {"copies": n, "drain": [...], "add": 1, "max_move": n}
func (s *Server) putShards(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.Replicas == nil {
		return newError(http.StatusNotFound, frontdoor.CodeNotFound, "no replica admin: this route moves shards only in a local deployment (tallyd local); elsewhere run tallyd admin shards move")
	}
	region, err := pathID(r, "region")
	if err != nil {
		return err
	}
	var req shardMoveRequest
	if err := s.decodeRequired(w, r, &req, `{"copies":3}`); err != nil {
		return err
	}
	switch {
	case req.Copies < 0:
		return newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "copies %d < 0", req.Copies)
	case req.MaxMove < 0:
		return newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "max_move %d < 0", req.MaxMove)
	case req.Add < 0 || req.Add > 1:
		return newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "add %d: replicas join one at a time (add 1)", req.Add)
	case req.Add == 1 && (req.Copies != 0 || len(req.Drain) > 0):
		return newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "add joins a replica with the region's copies: no copies or drain with it")
	}
	var mv api.ShardMove
	if req.Add == 1 {
		mv, err = s.cfg.Replicas.AddReplica(region, req.MaxMove)
	} else {
		mv, err = s.cfg.Replicas.MoveShards(region, req.Copies, req.Drain, req.MaxMove)
	}
	switch {
	case errors.Is(err, ErrMoving):
		return newError(http.StatusConflict, frontdoor.CodeMoving, "%s", err.Error())
	case errors.Is(err, ErrUnknownReplicaAdmin):
		return newError(http.StatusNotFound, frontdoor.CodeNotFound, "%s", err.Error())
	case err != nil:
		return newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "%s", err.Error())
	}
	s.log.Warn("shard move begun by admin", "region", region, "copies", req.Copies, "drain", req.Drain, "add", mv.Added, "max_move", req.MaxMove)
	writeJSON(w, http.StatusOK, mv)
	return nil
}

// ErrUnknownReplicaAdmin is returned by a ReplicaAdmin for a replica it
// does not run.
var ErrUnknownReplicaAdmin = errors.New("httpapi: no such replica in this deployment")

func (s *Server) noReplicaAdmin() error {
	return newError(http.StatusNotFound, frontdoor.CodeNotFound, "no replica admin: replicas can be stopped only in a local deployment (tallyd local)")
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
		return newError(http.StatusBadRequest, frontdoor.CodeMissingField, `body needs "up": true or false`)
	}
	st, err := s.cfg.Replicas.SetReplicaUp(id, *req.Up)
	if err != nil {
		if errors.Is(err, ErrUnknownReplicaAdmin) {
			return newError(http.StatusNotFound, frontdoor.CodeNotFound, "%s", err.Error())
		}
		return err
	}
	s.log.Warn("replica stopped or started by admin", "replica", id, "up", *req.Up, "state", st.State)
	writeJSON(w, http.StatusOK, st)
	return nil
}
