package httpapi

import (
	"net/http"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

// GET /v1/audit[?kind=likes|counters&key=K]: this replica's own entries
// recomputed from its event log, compared with the stored ones (all
// vectors, or one). Admin: it reads the whole log.
func (s *Server) getAudit(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	var kind storage.Kind
	key := q.Get("key")
	switch k := q.Get("kind"); {
	case k == "" && key == "":
	case k == "likes":
		kind = storage.Likes
	case k == "counters":
		kind = storage.Counters
	default:
		return newError(http.StatusBadRequest, CodeBadRequest, "kind %q: want likes or counters, with key", k)
	}
	if kind != 0 && key == "" {
		return newError(http.StatusBadRequest, CodeBadRequest, "kind needs a key")
	}
	rep, err := s.rep.Audit(kind, key)
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
