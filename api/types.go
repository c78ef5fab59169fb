// The shapes of event types, blocks and POST /v1/events.

package api

import "time"

// EventsResult answers POST /v1/events.
type EventsResult struct {
	Applied  int           `json:"applied"`
	Rejected int           `json:"rejected"`
	Results  []EventResult `json:"results"`
}

// EventResult is one event's outcome, in event order.
type EventResult struct {
	OK bool `json:"ok"`
	// Value: the counter's value (incr) or the item's count (like, unlike).
	Value int64 `json:"value"`
	// Liked (toggle, and a like or unlike with an idempotency key): the
	// user's state after it. Before changed, as a batch's answer is
	// written (httpapi's appendEventsAnswer), so a batch split over
	// shards reads byte for byte as one replica's.
	Liked *bool `json:"liked,omitempty"`
	// Changed (likes, toggles): the user's state changed in this
	// replica's view.
	Changed bool `json:"changed,omitempty"`
	// Duplicate (incr, spend, toggle): the idempotency key was seen
	// before.
	Duplicate bool `json:"duplicate,omitempty"`
	// Approx and Counted (incr of an approximate counter) as for Incr,
	// except that Counted is absent when the increment counted nothing
	// (most do, on a hot counter: the batch answer stays small).
	Approx  bool   `json:"approx,omitempty"`
	Counted *int64 `json:"counted,omitempty"`
	// Error and Code say why a rejected event was rejected.
	Error string `json:"error,omitempty"`
	Code  string `json:"code,omitempty"`
}

// Block answers PUT, DELETE and GET /v1/blocks/{user}: the user's block
// flag as this replica sees it. A blocked user's likes do not count in any
// region once the flag has reached it, and their likes and unlikes are
// refused (403 user_blocked) wherever it has.
type Block struct {
	User    string `json:"user"`
	Blocked bool   `json:"blocked"`
	// Changed (PUT and DELETE only): the blocked state changed in this
	// replica's view.
	Changed bool `json:"changed,omitempty"`
	// HLC and Replica are the stamp ("<unix ms>.<logical>") and the
	// replica of the block or unblock that decides the state: of two, the
	// larger stamp wins, ties by replica id. Absent if the user was never
	// blocked.
	HLC     string     `json:"hlc,omitempty"`
	Replica string     `json:"replica,omitempty"`
	At      *time.Time `json:"at,omitempty"`
}

// Blocks answers GET /v1/blocks: one page of the blocked users, in id
// order.
type Blocks struct {
	Users []Block `json:"users"`
	// Next is the cursor of the next page (?after=), absent on the last.
	Next string `json:"next,omitempty"`
}

// TypeTotal is the all-time count of an event type: the sum over the
// keys of one family that belong to the type (GET /v1/types/{name}/total).
type TypeTotal struct {
	Type  string `json:"type"`
	Kind  string `json:"kind"` // "counters" or "likes"
	Value int64  `json:"value"`
	// Keys is how many keys were added up (an item's parts one each).
	Keys     int              `json:"keys"`
	Regions  map[string]int64 `json:"regions"`
	Replicas map[string]PN    `json:"replicas"`
	// Approx: some of the keys are approximate counters, so the sum is
	// an estimate; or Partial; or a peer is unheard-from, so the sum
	// may still move.
	Approx bool `json:"approx"`
	// Partial (a sharded region): replicas holding some of the shards
	// did not answer in time, so keys of MissingShards shards are left
	// out.
	Partial       bool `json:"partial,omitempty"`
	MissingShards int  `json:"missing_shards,omitempty"`
}

// TypeWindow answers GET /v1/types/{name}/window: the net change of an
// event type over a window, the sum of its keys' windows, every key read
// over the same slots.
type TypeWindow struct {
	Type string `json:"type"`
	Kind string `json:"kind"` // "counters" or "likes"
	// Value is the net change of the type's keys in the window.
	Value int64 `json:"value"`
	// Keys is how many keys were added up (an item's parts one each).
	Keys int       `json:"keys"`
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// SlotWidth is the width of the slots of the type's name (as of a
	// key of that name, Window): the bounds are the asked ones widened
	// to whole slots of it.
	SlotWidth string           `json:"bucket"`
	Regions   map[string]int64 `json:"regions"`
	Replicas  map[string]PN    `json:"replicas"`
	// Approx: the value may still move (a peer is unheard-from, a
	// record of a key is unreconciled, or Partial), or Mode is approx.
	Approx bool `json:"approx"`
	// Final: the window ended long enough ago that no event can still be
	// booked into it, and nothing is moving: the value will not move.
	Final        bool `json:"final"`
	Unreconciled int  `json:"unreconciled,omitempty"`
	// Mode is "approx" if some of the keys are approximate counters.
	Mode string `json:"mode,omitempty"`
	// Partial and MissingShards as for TypeTotal.
	Partial       bool `json:"partial,omitempty"`
	MissingShards int  `json:"missing_shards,omitempty"`
}

// EventType answers PUT and GET /v1/types/{name}: an event type's
// metadata. A counter key or item belongs to the type of its own name,
// else of its longest registered prefix ending at a ':' ("video" and
// "video:" cover "video:v123"). Writes to a key whose type is inactive are
// refused (409 inactive_type).
type EventType struct {
	Name        string `json:"name"`
	Owner       string `json:"owner"`
	Status      string `json:"status"` // "active" or "inactive"
	Description string `json:"description"`
	// Changed (PUT only): the texts changed in this replica's view.
	Changed bool `json:"changed,omitempty"`
	// HLC and Replica are the stamp and the replica of the write that
	// decides the metadata: of two, the larger stamp wins, ties by
	// replica id. At is the stamp's wall time.
	HLC     string     `json:"hlc,omitempty"`
	Replica string     `json:"replica,omitempty"`
	At      *time.Time `json:"at,omitempty"`
}

// EventTypes answers GET /v1/types: one page of the registered types, in
// name order.
type EventTypes struct {
	Types []EventType `json:"types"`
	// Next is the cursor of the next page (?after=), absent on the last.
	Next string `json:"next,omitempty"`
}

// TypeMeta is the metadata of the type a key belongs to, in reads with
// ?with=meta.
type TypeMeta struct {
	Type        string `json:"type"`
	Owner       string `json:"owner"`
	Status      string `json:"status"`
	Description string `json:"description"`
}
