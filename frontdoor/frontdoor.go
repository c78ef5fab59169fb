// Package frontdoor is what tally's front doors share: the error codes
// of the API, the one mapping of replica errors to a status, a code and a
// message, the checks of ids and amounts every route and command makes,
// the route classes of the rate limits, and the bounds on a request. The
// HTTP API (package httpapi) and the Redis protocol (package resp) each
// answer in their own protocol from these, so a client sees the same
// codes and words at either door; neither door imports the other.
package frontdoor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tally-dev/tally/crdt"
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
	CodeBadTime             = "bad_time"               // 400: a time, duration or step is malformed or out of range
	CodeNoWindow            = "no_window"              // 404: no slots of the key cover the range
	CodeUnknownZone         = "unknown_region"         // 400: no replica of that region is known
	CodeShardUnavailable    = "shard_unavailable"      // 503: no replica of this region holding the key's shard is up (nothing applied); other regions still serve it
)

// Defaults of a front door's bounds on a request.
const (
	DefaultMaxBodyBytes   = 1 << 20 // 1 MiB
	DefaultRequestTimeout = 10 * time.Second
)

// Route classes a rate limit applies to.
const (
	ClassWrite = "write" // every route that changes state, but the admin routes (links, blocks)
	ClassRead  = "read"  // GETs that read one key or the replica's status
	ClassScan  = "scan"  // reads that scan: lists, windows, series, trending, feed, history, union, audit
)

// LimitClasses are the route classes, in the order /v1/status shows them.
var LimitClasses = []string{ClassWrite, ClassRead, ClassScan}

// Error is a refusal with its HTTP status, its code and its message;
// RetryAfter, in seconds, is the Retry-After a client is given (0: none).
type Error struct {
	Status     int
	Code       string
	Msg        string
	RetryAfter int
}

func (e *Error) Error() string { return e.Msg }

// Errorf is an Error of status and code with a formatted message.
func Errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Describe is the stable code and the message an error body carries for
// err. ok is false for an error it does not know: an internal one, which
// the caller logs.
func Describe(err error) (code, msg string, ok bool) {
	if e := Known(err); e != nil {
		return e.Code, e.Msg, true
	}
	return "", "", false
}

// Known is the Error of an error a front door or the replica returned,
// nil for any other (an internal one, which the caller logs).
func Known(err error) *Error {
	var ae *Error
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, region.ErrNotReady):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeNotReady, RetryAfter: 1,
			Msg: "replica is recovering its state from peers and not accepting writes yet; retry shortly"}
	case errors.Is(err, region.ErrClosed):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeShuttingDown, RetryAfter: 1,
			Msg: "replica is shutting down; retry"}
	case errors.Is(err, region.ErrIDConflict):
		return Errorf(http.StatusServiceUnavailable, CodeReplicaIDConflict,
			"another process runs with this replica's id; this one stopped: %s", strings.TrimPrefix(err.Error(), "region: "))
	case errors.Is(err, region.ErrFailed):
		return Errorf(http.StatusServiceUnavailable, CodeStorageFailed,
			"replica storage failed; it stopped writing and must be restarted")
	case errors.Is(err, region.ErrNotHeld):
		return Errorf(http.StatusMisdirectedRequest, CodeShardNotHeld,
			"%s; nothing was applied: send it to a holder (GET /v1/shards)", strings.TrimPrefix(err.Error(), "region: "))
	case errors.Is(err, region.ErrOverflow):
		return Errorf(http.StatusUnprocessableEntity, CodeOverflow,
			"%s; nothing was applied", strings.TrimPrefix(err.Error(), "region: "))
	case errors.Is(err, region.ErrBadTime):
		return Errorf(http.StatusBadRequest, CodeBadTime, "%s", strings.TrimPrefix(err.Error(), "region: "))
	case errors.Is(err, region.ErrInvalid):
		return Errorf(http.StatusBadRequest, CodeInvalid, "%s", strings.TrimPrefix(err.Error(), "region: "))
	case errors.Is(err, region.ErrNoLists):
		return Errorf(http.StatusNotFound, CodeNotFound, "like lists are off on this replica (like_lists = false)")
	case errors.Is(err, region.ErrNoLog):
		return Errorf(http.StatusNotFound, CodeNotFound, "the event log is off on this replica (event_log = false)")
	case errors.Is(err, region.ErrInactiveType):
		return Errorf(http.StatusConflict, CodeInactiveType, "%s; writes to it are refused and nothing was applied", strings.TrimPrefix(err.Error(), "region: "))
	case errors.Is(err, region.ErrBlocked):
		return Errorf(http.StatusForbidden, CodeUserBlocked, "this user is blocked; their likes and unlikes are refused and nothing was applied")
	case errors.Is(err, region.ErrBudgetExhausted):
		return Errorf(http.StatusConflict, CodeBudgetExhausted, "budget exhausted; nothing was spent")
	case errors.Is(err, region.ErrRightsElsewhere):
		return Errorf(http.StatusConflict, CodeRightsElsewhere, "other regions hold the budget's rights; retry soon; nothing was spent")
	case errors.Is(err, region.ErrFenced):
		return Errorf(http.StatusConflict, CodeCalledOff, "a cashback under this idempotency key was refused and called off "+
			"(what it spent was given back); nothing was applied; a new purchase needs a new key")
	case errors.Is(err, purchase.ErrInProgress):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeInProgress, RetryAfter: 5,
			Msg: "this cashback is still running at this replica; retry it with the same idempotency key shortly"}
	case errors.Is(err, purchase.ErrUnfinished):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeTimeout, RetryAfter: 5,
			Msg: "the cashback's balances are on several shards and not every holder answered in time: it may have spent; " +
				"retry it with the same idempotency key (or it finishes by itself)"}
	case errors.Is(err, region.ErrIdempotencyMismatch):
		return Errorf(http.StatusConflict, CodeIdempotencyMismatch, "%s; nothing was applied", strings.TrimPrefix(err.Error(), "region: "))
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeTimeout, RetryAfter: 1,
			Msg: "timed out waiting for the durable commit; the operation may or may not have been applied " +
				"(likes and unlikes are safe to retry; retry increments with the same idempotency key)"}
	}
	return nil
}

// IDRule is how error messages describe a valid id.
const IDRule = "1..128 bytes of [A-Za-z0-9_.:@-]"

// CheckID validates an id as every route and command does and names the
// field in the error (code bad_id).
func CheckID(field, v string) error {
	if crdt.ValidID(v) {
		return nil
	}
	if v == "" {
		return Errorf(http.StatusBadRequest, CodeBadID, "%s is empty; want %s", field, IDRule)
	}
	return Errorf(http.StatusBadRequest, CodeBadID, "%s %s is not valid; want %s", field, QuoteShort(v), IDRule)
}

// QuoteShort quotes v for an error message, cut to a readable length.
func QuoteShort(v string) string {
	const max = 64
	if len(v) > max {
		return fmt.Sprintf("%q... (%d bytes)", v[:max], len(v))
	}
	return fmt.Sprintf("%q", v)
}

// CheckBy refuses an increment the replica would refuse, |by| >
// region.MaxBy, with code bad_by.
func CheckBy(by int64) error {
	if by > region.MaxBy || by < -region.MaxBy {
		return Errorf(http.StatusBadRequest, CodeBadBy, "by %d is out of range; want |by| <= %d", by, int64(region.MaxBy))
	}
	return nil
}
