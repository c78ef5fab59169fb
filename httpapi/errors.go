package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/purchase"
	"github.com/tally-dev/tally/region"
)

// Error codes: the "code" field of every error body. They are part of the
// API; messages are for humans and may change.
const (
	CodeBadID               = "bad_id"                 // 400: an id is not 1..128 bytes of [A-Za-z0-9_.:@-]
	CodeBadJSON             = "bad_json"               // 400: body is not one JSON object of the right shape
	CodeUnknownField        = "unknown_field"          // 400: body has a field the route does not take
	CodeMissingField        = "missing_field"          // 400: a required body field is absent
	CodeBadRequest          = "bad_request"            // 400: fields conflict (e.g. both videoId and item)
	CodeBadBy               = "bad_by"                 // 400: |by| > region.MaxBy
	CodeBadTimeout          = "bad_timeout"            // 400: Tally-Timeout-Ms is not 1 to 86400000 milliseconds
	CodeInvalid             = "invalid"                // 400: the replica rejected the operation
	CodeUnauthorized        = "unauthorized"           // 401: missing or wrong bearer token
	CodeUserBlocked         = "user_blocked"           // 403: the user is blocked (admin block list); nothing was applied
	CodeInactiveType        = "inactive_type"          // 409: the key's event type is inactive; nothing was applied
	CodeNotFound            = "not_found"              // 404: no such route
	CodeMethodNotAllowed    = "method_not_allowed"     // 405: route exists, method does not (see Allow)
	CodeIdempotencyMismatch = "idempotency_mismatch"   // 409: the key was applied with another amount
	CodeBudgetExhausted     = "budget_exhausted"       // 409: the budget has less left than the spend (as seen here)
	CodeCalledOff           = "called_off"             // 409: a cashback under this key was refused and called off; a new purchase needs a new key
	CodeRightsElsewhere     = "rights_elsewhere"       // 409: enough left, but other regions hold the rights; retry soon
	CodeUnknownReplica      = "unknown_replica"        // 409: a handoff target this replica does not replicate with
	CodeExists              = "exists"                 // 409: a backup's directory exists already
	CodeMoving              = "moving"                 // 409: the region's shards move already (tallyd local)
	CodeBodyTooLarge        = "body_too_large"         // 413: body over MaxBodyBytes
	CodeMediaType           = "unsupported_media_type" // 415: a write's Content-Type is not JSON
	CodeShardNotHeld        = "shard_not_held"         // 421: a write of keys on shards this replica does not hold, that it cannot forward (a batch over several shards); send each key to a holder
	CodeOverflow            = "overflow"               // 422: the counter entry would pass region.EntryCap
	CodeRateLimited         = "rate_limited"           // 429: over a rate limit of this replica; retry after Retry-After
	CodeInternal            = "internal"               // 500: a bug or an unexpected storage error; logged
	CodeNotReady            = "not_ready"              // 503: replica recovering, retry (Retry-After)
	CodeShuttingDown        = "shutting_down"          // 503: replica closing, retry elsewhere (Retry-After)
	CodeDraining            = "draining"               // 503 from /readyz: replica about to stop; send traffic elsewhere
	CodeStorageFailed       = "storage_failed"         // 503: a commit failed; the replica must restart
	CodeReplicaIDConflict   = "replica_id_conflict"    // 503: another process holds this replica id
	CodeTimeout             = "timeout"                // 503: no commit in time; the write may have applied
	CodeInProgress          = "in_progress"            // 503: a cashback under this key is still running here; retry with the same key (Retry-After)
	CodeShardUnavailable    = "shard_unavailable"      // 503: no replica of this region holding the key's shard is up (nothing applied); other regions still serve it
)

// apiError is an error with its HTTP status and code.
type apiError struct {
	status     int
	code       string
	msg        string
	retryAfter int // seconds; 0 = no Retry-After header
}

func (e *apiError) Error() string { return e.msg }

func newError(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, msg: fmt.Sprintf(format, args...)}
}

var errNotFound = newError(http.StatusNotFound, CodeNotFound, "no such route")

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
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	if e.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="tally"`)
	}
	writeJSON(w, e.status, api.Error{Error: e.msg, Code: e.code})
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
	return newError(http.StatusInternalServerError, CodeInternal, "internal error (id %s)", id)
}

// Describe is the stable code and the message an HTTP error body would
// carry for err, for another front door of the replica (package resp)
// that answers the same errors in its own protocol. ok is false for an
// error it does not know: an internal one, which the caller logs.
func Describe(err error) (code, msg string, ok bool) {
	if e := knownError(err); e != nil {
		return e.code, e.msg, true
	}
	return "", "", false
}

// knownError is the apiError of an error this package or the replica
// returned, nil for any other.
func knownError(err error) *apiError {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, region.ErrNotReady):
		return &apiError{status: http.StatusServiceUnavailable, code: CodeNotReady, retryAfter: 1,
			msg: "replica is recovering its state from peers and not accepting writes yet; retry shortly"}
	case errors.Is(err, region.ErrClosed):
		return &apiError{status: http.StatusServiceUnavailable, code: CodeShuttingDown, retryAfter: 1,
			msg: "replica is shutting down; retry"}
	case errors.Is(err, region.ErrIDConflict):
		return newError(http.StatusServiceUnavailable, CodeReplicaIDConflict,
			"another process runs with this replica's id; this one stopped: %s", strings.TrimPrefix(err.Error(), "region: "))
	case errors.Is(err, region.ErrFailed):
		return newError(http.StatusServiceUnavailable, CodeStorageFailed,
			"replica storage failed; it stopped writing and must be restarted")
	case errors.Is(err, region.ErrNotHeld):
		return newError(http.StatusMisdirectedRequest, CodeShardNotHeld,
			"%s; nothing was applied: send it to a holder (GET /v1/shards)", strings.TrimPrefix(err.Error(), "region: "))
	case errors.Is(err, region.ErrOverflow):
		return newError(http.StatusUnprocessableEntity, CodeOverflow,
			"%s; nothing was applied", strings.TrimPrefix(err.Error(), "region: "))
	case errors.Is(err, region.ErrBadTime):
		return newError(http.StatusBadRequest, CodeBadTime, "%s", strings.TrimPrefix(err.Error(), "region: "))
	case errors.Is(err, region.ErrInvalid):
		return newError(http.StatusBadRequest, CodeInvalid, "%s", strings.TrimPrefix(err.Error(), "region: "))
	case errors.Is(err, region.ErrNoLists):
		return newError(http.StatusNotFound, CodeNotFound, "like lists are off on this replica (like_lists = false)")
	case errors.Is(err, region.ErrNoLog):
		return newError(http.StatusNotFound, CodeNotFound, "the event log is off on this replica (event_log = false)")
	case errors.Is(err, region.ErrInactiveType):
		return newError(http.StatusConflict, CodeInactiveType, "%s; writes to it are refused and nothing was applied", strings.TrimPrefix(err.Error(), "region: "))
	case errors.Is(err, region.ErrBlocked):
		return newError(http.StatusForbidden, CodeUserBlocked, "this user is blocked; their likes and unlikes are refused and nothing was applied")
	case errors.Is(err, region.ErrBudgetExhausted):
		return newError(http.StatusConflict, CodeBudgetExhausted, "budget exhausted; nothing was spent")
	case errors.Is(err, region.ErrRightsElsewhere):
		return newError(http.StatusConflict, CodeRightsElsewhere, "other regions hold the budget's rights; retry soon; nothing was spent")
	case errors.Is(err, region.ErrFenced):
		return newError(http.StatusConflict, CodeCalledOff, "a cashback under this idempotency key was refused and called off "+
			"(what it spent was given back); nothing was applied; a new purchase needs a new key")
	case errors.Is(err, purchase.ErrInProgress):
		return &apiError{status: http.StatusServiceUnavailable, code: CodeInProgress, retryAfter: 5,
			msg: "this cashback is still running at this replica; retry it with the same idempotency key shortly"}
	case errors.Is(err, purchase.ErrUnfinished):
		return &apiError{status: http.StatusServiceUnavailable, code: CodeTimeout, retryAfter: 5,
			msg: "the cashback's balances are on several shards and not every holder answered in time: it may have spent; " +
				"retry it with the same idempotency key (or it finishes by itself)"}
	case errors.Is(err, region.ErrIdempotencyMismatch):
		return newError(http.StatusConflict, CodeIdempotencyMismatch, "%s; nothing was applied", strings.TrimPrefix(err.Error(), "region: "))
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return &apiError{status: http.StatusServiceUnavailable, code: CodeTimeout, retryAfter: 1,
			msg: "timed out waiting for the durable commit; the operation may or may not have been applied " +
				"(likes and unlikes are safe to retry; retry increments with the same idempotency key)"}
	}
	return nil
}

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
		b, _ = json.Marshal(api.Error{Error: fmt.Sprintf("internal error: response encoding failed (id %s)", id), Code: CodeInternal})
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
