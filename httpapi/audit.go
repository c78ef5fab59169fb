package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
	tallyroute "github.com/tally-dev/tally/route"
	"github.com/tally-dev/tally/shard"
)

// GET /v1/audit[?kind=likes|counters&key=K]: this replica's own entries
// recomputed from its event log, compared with the stored ones (all
// vectors, or one). Admin: it reads the whole log.
func (s *Server) getAudit(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	var kind region.Kind
	key := q.Get("key")
	switch k := q.Get("kind"); {
	case k == "" && key == "":
	case k == "likes":
		kind = region.KindLikes
	case k == "counters":
		kind = region.KindCounters
	case k == "budgets":
		kind = region.KindBudgets
	default:
		return newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "kind %q: want likes, counters or budgets, with key", k)
	}
	if kind != 0 && key == "" {
		return newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "kind needs a key")
	}
	rep, err := s.rep.Admin().Audit(kind, key)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, auditJSON(&rep))
	return nil
}

func auditJSON(rep *region.AuditReport) api.Audit {
	out := api.Audit{Replica: rep.Replica, OK: rep.OK(), Complete: rep.Complete, Events: rep.Events,
		FirstSeq: rep.First, LastSeq: rep.Last, Vectors: rep.Vectors, Diffs: []api.AuditDiff{}}
	for _, d := range rep.Diffs {
		out.Diffs = append(out.Diffs, api.AuditDiff{Kind: d.Kind.String(), Key: d.Key,
			Logged: api.PN{P: d.Logged.P, N: d.Logged.N}, Stored: api.PN{P: d.Stored.P, N: d.Stored.N}})
	}
	return out
}

// GET /v1/likes/{item}/{user}/history[?limit=N]: every like and unlike of
// the pair, gathered from every replica (each answers for its own), the
// newest N of each (default 100, at most region.MaxHistory).
func (s *Server) getHistory(w http.ResponseWriter, r *http.Request) error {
	ids, err := pathIDs(r, "item", "user")
	if err != nil {
		return err
	}
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > region.MaxHistory {
			return newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "limit %q: want 1..%d", v, region.MaxHistory)
		}
		limit = n
	}
	item, user := s.hotName(ids[0], ids[1]), ids[1] // a split item's: the user's part
	h, err := s.history(w, r, item, user, limit)
	if err != nil {
		return err
	}
	out := api.History{Item: item, User: user, Actions: []api.HistoryAction{},
		Complete: len(h.Missing) == 0 && len(h.Partial) == 0, Missing: h.Missing, Partial: h.Partial}
	for _, a := range h.Actions {
		out.Actions = append(out.Actions, api.HistoryAction{Liked: a.Liked, HLC: a.HLC.String(), Replica: a.Replica, Region: a.Region,
			At: time.UnixMilli(a.HLC.WallMs()).UTC().Format("2006-01-02T15:04:05.000Z")})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// history reads the history of user's like of item (or part) here, or,
// where this replica neither holds nor keeps its shard, at a holder, sent
// typed (Shards.History): the holder gathers it as it would for its own
// client, and the answer names it (ServedByHeader).
func (s *Server) history(w http.ResponseWriter, r *http.Request, item, user string, limit int) (region.PairHistory, error) {
	if !s.readsElsewhere(r, item) {
		src := tallyroute.Source{Replica: s.rep}
		if s.cfg.Replication != nil {
			src.Historian = s.cfg.Replication
		}
		return tallyroute.ReadHistory(r.Context(), src, item, user, limit)
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	sh := shard.Of(item)
	h, by, err := s.cfg.Shards.History(ctx, sh, item, user, limit)
	if err != nil {
		return region.PairHistory{}, s.holderError(w, sh, by, err)
	}
	w.Header().Set(ServedByHeader, by)
	return h, nil
}
