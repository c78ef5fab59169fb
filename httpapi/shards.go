package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
	tallyroute "github.com/tally-dev/tally/route"
	"github.com/tally-dev/tally/shard"
)

// Shards is a sharded region's routing, as one replica sees it (package
// shard; node implements it over NATS).
type Shards interface {
	// Map is the region's shard map.
	Map() shard.Map
	// URL is the address clients reach this replica's HTTP API at ("" if
	// none is known), which GET /v1/shards lists.
	URL() string
	// MoveState says how far this replica is along a shard move: synced
	// (joining shards), released (keeping shards it left); nil when not.
	MoveState() (synced, released *bool)
	// Holds reports whether this replica holds shard s.
	Holds(s int) bool
	// Passive reports whether this replica keeps shard s as a copy it
	// left in a move, until the map settles: it serves the shard's reads,
	// which so never miss a write it acknowledged (its own entries reach
	// the new holders by the time the map settles), and forwards writes.
	Passive(s int) bool
	// Ask asks q, a gathered read, typed, of every other replica of the
	// region, each answering from the shards it holds only, and returns
	// the replies that came in time (question.go).
	Ask(ctx context.Context, q tallyroute.Question) []Replied
	// Apply runs ops, all of keys on shard s (or on shards of the same
	// holders as s: an event batch's sub-batch), at a holder of s (this
	// replica among them, in the map's preferred order; with primary,
	// only the first), sent typed, and returns their results and who
	// served them. An error wrapping ErrNoHolder: nothing was applied;
	// any other: maybe applied.
	Apply(ctx context.Context, s int, ops []region.Op, primary bool) ([]region.Result, string, error)
	// Read answers reads (route.OpKind.Read), all of keys on shard s, at
	// a holder of s (this replica among them), sent typed, and returns
	// their results and who answered them. A read the holder failed is
	// its error as the holder's replica returned it; an error wrapping
	// ErrNoHolder: no holder answered.
	Read(ctx context.Context, s int, ops []tallyroute.Op) ([]tallyroute.Result, string, error)
	// History reads the history of user's like of item (or part), on
	// shard s, the newest limit actions of each replica, as a holder of
	// s (this replica among them) gathers it, sent typed
	// (tallyroute.OpHistory), and returns it and who answered it; errors
	// as Read's.
	History(ctx context.Context, s int, item, user string, limit int) (region.PairHistory, string, error)
	// Uniques reads a unique count of keys all on shard s
	// (tallyroute.OpUniqueRead) at a holder of s (this replica among
	// them), sent typed, and returns the holder's answer and who gave
	// it; errors as Read's.
	Uniques(ctx context.Context, s int, q tallyroute.UniqueQuery) (tallyroute.Uniques, string, error)
	// Windows reads op, an OpWindow or OpSeries of keys on shard s, at a
	// holder of s (this replica among them), sent typed, and returns the
	// holder's answer (tallyroute.ReadWindows) and who answered it;
	// errors as Read's.
	Windows(ctx context.Context, s int, op tallyroute.Op) (tallyroute.Windows, string, error)
}

// ErrNoHolder is what the router's calls return (wrapped) when no
// holder of the shard is up to take the request: nothing was applied.
// Any other error of Apply is a holder that did not answer in time,
// which may still apply a write.
var ErrNoHolder = tallyroute.ErrNoHolder

// forwardError is the answer to a request no holder served.
func forwardError(sh int, err error) error {
	if errors.Is(err, ErrNoHolder) {
		return newError(http.StatusServiceUnavailable, frontdoor.CodeShardUnavailable,
			"no replica of this region holding shard %d is up; nothing was applied", sh)
	}
	return &apiError{Status: http.StatusServiceUnavailable, Code: frontdoor.CodeTimeout, RetryAfter: 1,
		Msg: fmt.Sprintf("the replica holding shard %d did not answer in time: a write may or may not have applied (%v)", sh, err)}
}

// sharded reports whether reads of many keys are answered from more
// shards than this replica holds: in a sharded region.
func (s *Server) sharded() bool { return s.cfg.Shards != nil }

// holds reports whether this replica holds name's shard (always, when
// the region is not sharded).
func (s *Server) holds(name string) bool {
	return s.cfg.Shards == nil || s.cfg.Shards.Holds(shard.Of(name))
}

// ServedByHeader names the replica that served a request: the one it
// arrived at, or the holder it was forwarded to.
const ServedByHeader = "Tally-Served-By"

// servedBy names this replica in every answer of a sharded region
// (ServedByHeader); where a holder served the request's operation, the
// handler names the holder instead. Nothing is forwarded whole: each
// handler parses and checks its request here and hands its typed
// operations to the router (Server.apply, readAt and their siblings).
func (s *Server) servedBy(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Shards != nil { // unsharded: nobody to name
			w.Header().Set(ServedByHeader, s.cfg.Replica.ID())
		}
		next.ServeHTTP(w, r)
	})
}

// GET /v1/shards: the region's shard map.
func (s *Server) getShards(w http.ResponseWriter, r *http.Request) error {
	m := shard.Single(s.cfg.Replica.Region(), s.cfg.Replica.ID())
	said := map[string]api.ShardHolding{} // each replica's own word: its address and move state
	if s.cfg.Shards != nil {
		m = s.cfg.Shards.Map()
		self := api.ShardHolding{URL: s.cfg.Shards.URL(), MapRevision: m.Revision}
		self.Synced, self.Released = s.cfg.Shards.MoveState()
		said[s.cfg.Replica.ID()] = self
		replies, _ := s.ask(r.Context(), tallyroute.Question{Asked: tallyroute.AskHolding})
		for _, rp := range replies {
			if h := rp.Holding; h != nil {
				said[rp.Replica] = api.ShardHolding{URL: h.URL, MapRevision: h.MapRevision, Synced: h.Synced, Released: h.Released}
			}
		}
	}
	out := m.API()
	stale := map[string]bool{}
	if s.cfg.Replication != nil {
		for _, p := range s.cfg.Replication.Peers() {
			stale[p.Replica] = p.Stale
		}
	}
	for i := range out.Replicas {
		h := &out.Replicas[i]
		own := said[h.Replica]
		h.State, h.URL, h.Synced, h.Released, h.MapRevision = "up", own.URL, own.Synced, own.Released, own.MapRevision
		if stale[h.Replica] {
			h.State = "stale"
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// readsElsewhere reports whether a read of name is answered by a holder
// of its shard, sent typed (Server.readAt), rather than from this
// replica's view: in a sharded region, a read of a shard this replica
// neither holds nor keeps.
func (s *Server) readsElsewhere(r *http.Request, name string) bool {
	if s.cfg.Shards == nil {
		return false
	}
	sh := shard.Of(name)
	return !s.cfg.Shards.Holds(sh) && !s.cfg.Shards.Passive(sh)
}

// readAt answers op, a view read (route.OpCounterView and after) of name,
// at a holder of name's shard (Shards.Read): the request was parsed,
// checked and authenticated here, and nothing of it but the read leaves.
// The answer names who served it (ServedByHeader), and is rendered here
// from the holder's view (route.Detail) as the holder renders its own.
func (s *Server) readAt(ctx context.Context, w http.ResponseWriter, name string, op tallyroute.Op) (tallyroute.Result, error) {
	sh := shard.Of(name)
	res, by, err := s.cfg.Shards.Read(ctx, sh, []tallyroute.Op{op})
	switch {
	case err != nil:
		return tallyroute.Result{}, s.holderError(w, sh, by, err)
	case len(res) != 1 || res[0].Detail == nil:
		return tallyroute.Result{}, fmt.Errorf("the holder of shard %d answered a read without its view", sh)
	}
	w.Header().Set(ServedByHeader, by)
	return res[0], nil
}

// holderError is the answer to a read of shard sh sent typed to a holder
// (by, "" if none answered) that failed with err: no holder answered in
// time, or the holder's read failed, its error answered as this
// replica's own would be (naming the holder on w).
func (s *Server) holderError(w http.ResponseWriter, sh int, by string, err error) error {
	if errors.Is(err, ErrNoHolder) || errors.Is(err, context.DeadlineExceeded) {
		return forwardError(sh, err)
	}
	if by != "" {
		w.Header().Set(ServedByHeader, by)
	}
	return err
}

// apply runs op at this replica when it holds op's key's shard, else at a
// holder, sent typed (Shards.Apply): the request was parsed, checked and
// authenticated here, and nothing of it but the operation leaves. The
// answer names who served it (ServedByHeader).
func (s *Server) apply(ctx context.Context, w http.ResponseWriter, r *http.Request, op region.Op) (region.Result, error) {
	if s.cfg.Shards == nil || s.holdsOp(&op) || s.chaosServeUnheld(r) {
		return s.rep.Apply(ctx, op)
	}
	sh := shard.Of(op.Item)
	res, by, err := s.cfg.Shards.Apply(ctx, sh, []region.Op{op}, false)
	if err == nil {
		w.Header().Set(ServedByHeader, by) // else this replica answers
	}
	switch {
	case err != nil && by == s.cfg.Replica.ID():
		return region.Result{}, err // this replica's own writer's answer
	case err != nil:
		return region.Result{}, forwardError(sh, err)
	}
	return res[0], res[0].Err
}
