package httpapi

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/internal/base/version"
	"github.com/tally-dev/tally/region"
)

// GET /healthz: liveness. 200 while the process serves requests, 503 once
// the replica stopped (its storage failed, or another process holds its
// id): the replica then refuses every write until it is restarted, which
// is exactly what a liveness probe is for. The code says which.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) error {
	if err := s.rep.Err(); err != nil {
		return stoppedError(err)
	}
	writeJSON(w, http.StatusOK, api.Health{Status: "ok"})
	return nil
}

// stoppedError is why a stopped replica answers 503 on /healthz and
// /readyz: replica_id_conflict or storage_failed.
func stoppedError(err error) *apiError {
	if errors.Is(err, region.ErrIDConflict) {
		return newError(http.StatusServiceUnavailable, frontdoor.CodeReplicaIDConflict,
			"another process runs with this replica's id; this one stopped and must be restarted with an id of its own: %s",
			strings.TrimPrefix(err.Error(), "region: "))
	}
	return newError(http.StatusServiceUnavailable, frontdoor.CodeStorageFailed,
		"replica storage failed; it stopped writing and must be restarted")
}

// GET /readyz: readiness. 200 only when the replica acknowledges writes
// (with replication: once it has recovered its state from its peers).
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) error {
	if err := s.rep.Err(); err != nil {
		return stoppedError(err)
	}
	if s.draining.Load() {
		return newError(http.StatusServiceUnavailable, frontdoor.CodeDraining,
			"replica is about to stop; send traffic to another replica")
	}
	if !s.rep.Accepting() {
		return &apiError{Status: http.StatusServiceUnavailable, Code: frontdoor.CodeNotReady, RetryAfter: 1,
			Msg: "replica is recovering its state from peers and not accepting writes yet"}
	}
	writeJSON(w, http.StatusOK, api.Health{Status: "ready"})
	return nil
}

// GET /v1/status: what this replica is and how it acknowledges writes, plus
// replication's view: peers with last-heard time and lag, pending work.
func (s *Server) status(w http.ResponseWriter, r *http.Request) error {
	dur := s.rep.Durability()
	out := api.Status{
		Region:        s.rep.Region(),
		Replica:       s.rep.ID(),
		Durability:    dur.String(),
		Accepting:     s.rep.Accepting(),
		Fresh:         s.rep.Fresh(),
		Version:       s.cfg.Version,
		Revision:      version.Revision(),
		GoVersion:     version.GoVersion(),
		StartedAt:     s.started.UTC().Format(time.RFC3339),
		UptimeSeconds: int64(time.Since(s.started).Seconds()),

		ClockCorrectionMs: s.rep.ClockCorrectionMs(),
		ClockAheadMs:      s.rep.ClockAheadMs(),
	}
	// How the replica is guarded is an operator's business: a stranger
	// who learns that admin routes are open, or that there is no TLS,
	// has learned where to push.
	if s.adminCaller(r) {
		auth, edge := s.authStatus(), s.edgeStatus()
		out.Auth, out.Edge = &auth, &edge
	}
	if dur == region.DurabilityNone {
		out.DurabilityWarning = "writes are acknowledged before fsync: they survive a process crash but not a power loss"
	}
	if err := s.rep.Err(); err != nil {
		out.StorageError = err.Error()
	}
	s.replicationStatus(&out)
	if s.cfg.Events != nil {
		out.Events = s.cfg.Events()
	}
	if s.cfg.Numbering != nil {
		out.Numbering = s.cfg.Numbering()
	}
	if s.cfg.RESP != nil {
		out.RESP = s.cfg.RESP()
	}
	for _, r := range s.rep.Counters().ApproxRules() {
		out.Approx = append(out.Approx, api.ApproxRule{Prefix: r.Prefix, Error: r.Error})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// authStatus says which roles are guarded, never by what.
func (s *Server) authStatus() api.Auth {
	a := s.auth.Load()
	return api.Auth{Read: len(a.read) > 0, Write: len(a.write) > 0, Admin: len(a.admin) > 0}
}

// edgeStatus is the listener's protections and the limits in force.
func (s *Server) edgeStatus() api.Edge {
	e := api.Edge{
		TLS: s.cfg.Edge.TLS, ClientCerts: s.cfg.Edge.ClientCerts,
		InsecureListen: s.cfg.Edge.InsecureListen, InsecureOpenAdmin: s.cfg.Edge.OpenAdmin,
		Draining: s.draining.Load(), Limits: []api.Limit{},
	}
	for _, l := range s.Limits() {
		e.Limits = append(e.Limits, api.Limit{Class: l.Class, Client: l.Client, ClientBurst: l.ClientBurst, User: l.User, UserBurst: l.UserBurst})
	}
	return e
}

// SetDraining makes /readyz fail (on true) so that load balancers stop
// sending traffic before the replica stops; everything else is served.
func (s *Server) SetDraining(on bool) { s.draining.Store(on) }
