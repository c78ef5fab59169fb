package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/google/uuid"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/frontdoor"
)

// apiError is a front door's refusal (frontdoor.Error).
type apiError = frontdoor.Error

// newError is frontdoor.Errorf.
func newError(status int, code, format string, args ...any) *apiError {
	return frontdoor.Errorf(status, code, format, args...)
}

var errNotFound = newError(http.StatusNotFound, frontdoor.CodeNotFound, "no such route")

// handlerFunc is a handler that returns its failure instead of writing it.
type handlerFunc func(http.ResponseWriter, *http.Request) error

func (h handlerFunc) with(s *Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	})
}

// writeError maps err to a status and code and writes the JSON body.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	e := s.classify(r, err)
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="tally"`)
	}
	writeJSON(w, e.Status, api.Error{Error: e.Msg, Code: e.Code})
}

// classify turns any error into an apiError. Replica errors get their own
// codes; anything unknown is a 500 whose details go to the log, not to the
// client, tagged with an id that appears in both.
func (s *Server) classify(r *http.Request, err error) *apiError {
	if e := knownError(err); e != nil {
		return e
	}
	id := uuid.NewString()
	s.log.Error("request failed", "id", id, "method", r.Method, "path", r.URL.Path, "error", err)
	return newError(http.StatusInternalServerError, frontdoor.CodeInternal, "internal error (id %s)", id)
}

// knownError is frontdoor.Known.
func knownError(err error) *apiError { return frontdoor.Known(err) }

// writeJSON writes v as the JSON response body with the given status.
//
// Only our own response types reach here, and they should always marshal;
// one that does not (a NaN or an infinity in a float field) is a bug, and
// the client gets a 500 with an id. The request's writer (statusWriter)
// keeps the failure, and instrument logs it under the same id once the
// handler returns: an answer nobody can read must not go unlogged.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		id := uuid.NewString()
		if sw := findStatusWriter(w); sw != nil {
			sw.encodeErr = &encodeFailure{id: id, what: fmt.Sprintf("%T", v), status: status, err: err}
		}
		status = http.StatusInternalServerError
		b, _ = json.Marshal(api.Error{Error: fmt.Sprintf("internal error: response encoding failed (id %s)", id), Code: frontdoor.CodeInternal})
	}
	writeJSONBytes(w, status, b)
}
