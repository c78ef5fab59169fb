package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/internal/base/openapi"
)

// The API's contract: every route of newRouter as an OpenAPI operation,
// with the Go types its handler decodes and encodes. internal/base/openapi
// turns the table into the document (docs/openapi.json, regenerated with
// `make openapi`), and the Server serves the same bytes at GET
// /v1/openapi.json. Tests hold the table to the router (every route has
// its operation and the reverse) and the handlers' answers to the
// documented schemas.

// OpenAPI is the API's OpenAPI 3.1 document.
func OpenAPI() ([]byte, error) {
	return openapi.Build(openapi.Doc{
		Title:   "tally",
		Version: "1",
		Description: "tally's HTTP API: one replica of a multi-region CRDT counter service. " +
			"Every answer is JSON but /metrics; every error is {\"error\",\"code\"} with a stable code " +
			"(x-tally-error-codes). Ids are 1..128 bytes of [A-Za-z0-9_.:@-]. docs/api.md says what each route means.",
		Operations: operations(),
		Errors:     errorCodes,
		ErrorBody:  api.Error{},
	})
}

// errorCodes are the codes of errors.go and windows.go, each with its
// status.
var errorCodes = []openapi.ErrorCode{
	{Code: frontdoor.CodeBadID, Status: 400, Meaning: "an id is not 1..128 bytes of [A-Za-z0-9_.:@-]"},
	{Code: frontdoor.CodeBadJSON, Status: 400, Meaning: "the body is not one JSON object of the right shape"},
	{Code: frontdoor.CodeUnknownField, Status: 400, Meaning: "the body has a field the route does not take"},
	{Code: frontdoor.CodeMissingField, Status: 400, Meaning: "a required field is absent"},
	{Code: frontdoor.CodeBadRequest, Status: 400, Meaning: "fields or parameters conflict or are out of range"},
	{Code: frontdoor.CodeBadBy, Status: 400, Meaning: "|by| is over 2^40"},
	{Code: frontdoor.CodeBadTime, Status: 400, Meaning: "a time, duration or step is malformed or out of range"},
	{Code: frontdoor.CodeUnknownZone, Status: 400, Meaning: "no replica of that region is known"},
	{Code: frontdoor.CodeBadTimeout, Status: 400, Meaning: "the Tally-Timeout-Ms header is not 1 to 86400000 milliseconds"},
	{Code: frontdoor.CodeInvalid, Status: 400, Meaning: "the replica rejected the operation"},
	{Code: frontdoor.CodeUnauthorized, Status: 401, Meaning: "a bearer token of the route's role is missing or wrong"},
	{Code: frontdoor.CodeUserBlocked, Status: 403, Meaning: "the user is blocked; nothing was applied"},
	{Code: frontdoor.CodeNotFound, Status: 404, Meaning: "no such route, or the feature is off on this replica"},
	{Code: frontdoor.CodeNoWindow, Status: 404, Meaning: "no slots of the key cover the range"},
	{Code: frontdoor.CodeMethodNotAllowed, Status: 405, Meaning: "the route exists, the method does not (see Allow)"},
	{Code: frontdoor.CodeInactiveType, Status: 409, Meaning: "the key's event type is inactive (PUT /v1/types/{name}); nothing was applied"},
	{Code: frontdoor.CodeIdempotencyMismatch, Status: 409, Meaning: "the idempotency key was applied with another amount; nothing was applied"},
	{Code: frontdoor.CodeBudgetExhausted, Status: 409, Meaning: "the budget has less left than the spend, as seen here; nothing was spent"},
	{Code: frontdoor.CodeCalledOff, Status: 409, Meaning: "a cashback under this key was refused across shards and called off, what it spent given back; a new purchase needs a new key"},
	{Code: frontdoor.CodeRightsElsewhere, Status: 409, Meaning: "enough is left, but other regions hold the rights; retry soon; nothing was spent"},
	{Code: frontdoor.CodeUnknownReplica, Status: 409, Meaning: "the handoff target is not a peer of this replica"},
	{Code: frontdoor.CodeExists, Status: 409, Meaning: "a backup's directory exists already; nothing was written"},
	{Code: frontdoor.CodeMoving, Status: 409, Meaning: "tallyd local: the region's shards move already; wait for that move (GET /v1/shards)"},
	{Code: frontdoor.CodeBodyTooLarge, Status: 413, Meaning: "the body is over max_body_bytes"},
	{Code: frontdoor.CodeMediaType, Status: 415, Meaning: "a write's Content-Type is not JSON"},
	{Code: frontdoor.CodeShardNotHeld, Status: 421, Meaning: "in a sharded region, a write of several keys not all on shards this replica holds; nothing was applied"},
	{Code: frontdoor.CodeOverflow, Status: 422, Meaning: "the counter entry would pass its cap; nothing was applied"},
	{Code: frontdoor.CodeRateLimited, Status: 429, Meaning: "over a rate limit of this replica; retry after Retry-After"},
	{Code: frontdoor.CodeInternal, Status: 500, Meaning: "a bug or an unexpected storage error, logged under the id in the message"},
	{Code: frontdoor.CodeNotReady, Status: 503, Meaning: "the replica is recovering (or a dependency is out of reach); retry"},
	{Code: frontdoor.CodeShuttingDown, Status: 503, Meaning: "the replica is closing; retry elsewhere"},
	{Code: frontdoor.CodeDraining, Status: 503, Meaning: "the replica is about to stop; send traffic elsewhere"},
	{Code: frontdoor.CodeStorageFailed, Status: 503, Meaning: "a commit failed; the replica must be restarted"},
	{Code: frontdoor.CodeReplicaIDConflict, Status: 503, Meaning: "another process runs with this replica's id"},
	{Code: frontdoor.CodeTimeout, Status: 503, Meaning: "no durable commit in time; the write may have applied"},
	{Code: frontdoor.CodeInProgress, Status: 503, Meaning: "a cashback under this key is still running at this replica; retry it with the same key"},
	{Code: frontdoor.CodeShardUnavailable, Status: 503, Meaning: "in a sharded region, no replica holding the key's shard is up; nothing was applied, and other regions still serve it"},
}

// event is one event of POST /v1/events, for the document only: the
// scanner (eventscan.go) reads these fields by hand, and a test holds
// the two to the same names.
type event struct {
	Type           string          `json:"type"` // like, unlike, toggle, incr, unique, grant, spend
	Item           *string         `json:"item"`
	VideoID        *string         `json:"videoId"`
	User           *string         `json:"user"`
	UserID         *string         `json:"userId"`
	Key            *string         `json:"key"`
	By             *int64          `json:"by"`
	IdempotencyKey *string         `json:"idempotency_key"`
	ID             *string         `json:"id"`
	At             json.RawMessage `json:"at"`
	Timestamp      json.RawMessage `json:"timestamp"`
}

// Parameter schemas.
var (
	idSchema   = map[string]any{"type": "string", "pattern": "^[A-Za-z0-9_.:@-]{1,128}$"}
	strSchema  = map[string]any{"type": "string"}
	intSchema  = map[string]any{"type": "integer"}
	kindSchema = map[string]any{"type": "string", "enum": []string{"likes", "counters"}}
)

func pathParam(name, desc string) openapi.Param {
	return openapi.Param{Name: name, In: "path", Description: desc, Schema: idSchema}
}

func query(name string, schema map[string]any, desc string) openapi.Param {
	return openapi.Param{Name: name, In: "query", Description: desc, Schema: schema}
}

// Parameters several routes share.
var (
	itemParam = pathParam("item", "the item")
	userParam = pathParam("user", "the user")
	keyParam  = pathParam("key", "the counter, unique-count or budget key")
	rangeQ    = []openapi.Param{
		query("last", strSchema, "the window ending now: 60s, 10m, 24h, 7d"),
		query("from", strSchema, "the window's start: RFC 3339 or unix ms (instead of last)"),
		query("to", strSchema, "the window's end (default now)"),
	}
	seriesQ = append(append([]openapi.Param{}, rangeQ...),
		query("step", strSchema, "the points' width (default 1m)"),
		query("by", map[string]any{"type": "string", "enum": []string{"region"}}, "region: split each point per region"))
	pageQ = []openapi.Param{
		query("limit", intSchema, "page size, 1..1000 (default 100)"),
		query("after", strSchema, "the next of the previous page"),
	}
	withMetaQ  = query("with", map[string]any{"type": "string", "enum": []string{"meta"}}, "meta: add each key's event type (GET /v1/types)")
	idemHeader = openapi.Param{Name: "Idempotency-Key", In: "header", Schema: idSchema,
		Description: "makes a retry count once (instead of idempotency_key; both must agree)"}
)

// Error codes several routes share.
var (
	// writeErrs: a write to the replica may meet these.
	writeErrs = []string{frontdoor.CodeNotReady, frontdoor.CodeShuttingDown, frontdoor.CodeStorageFailed, frontdoor.CodeReplicaIDConflict, frontdoor.CodeTimeout}
	// bodyErrs: a route that decodes a JSON body.
	bodyErrs = []string{frontdoor.CodeBadJSON, frontdoor.CodeUnknownField, frontdoor.CodeBodyTooLarge}
	// windowErrs: a route that reads a window or a series.
	windowErrs = []string{frontdoor.CodeBadID, frontdoor.CodeBadRequest, frontdoor.CodeBadTime, frontdoor.CodeNoWindow}
)

func errs(sets ...[]string) []string {
	var out []string
	for _, s := range sets {
		out = append(out, s...)
	}
	return out
}

func codes(cs ...string) []string { return cs }

// operations is every route of newRouter. The errors each lists are the
// route's own; route (below) adds those every route of its kind may
// answer (a token, a rate limit, a media type, an internal error).
func operations() []openapi.Operation {
	ops := []openapi.Operation{
		// Likes.
		{Method: "PUT", Path: "/v1/likes/{item}/{user}", Tag: "likes", Summary: "Like an item (idempotent)",
			Description: "The optional body gives the client's time of the like (at or timestamp), which orders it against the user's other actions of the item, and an idempotency key: a retry under it answers duplicate:true and the state the first left, whatever the user did since, for as long as idempotency keys are kept (idempotency_ttl).",
			Params:      ps(itemParam, userParam, idemHeader), Request: likeRequest{}, Response: api.Like{},
			Errors: errs(codes(frontdoor.CodeBadID, frontdoor.CodeBadRequest, frontdoor.CodeBadTime, frontdoor.CodeUserBlocked, frontdoor.CodeInactiveType), bodyErrs, writeErrs)},
		{Method: "DELETE", Path: "/v1/likes/{item}/{user}", Tag: "likes", Summary: "Unlike an item (idempotent)",
			Description: "The optional body gives the client's time of the unlike (at or timestamp), which orders it against the user's other actions of the item, and an idempotency key: a retry under it answers duplicate:true and the state the first left, whatever the user did since, for as long as idempotency keys are kept (idempotency_ttl).",
			Params:      ps(itemParam, userParam, idemHeader), Request: likeRequest{}, Response: api.Like{},
			Errors: errs(codes(frontdoor.CodeBadID, frontdoor.CodeBadRequest, frontdoor.CodeBadTime, frontdoor.CodeUserBlocked, frontdoor.CodeInactiveType), bodyErrs, writeErrs)},
		{Method: "POST", Path: "/v1/likes/{item}/{user}/toggle", Tag: "likes", Summary: "Flip the user's like of the item and answer the new state",
			Description: "One atomic step of the region's writer, ordered right after the state it flips (it takes no at). With an idempotency key a retry flips once: it answers duplicate:true and the state the toggle decided, whatever the user did since, for as long as idempotency keys are kept (idempotency_ttl).",
			Params:      ps(itemParam, userParam, idemHeader), Request: toggleRequest{}, Response: api.Like{},
			Errors: errs(codes(frontdoor.CodeBadID, frontdoor.CodeBadRequest, frontdoor.CodeUserBlocked, frontdoor.CodeInactiveType), bodyErrs, writeErrs)},
		{Method: "GET", Path: "/v1/likes/{item}/{user}", Tag: "likes", Summary: "Whether the user likes the item, as this replica sees it",
			Params: ps(itemParam, userParam), Response: api.Liked{}, Errors: codes(frontdoor.CodeBadID)},
		{Method: "GET", Path: "/v1/likes/{item}/{user}/history", Tag: "likes", Summary: "Every like and unlike of the pair, from every replica",
			Params:   ps(itemParam, userParam, query("limit", intSchema, "per replica, 1..1000 (default 100)")),
			Response: api.History{}, Errors: codes(frontdoor.CodeBadID, frontdoor.CodeBadRequest, frontdoor.CodeNotFound)},
		{Method: "POST", Path: "/v1/likes", Tag: "likes", Summary: "Like, seed style: the item in the body (videoId or item)",
			Request: seedLikeRequest{}, Body: true, RequestRequired: []string{"userId"}, Response: api.Like{},
			Errors: errs(codes(frontdoor.CodeBadID, frontdoor.CodeMissingField, frontdoor.CodeBadRequest, frontdoor.CodeBadTime, frontdoor.CodeUserBlocked, frontdoor.CodeInactiveType), bodyErrs, writeErrs)},
		{Method: "DELETE", Path: "/v1/likes/{item}", Tag: "likes", Summary: "Unlike, seed style: the user in the body",
			Params: ps(itemParam), Request: seedLikeRequest{}, Body: true, RequestRequired: []string{"userId"}, Response: api.Like{},
			Errors: errs(codes(frontdoor.CodeBadID, frontdoor.CodeMissingField, frontdoor.CodeBadRequest, frontdoor.CodeBadTime, frontdoor.CodeUserBlocked, frontdoor.CodeInactiveType), bodyErrs, writeErrs)},
		{Method: "GET", Path: "/v1/likes/{item}", Tag: "likes", Summary: "An item's like count",
			Params: ps(itemParam, withMetaQ), Response: api.Likes{}, Errors: codes(frontdoor.CodeBadID, frontdoor.CodeBadRequest)},
		{Method: "GET", Path: "/v1/likers/{item}", Tag: "likes", Summary: "One page of the users who like the item, in id order",
			Params: ps(append([]openapi.Param{itemParam}, pageQ...)...), Response: api.Likers{}, Errors: codes(frontdoor.CodeBadID, frontdoor.CodeBadRequest, frontdoor.CodeNotFound)},
		{Method: "GET", Path: "/v1/users/{user}/likes", Tag: "likes", Summary: "One page of the items the user likes, in id order",
			Params: ps(append([]openapi.Param{userParam}, pageQ...)...), Response: api.UserLikes{}, Errors: codes(frontdoor.CodeBadID, frontdoor.CodeBadRequest, frontdoor.CodeNotFound)},
		{Method: "GET", Path: "/v1/feed", Tag: "likes", Summary: "For each item (up to 100), its count and whether the user likes it",
			Params: ps(openapi.Param{Name: "user", In: "query", Required: true, Schema: idSchema},
				openapi.Param{Name: "items", In: "query", Required: true, Schema: strSchema, Description: "comma-separated items"}),
			Response: api.Feed{}, Errors: codes(frontdoor.CodeBadID, frontdoor.CodeBadRequest, frontdoor.CodeMissingField)},
		{Method: "POST", Path: "/v1/feed", Tag: "likes", Summary: "The feed of up to 1,000 items",
			Request: feedRequest{}, Body: true, RequestRequired: []string{"user", "items"}, Response: api.Feed{},
			Errors: errs(codes(frontdoor.CodeBadID, frontdoor.CodeBadRequest, frontdoor.CodeMissingField), bodyErrs)},

		// Counters and batches.
		{Method: "POST", Path: "/v1/counters/{key}/incr", Tag: "counters", Summary: "Add to a counter (by 1 without a body)",
			Params: ps(keyParam, idemHeader), Request: incrRequest{}, Response: api.Incr{},
			Errors: errs(codes(frontdoor.CodeBadID, frontdoor.CodeBadBy, frontdoor.CodeBadRequest, frontdoor.CodeBadTime, frontdoor.CodeIdempotencyMismatch, frontdoor.CodeOverflow, frontdoor.CodeInactiveType), bodyErrs, writeErrs)},
		{Method: "GET", Path: "/v1/counters/{key}", Tag: "counters", Summary: "A counter's value",
			Params: ps(keyParam, withMetaQ), Response: api.Counter{}, Errors: codes(frontdoor.CodeBadID, frontdoor.CodeBadRequest)},
		{Method: "POST", Path: "/v1/events", Tag: "counters",
			Summary:     "A batch of up to 10,000 events in one durable commit",
			Description: "A JSON array of events, or NDJSON (one event per line). An event with a bad id or type is rejected alone, with its own error and code in its result.",
			Request:     []event{}, Body: true, Response: api.EventsResult{},
			Errors: errs(codes(frontdoor.CodeBadRequest, frontdoor.CodeMissingField), bodyErrs, writeErrs)},

		// Windows, series, trending.
		{Method: "GET", Path: "/v1/likes/{item}/window", Tag: "windows", Summary: "An item's net change of likes over a window",
			Params: ps(append([]openapi.Param{itemParam}, rangeQ...)...), Response: api.Window{}, Errors: windowErrs},
		{Method: "GET", Path: "/v1/likes/{item}/series", Tag: "windows", Summary: "An item's likes as points for a chart",
			Params: ps(append([]openapi.Param{itemParam}, seriesQ...)...), Response: api.Series{}, Errors: windowErrs},
		{Method: "GET", Path: "/v1/counters/{key}/window", Tag: "windows", Summary: "A counter's net change over a window",
			Params: ps(append([]openapi.Param{keyParam}, rangeQ...)...), Response: api.Window{}, Errors: windowErrs},
		{Method: "GET", Path: "/v1/counters/{key}/series", Tag: "windows", Summary: "A counter as points for a chart",
			Params: ps(append([]openapi.Param{keyParam}, seriesQ...)...), Response: api.Series{}, Errors: windowErrs},
		{Method: "GET", Path: "/v1/window", Tag: "windows", Summary: "A window of any key, or of a family's total",
			Params:   ps(append([]openapi.Param{query("kind", kindSchema, ""), query("key", strSchema, "a key, or * (default): the family's total")}, rangeQ...)...),
			Response: api.Window{}, Errors: windowErrs},
		{Method: "GET", Path: "/v1/series", Tag: "windows", Summary: "Series of up to 100 keys in one call",
			Params: ps(append([]openapi.Param{query("kind", kindSchema, ""),
				query("key", map[string]any{"type": "array", "items": strSchema}, "repeated: key=a&key=b; * is the family's total")}, seriesQ...)...),
			Response: api.Series{}, Errors: windowErrs},
		{Method: "GET", Path: "/v1/trending", Tag: "windows", Summary: "The top keys by net change over a window",
			Params: ps(query("window", strSchema, "10m (default), up to 2h in minutes, 49h or day in hours, 31d in whole UTC days with today (7d: the week), all: all-time counts"),
				query("n", intSchema, "how many, 1..1000 (default 10)"), query("kind", kindSchema, ""),
				query("prefix", strSchema, "only keys that start with it"), query("region", strSchema, "only that region's replicas' entries"), withMetaQ),
			Response: api.Trending{}, Errors: codes(frontdoor.CodeBadID, frontdoor.CodeBadRequest, frontdoor.CodeBadTime, frontdoor.CodeUnknownZone)},

		// Unique counts.
		{Method: "POST", Path: "/v1/uniques/{key}", Tag: "uniques", Summary: "Add ids to a key's unique count",
			Params: ps(keyParam), Request: uniquesRequest{}, Body: true, Response: api.UniquesAdded{},
			Errors: errs(codes(frontdoor.CodeBadID, frontdoor.CodeBadRequest, frontdoor.CodeMissingField, frontdoor.CodeBadTime, frontdoor.CodeInactiveType), bodyErrs, writeErrs)},
		{Method: "GET", Path: "/v1/uniques/{key}", Tag: "uniques", Summary: "The distinct ids added to the key, estimated",
			Params:   ps(append([]openapi.Param{keyParam, query("by", map[string]any{"type": "string", "enum": []string{"region"}}, "region: add by_region")}, rangeQ...)...),
			Response: api.Uniques{}, Errors: errs(windowErrs, codes(frontdoor.CodeMissingField))},
		{Method: "GET", Path: "/v1/uniques", Tag: "uniques", Summary: "The distinct ids of the union of up to 100 keys",
			Params: ps(append([]openapi.Param{{Name: "keys", In: "query", Required: true, Schema: strSchema, Description: "comma-separated keys"},
				query("by", map[string]any{"type": "string", "enum": []string{"region"}}, "region: add by_region")}, rangeQ...)...),
			Response: api.Uniques{}, Errors: errs(windowErrs, codes(frontdoor.CodeMissingField))},

		// Budgets.
		{Method: "POST", Path: "/v1/budgets/{key}/grant", Tag: "budgets", Summary: "Add to a budget, once per idempotency key",
			Params: ps(keyParam, idemHeader), Request: grantRequest{}, Body: true, RequestRequired: []string{"by"}, Response: api.BudgetGrant{},
			Errors: errs(codes(frontdoor.CodeBadID, frontdoor.CodeBadBy, frontdoor.CodeBadRequest, frontdoor.CodeMissingField, frontdoor.CodeOverflow, frontdoor.CodeIdempotencyMismatch), bodyErrs, writeErrs)},
		{Method: "POST", Path: "/v1/budgets/{key}/spend", Tag: "budgets", Summary: "Spend from a budget, never overspent",
			Params: ps(keyParam, idemHeader), Request: spendRequest{}, Response: api.BudgetSpend{},
			Errors: errs(codes(frontdoor.CodeBadID, frontdoor.CodeBadBy, frontdoor.CodeBadRequest, frontdoor.CodeIdempotencyMismatch, frontdoor.CodeBudgetExhausted, frontdoor.CodeRightsElsewhere), bodyErrs, writeErrs),
			Bodies: refused},
		{Method: "GET", Path: "/v1/budgets/{key}", Tag: "budgets", Summary: "A budget's remaining and who holds the rights",
			Params: ps(keyParam), Response: api.Budget{}, Errors: codes(frontdoor.CodeBadID)},
		{Method: "POST", Path: "/v1/cashback", Tag: "budgets", Summary: "One purchase's cashback, all or nothing",
			Params: ps(idemHeader), Request: cashbackRequest{}, Body: true,
			RequestRequired: []string{"budget", "merchant", "user", "amount"}, Response: api.Cashback{},
			Errors: errs(codes(frontdoor.CodeBadID, frontdoor.CodeBadBy, frontdoor.CodeBadRequest, frontdoor.CodeMissingField, frontdoor.CodeIdempotencyMismatch,
				frontdoor.CodeBudgetExhausted, frontdoor.CodeRightsElsewhere, frontdoor.CodeOverflow, frontdoor.CodeBadTime, frontdoor.CodeCalledOff, frontdoor.CodeInProgress), bodyErrs, writeErrs),
			Bodies: refused},

		// The replica.
		{Method: "GET", Path: "/healthz", Tag: "replica", Summary: "Liveness: 503 only once the replica stopped",
			Response: api.Health{}, Errors: codes(frontdoor.CodeStorageFailed, frontdoor.CodeReplicaIDConflict)},
		{Method: "HEAD", Path: "/healthz", Tag: "replica", Summary: "Liveness as GET /healthz answers it, without a body (for probes that send HEAD)",
			NoBody: true, Errors: codes(frontdoor.CodeStorageFailed, frontdoor.CodeReplicaIDConflict)},
		{Method: "GET", Path: "/readyz", Tag: "replica", Summary: "Readiness: 200 only while the replica acknowledges writes",
			Response: api.Health{}, Errors: codes(frontdoor.CodeNotReady, frontdoor.CodeDraining, frontdoor.CodeShuttingDown, frontdoor.CodeStorageFailed, frontdoor.CodeReplicaIDConflict)},
		{Method: "HEAD", Path: "/readyz", Tag: "replica", Summary: "Readiness as GET /readyz answers it, without a body (for probes that send HEAD)",
			NoBody: true, Errors: codes(frontdoor.CodeNotReady, frontdoor.CodeDraining, frontdoor.CodeShuttingDown, frontdoor.CodeStorageFailed, frontdoor.CodeReplicaIDConflict)},
		{Method: "GET", Path: "/v1/status", Tag: "replica", Summary: "What this replica is and how it acknowledges writes",
			Response: api.Status{}},
		{Method: "GET", Path: "/v1/shards", Tag: "replica", Summary: "The region's shard map: which replicas hold each shard",
			Response: api.ShardMap{}},
		{Method: "GET", Path: "/v1/convergence", Tag: "replica", Summary: "Per peer, whether this replica's state matched it",
			Response: api.Convergence{}},
		{Method: "GET", Path: "/v1/milestones", Tag: "replica", Summary: "Every milestone fired, as this region has read them",
			Params: ps(query("limit", intSchema, "the newest N")), Response: api.Milestones{}, Errors: codes(frontdoor.CodeBadRequest, frontdoor.CodeNotFound)},
		{Method: "GET", Path: "/v1/sequences/{name}", Tag: "replica", Summary: "A numbered sequence's allocator state, read from the KV now",
			Params:   ps(openapi.Param{Name: "name", In: "path", Schema: strSchema, Description: "likes, or a configured sequence"}),
			Response: api.Sequence{}, Errors: codes(frontdoor.CodeNotFound, frontdoor.CodeNotReady)},
		{Method: "GET", Path: "/v1/openapi.json", Tag: "replica", Summary: "This document",
			Response: json.RawMessage{}},
		{Method: "GET", Path: "/metrics", Tag: "replica", Summary: "Prometheus metrics",
			ResponseText: "text/plain"},

		// Admin.
		{Method: "GET", Path: "/v1/audit", Tag: "admin", Summary: "This replica's own entries recomputed from its event log",
			Params: ps(query("kind", map[string]any{"type": "string", "enum": []string{"likes", "counters", "budgets"}}, "with key: audit one vector"),
				query("key", strSchema, "")),
			Response: api.Audit{}, Errors: codes(frontdoor.CodeBadID, frontdoor.CodeBadRequest, frontdoor.CodeNotFound)},
		{Method: "PUT", Path: "/v1/blocks/{user}", Tag: "admin", Summary: "Block the user in every region",
			Params: ps(userParam), Response: api.Block{}, Errors: errs(codes(frontdoor.CodeBadID), writeErrs)},
		{Method: "DELETE", Path: "/v1/blocks/{user}", Tag: "admin", Summary: "Unblock the user",
			Params: ps(userParam), Response: api.Block{}, Errors: errs(codes(frontdoor.CodeBadID), writeErrs)},
		{Method: "GET", Path: "/v1/blocks/{user}", Tag: "admin", Summary: "The user's block flag as this replica sees it",
			Params: ps(userParam), Response: api.Block{}, Errors: codes(frontdoor.CodeBadID)},
		{Method: "GET", Path: "/v1/blocks", Tag: "admin", Summary: "One page of the blocked users, in id order",
			Params: pageQ, Response: api.Blocks{}, Errors: codes(frontdoor.CodeBadID, frontdoor.CodeBadRequest)},
		{Method: "PUT", Path: "/v1/types/{name}", Tag: "types", Summary: "Register an event type, or update its metadata, in every region",
			Params: ps(pathParam("name", "the type: a counter key or item, or a prefix of keys ending at a ':'")), Request: typeRequest{}, Body: true,
			Response: api.EventType{}, Errors: errs(codes(frontdoor.CodeBadID, frontdoor.CodeBadRequest), bodyErrs, writeErrs)},
		{Method: "GET", Path: "/v1/types/{name}", Tag: "types", Summary: "An event type's metadata as this replica sees it",
			Params: ps(pathParam("name", "the type")), Response: api.EventType{}, Errors: codes(frontdoor.CodeBadID, frontdoor.CodeNotFound)},
		{Method: "GET", Path: "/v1/types/{name}/total", Tag: "types", Summary: "The all-time count of an event type: the sum over its keys, exact across regions",
			Params:   ps(pathParam("name", "the type"), query("kind", map[string]any{"type": "string", "enum": []string{"counters", "likes"}}, "the family whose keys are added up: counters (default) or likes")),
			Response: api.TypeTotal{}, Errors: codes(frontdoor.CodeBadID, frontdoor.CodeBadRequest, frontdoor.CodeNotFound)},
		{Method: "GET", Path: "/v1/types/{name}/window", Tag: "types", Summary: "The net change of an event type over a window: the sum over its keys, exact across regions",
			Params:   ps(append([]openapi.Param{pathParam("name", "the type"), query("kind", map[string]any{"type": "string", "enum": []string{"counters", "likes"}}, "the family whose keys are added up: counters (default) or likes")}, rangeQ...)...),
			Response: api.TypeWindow{}, Errors: errs(windowErrs, codes(frontdoor.CodeNotFound))},
		{Method: "GET", Path: "/v1/types", Tag: "types", Summary: "One page of the event types, in name order",
			Params: pageQ, Response: api.EventTypes{}, Errors: codes(frontdoor.CodeBadID, frontdoor.CodeBadRequest)},
		{Method: "PUT", Path: "/v1/admin/budgets/handoff", Tag: "admin", Summary: "Hand every budget right this replica holds to a peer",
			Request: handoffRequest{}, Body: true, RequestRequired: []string{"to"}, Response: api.BudgetHandoff{},
			Errors: errs(codes(frontdoor.CodeBadID, frontdoor.CodeMissingField, frontdoor.CodeUnknownReplica), bodyErrs, writeErrs)},
		{Method: "GET", Path: "/v1/admin/budgets/handoff", Tag: "admin", Summary: "The handoff target and the rights still held",
			Response: api.BudgetHandoff{}},
		{Method: "DELETE", Path: "/v1/admin/budgets/handoff", Tag: "admin", Summary: "Stop handing rights off",
			Response: api.BudgetHandoff{}, Errors: writeErrs},
		{Method: "POST", Path: "/v1/admin/backup", Tag: "admin", Summary: "Write a checkpoint of this replica's store into a new directory on its machine, ready to restore",
			Request: backupRequest{}, Body: true, RequestRequired: []string{"dir"}, Response: api.Backup{},
			Errors: errs(codes(frontdoor.CodeMissingField, frontdoor.CodeBadRequest, frontdoor.CodeExists), bodyErrs, writeErrs)},
		{Method: "POST", Path: "/v1/admin/import", Tag: "admin",
			Summary:     "Backfill: events of POST /v1/events booked at their own times, however old, once",
			Description: "The body of POST /v1/events (NDJSON or a JSON array), whose event times may be any past time. A line with an item (videoId) and a user (userId) but no type is a like. An increment without an idempotency_key gets one derived from its line's bytes and how many identical lines came before it, so a second import of the same lines changes nothing. Grant and spend events are rejected. In a sharded region, the replica must hold every key of the batch.",
			Request:     []event{}, Body: true, Response: api.EventsResult{},
			Errors: errs(codes(frontdoor.CodeBadRequest, frontdoor.CodeMissingField, frontdoor.CodeShardNotHeld), bodyErrs, writeErrs)},
		{Method: "GET", Path: "/v1/admin/links", Tag: "admin", Summary: "tallyd local only: the inter-region links",
			Response: api.Links{}, Errors: codes(frontdoor.CodeNotFound)},
		{Method: "PUT", Path: "/v1/admin/links/{a}/{b}", Tag: "admin", Summary: "tallyd local only: cut or heal a link",
			Params: ps(pathParam("a", "a region"), pathParam("b", "another region")), Request: linkRequest{}, Body: true,
			RequestRequired: []string{"up"}, Response: api.Link{}, Errors: errs(codes(frontdoor.CodeBadID, frontdoor.CodeMissingField, frontdoor.CodeNotFound), bodyErrs)},
		{Method: "GET", Path: "/v1/admin/replicas", Tag: "admin", Summary: "tallyd local only: every replica and its state",
			Response: api.Replicas{}, Errors: codes(frontdoor.CodeNotFound)},
		{Method: "PUT", Path: "/v1/admin/replicas/{replica}", Tag: "admin", Summary: "tallyd local only: stop or start a replica",
			Params: ps(pathParam("replica", "a replica of the deployment")), Request: linkRequest{}, Body: true,
			RequestRequired: []string{"up"}, Response: api.ReplicaState{}, Errors: errs(codes(frontdoor.CodeBadID, frontdoor.CodeMissingField, frontdoor.CodeNotFound), bodyErrs)},
		{Method: "PUT", Path: "/v1/admin/shards/{region}", Tag: "admin", Summary: "tallyd local only: begin moving a region's shards while it serves (GET /v1/shards shows the move)",
			Params: ps(pathParam("region", "a sharded region")), Request: shardMoveRequest{}, Body: true,
			Response: api.ShardMove{}, Errors: errs(codes(frontdoor.CodeBadID, frontdoor.CodeBadRequest, frontdoor.CodeMoving, frontdoor.CodeNotFound), bodyErrs)},
		{Method: "PUT", Path: "/v1/admin/chaos/clock", Tag: "admin", Summary: "Chaos builds only: offset the replica's wall clock",
			Request: chaosClockRequest{}, Body: true, RequestRequired: []string{"offset_ms"}, Response: chaosClockRequest{},
			Errors: errs(codes(frontdoor.CodeMissingField), bodyErrs)},
	}
	for i := range ops {
		route(&ops[i])
	}
	return ops
}

// refused is the body of a budget's 409s.
var refused = map[string]any{frontdoor.CodeBudgetExhausted: api.BudgetRefused{}, frontdoor.CodeRightsElsewhere: api.BudgetRefused{}}

func ps(p ...openapi.Param) []openapi.Param { return p }

// publicRoutes are the paths newRouter registers through Public: the
// probes and the metrics.
var publicRoutes = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// route sets what an operation's path and method decide, as the router's
// middleware does: its role (requireRead, RequireWrite, RequireAdmin), the
// errors every route of its kind may answer, and the rate limit of its
// class (routeClass).
func route(op *openapi.Operation) {
	admin := strings.HasPrefix(op.Path, "/v1/admin/") || strings.HasPrefix(op.Path, "/v1/blocks") || op.Path == "/v1/audit" ||
		op.Path == "/v1/types/{name}" && op.Method == http.MethodPut
	switch {
	case admin:
		op.Role = "admin"
	case publicRoutes[op.Path]:
		// Registered through Public: no token ever.
	case op.Method == http.MethodGet, op.Path == "/v1/feed":
		// A read, whatever its method: requireRead guards every route
		// not registered through RequireWrite or Public.
		op.Role = "read"
	default:
		op.Role = "write"
	}
	more := []string{frontdoor.CodeBadTimeout} // clientTimeout runs on every route
	if op.Role != "" {
		more = append(more, frontdoor.CodeUnauthorized)
	}
	if op.Method != http.MethodGet {
		more = append(more, frontdoor.CodeMediaType)
	}
	if routeClass(op.Method, op.Path) != "" {
		more = append(more, frontdoor.CodeRateLimited)
	}
	if op.Path != "/metrics" {
		more = append(more, frontdoor.CodeInternal)
	}
	// In a sharded region a request of one key may find no holder up,
	// and a write of several refused where not all are held.
	multi := op.Method == http.MethodGet && (op.Path == "/v1/window" || op.Path == "/v1/series" || op.Path == "/v1/uniques")
	if strings.Contains(op.Path, "{item}") || strings.Contains(op.Path, "{key}") || op.Method == http.MethodPost && op.Path == "/v1/likes" || multi {
		more = append(more, frontdoor.CodeShardUnavailable)
	}
	if op.Method == http.MethodPost && (op.Path == "/v1/events" || op.Path == "/v1/cashback") || multi && op.Path != "/v1/uniques" {
		more = append(more, frontdoor.CodeShardNotHeld)
	}
	op.Errors = append(op.Errors, more...)
	if op.Role != "" {
		op.Description = strings.TrimSpace(op.Description + fmt.Sprintf(" Needs a %s token when the replica sets one.", op.Role))
	}
}

// GET /v1/openapi.json: this API's OpenAPI 3.1 document.
func (s *Server) getOpenAPI(w http.ResponseWriter, _ *http.Request) error {
	s.openapi.once.Do(func() { s.openapi.doc, s.openapi.err = OpenAPI() })
	if s.openapi.err != nil {
		return fmt.Errorf("build the OpenAPI document: %w", s.openapi.err)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(s.openapi.doc)
	return nil
}
