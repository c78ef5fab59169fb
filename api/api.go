// Package api holds the JSON shapes of tally's HTTP API, shared by the
// server (httpapi), the Go client (client) and tests. It imports nothing
// of tally's, so a client program links none of the server.
//
// Every error answer is an Error. Field comments say what a value means;
// docs/architecture.md says why.
package api

import "time"

// TimeoutHeader is a request header: how long, in milliseconds, the
// client waits for the answer. A write whose client has given up by then
// is not applied once it reaches the writer, even when it sat at a paused
// or slow replica (or at a holder it was forwarded to) until after the
// client retried it and went on. Without it a write the client gave up on
// may still apply up to the server's request timeout later, after the
// client's next actions. package client sends it from its context's
// deadline.
const TimeoutHeader = "Tally-Timeout-Ms"

// Error is the body of every 4xx and 5xx answer.
type Error struct {
	// Error is for humans.
	Error string `json:"error"`
	// Code is stable, for programs: bad_id, not_ready, storage_failed, ...
	Code string `json:"code"`
}

// PN is one replica's entry of a vector: what it added (P) and subtracted
// (N). A count is the sum of P minus the sum of N over all replicas.
type PN struct {
	P uint64 `json:"p"`
	N uint64 `json:"n"`
}

// Like answers PUT and DELETE /v1/likes/{item}/{user}.
type Like struct {
	Item  string `json:"item"`
	User  string `json:"user"`
	Liked bool   `json:"liked"`
	// Changed: the user's state changed in this replica's view.
	Changed bool `json:"changed"`
	// Count is the item's count after the operation; for an item split
	// into parts (hot), the count of the user's part only: read GET
	// /v1/likes/{item} for the item's.
	Count int64 `json:"count"`
	// Part and Parts, for a split item: the part the like went to, of
	// how many.
	Part  *int `json:"part,omitempty"`
	Parts int  `json:"parts,omitempty"`
	// Duplicate (toggle): the idempotency key is the one of the toggle
	// that decided the user's state as this replica sees it; nothing was
	// flipped, and Liked is that state.
	Duplicate bool `json:"duplicate,omitempty"`
}

// Likes answers GET /v1/likes/{item}.
type Likes struct {
	Item  string `json:"item"`
	Count int64  `json:"count"`
	// Approx: the count may still move (a record is unreconciled, a peer is
	// stale, or recovery has not finished).
	Approx bool `json:"approx"`
	// Replicas is the item's vector, by replica id.
	Replicas map[string]PN `json:"replicas"`
	// Unreconciled counts the item's like records whose excess is not yet
	// corrected in this replica's view.
	Unreconciled int `json:"unreconciled"`
	// StalenessMs: per peer replica, ms since this replica last heard from
	// it (-1: never). Absent for a standalone replica.
	StalenessMs map[string]int64 `json:"staleness_ms,omitempty"`
	// Parts, for an item split into parts (hot): how many; Count sums
	// them and Replicas adds their vectors. Partial: the holders of
	// MissingParts did not answer in time, so Count leaves them out
	// (Approx is set too).
	Parts        int   `json:"parts,omitempty"`
	Partial      bool  `json:"partial,omitempty"`
	MissingParts []int `json:"missing_parts,omitempty"`
	// Meta (with ?with=meta) is the metadata of the item's event type,
	// absent if it has none.
	Meta *TypeMeta `json:"meta,omitempty"`
}

// Liked answers GET /v1/likes/{item}/{user}.
type Liked struct {
	Item  string `json:"item"`
	User  string `json:"user"`
	Liked bool   `json:"liked"`
	// At and Replica are when and where the like or unlike that decides
	// the state was accepted; absent if the user never liked the item.
	At      *time.Time `json:"at,omitempty"`
	Replica string     `json:"replica,omitempty"`
}

// Likers answers GET /v1/likers/{item}: one page of the users who like
// the item, in id order.
type Likers struct {
	Item  string      `json:"item"`
	Users []ListEntry `json:"users"`
	// Next is the cursor of the next page (?after=), absent on the last.
	Next string `json:"next,omitempty"`
}

// UserLikes answers GET /v1/users/{user}/likes: one page of the items the
// user likes, in id order.
type UserLikes struct {
	User  string      `json:"user"`
	Items []ListEntry `json:"items"`
	Next  string      `json:"next,omitempty"`
	// Partial, in a sharded region: some replica holding part of the
	// keys did not answer in time, so keys of MissingShards shards are
	// left out.
	Partial       bool `json:"partial,omitempty"`
	MissingShards int  `json:"missing_shards,omitempty"`
}

// ListEntry is one user or item of a like list and when the like was
// accepted.
type ListEntry struct {
	ID string    `json:"id"`
	At time.Time `json:"at"`
}

// Feed answers GET and POST /v1/feed: for each item, its like count and
// whether the user likes it, in the order asked.
type Feed struct {
	User  string     `json:"user"`
	Items []FeedItem `json:"items"`
	// Approx: some count may still move (as on GET /v1/likes/{item}).
	Approx bool `json:"approx"`
	// Partial, in a sharded region: some replica holding part of the
	// keys did not answer in time, so keys of MissingShards shards are
	// answered 0, not liked.
	Partial       bool `json:"partial,omitempty"`
	MissingShards int  `json:"missing_shards,omitempty"`
}

// FeedItem is one item of a Feed.
type FeedItem struct {
	Item  string `json:"item"`
	Count int64  `json:"count"`
	Liked bool   `json:"liked"`
}

// Incr answers POST /v1/counters/{key}/incr.
type Incr struct {
	Key   string `json:"key"`
	Value int64  `json:"value"`
	// Duplicate: the idempotency key was seen before; nothing was added and
	// Value is the value the first attempt returned.
	Duplicate bool `json:"duplicate"`
	// Approx: the counter is approximate; Counted is what this increment
	// counted: a multiple of the counter's step, often 0 (then nothing was
	// written), by on average. Both absent for an exact counter; Counted
	// absent for a duplicate.
	Approx  bool   `json:"approx,omitempty"`
	Counted *int64 `json:"counted,omitempty"`
}

// ModeApprox is the Mode of an approximate counter's reads.
const ModeApprox = "approx"

// Counter answers GET /v1/counters/{key}.
type Counter struct {
	Key   string `json:"key"`
	Value int64  `json:"value"`
	// Approx: the value may still move (as for Likes), or the counter is
	// approximate (Mode) and the value is an estimate.
	Approx      bool             `json:"approx"`
	Replicas    map[string]PN    `json:"replicas"`
	StalenessMs map[string]int64 `json:"staleness_ms,omitempty"` // see Likes
	// Unreconciled counts idempotency keys of the counter applied by
	// more than one region whose extra application is not yet taken
	// back in this region's view: the value may still drop.
	Unreconciled int `json:"unreconciled,omitempty"`
	// Mode is "approx" for an approximate counter, absent for an exact
	// one; Error then bounds the estimate.
	Mode  string       `json:"mode,omitempty"`
	Error *ApproxError `json:"error,omitempty"`
	// Meta (with ?with=meta) is the metadata of the key's event type,
	// absent if it has none.
	Meta *TypeMeta `json:"meta,omitempty"`
}

// ApproxError bounds an approximate count's error.
type ApproxError struct {
	// Relative is the counter's relative standard error target.
	Relative float64 `json:"relative"`
	// Std bounds the standard deviation of the value, rounded up: Relative
	// times ΣP + ΣN of the counter (its value, for one that only grows).
	// For a window, Relative · sqrt(2 · the counter's ΣP+ΣN · the
	// window's).
	Std int64 `json:"std"`
	// Bound95 is 2 · Std: the true value is within Value ± Bound95 with
	// about 95% probability.
	Bound95 int64 `json:"bound95"`
}

// SeriesError bounds an approximate counter's series, point by point (as
// ApproxError for a window).
type SeriesError struct {
	Relative float64 `json:"relative"`
	Std      []int64 `json:"std"`
	Bound95  []int64 `json:"bound95"`
}

// ApproxRule is one approximate-counter rule, in /v1/status.
type ApproxRule struct {
	// Prefix: the counters whose keys start with it ("" is all of them).
	Prefix string `json:"prefix"`
	// Error is their relative standard error target.
	Error float64 `json:"error"`
}

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
	// Changed (likes, toggles): the user's state changed in this
	// replica's view.
	Changed bool `json:"changed,omitempty"`
	// Duplicate (incr, spend, toggle): the idempotency key was seen
	// before.
	Duplicate bool `json:"duplicate,omitempty"`
	// Liked (toggle): the user's state after the toggle.
	Liked *bool `json:"liked,omitempty"`
	// Approx and Counted (incr of an approximate counter) as for Incr,
	// except that Counted is absent when the increment counted nothing
	// (most do, on a hot counter: the batch answer stays small).
	Approx  bool   `json:"approx,omitempty"`
	Counted *int64 `json:"counted,omitempty"`
	// Error and Code say why a rejected event was rejected.
	Error string `json:"error,omitempty"`
	Code  string `json:"code,omitempty"`
}

// Health answers GET /healthz and /readyz when they pass.
type Health struct {
	Status string `json:"status"` // "ok" or "ready"
}

// Status answers GET /v1/status.
type Status struct {
	Region     string `json:"region"`
	Replica    string `json:"replica"`
	Durability string `json:"durability"` // "fsync" or "none"
	// DurabilityWarning is set when writes are acknowledged before fsync.
	DurabilityWarning string `json:"durability_warning,omitempty"`
	// Accepting: the replica acknowledges writes now.
	Accepting bool `json:"accepting"`
	// Fresh: the data directory held no state at start.
	Fresh bool `json:"fresh"`
	// Version is the release (tallyd version), Revision the commit it
	// was built from ("unknown" outside a git checkout), GoVersion the
	// Go release that built it.
	Version       string `json:"version"`
	Revision      string `json:"revision"`
	GoVersion     string `json:"go_version"`
	StartedAt     string `json:"started_at"` // RFC 3339, UTC
	UptimeSeconds int64  `json:"uptime_seconds"`
	// StorageError is why the replica stopped (storage_failed,
	// replica_id_conflict), if it did.
	StorageError string `json:"storage_error,omitempty"`
	// ClockCorrectionMs is what the replica adds to its host's wall clock
	// for stamps: a step of the wall clock kept out, or the peers' clocks
	// followed. Not 0 means this host's time needs a look.
	ClockCorrectionMs int64 `json:"clock_correction_ms"`
	// ClockAheadMs: at start the stored clock was this far ahead of the
	// wall clock (more than a minute), and was not followed.
	ClockAheadMs int64 `json:"clock_ahead_ms,omitempty"`
	// Replication is "nats", or "off" for a standalone replica; the fields
	// after it are set only with "nats".
	Replication string `json:"replication"`
	// Recovered: startup recovery from the peers has finished.
	Recovered *bool `json:"recovered,omitempty"`
	// PendingReplication counts changes not yet published on the fast path.
	PendingReplication *int         `json:"pending_replication,omitempty"`
	Peers              []PeerStatus `json:"peers,omitempty"`
	// Numbering: one entry per numbered sequence, with milestones on.
	Numbering []SequenceStatus `json:"numbering,omitempty"`
	// Events is the event log: how far this replica's stream has it.
	Events *EventLog `json:"events,omitempty"`
	// Approx lists the approximate-counter rules, longest prefix winning.
	Approx []ApproxRule `json:"approx,omitempty"`
	// Auth says which routes need a bearer token: reads (every route
	// under /v1/ that is not a write, whatever its method),
	// writes, admin routes. Never the tokens. Shown only to a caller with
	// the admin token (or, with no admin token set, on a loopback
	// listener): how a replica is guarded is no stranger's business.
	Auth *Auth `json:"auth,omitempty"`
	// Edge says how the HTTP listener is protected and limited; shown to
	// the same callers as Auth.
	Edge *Edge `json:"edge,omitempty"`
	// RESP is the Redis protocol listener (resp_listen), if it is on.
	RESP *RESPStatus `json:"resp,omitempty"`
}

// RESPStatus is the Redis protocol listener of a replica.
type RESPStatus struct {
	Addr           string `json:"addr"`            // the bound address
	Connections    int64  `json:"connections"`     // open now
	MaxConnections int    `json:"max_connections"` // open at most (resp_max_connections)
	Refused        uint64 `json:"refused"`         // connections refused over the cap since start
	Commands       uint64 `json:"commands"`        // commands answered since start
}

// EventLog is how far the region's event stream has this replica's event
// log (Status.Events).
type EventLog struct {
	Stream string `json:"stream"`
	// Published: the log's sequence the stream has up to; Logged: the
	// log's last. Equal when publishing has caught up.
	Published uint64 `json:"published"`
	Logged    uint64 `json:"logged"`
	// Error is why publishing last failed, if it did.
	Error string `json:"error,omitempty"`
}

// SequenceStatus is what Status.Numbering shows of one numbered sequence.
type SequenceStatus struct {
	Name       string `json:"name"`
	Counts     string `json:"counts"` // what the sequence counts: likes or increments
	Match      string `json:"match"`  // which items or keys it counts
	Milestones string `json:"milestones"`
	// Numbered: how many numbers of the sequence this process has taken;
	// Unnumbered: how many counted events wait for numbers, as of the
	// last commit.
	Numbered   uint64      `json:"numbered"`
	Unnumbered int         `json:"unnumbered"`
	Lease      LeaseHolder `json:"lease"`
	// ClaimsPending: milestones whose rank this replica took and whose
	// claim it has not yet made and published (-1: its store could not be
	// read). Their likes are recorded only in its data directory until
	// then. Above 0 for long: the KV or the milestone stream is out of
	// reach.
	ClaimsPending int `json:"claims_pending"`
}

// LeaseHolder is this replica's holder of a sequence's number blocks.
type LeaseHolder struct {
	Sequence  string      `json:"sequence"`
	Leases    []HeldLease `json:"leases"`
	BlockSize uint64      `json:"block_size"`
	Taken     uint64      `json:"numbers_taken"`
	// Waiting: the holder has no number left and waits for a lease.
	Waiting bool   `json:"waiting_for_lease"`
	KVError string `json:"kv_error,omitempty"`
}

// HeldLease is one block of numbers this replica holds: [Start, End),
// Next the next to hand out, Committed those durably used.
type HeldLease struct {
	Epoch     uint64 `json:"epoch"`
	Start     uint64 `json:"start"`
	End       uint64 `json:"end"`
	Next      uint64 `json:"next"`
	Committed uint64 `json:"committed"`
	ExpiresMs int64  `json:"expires_in_ms"` // negative: fenced off
}

// Sequence answers GET /v1/sequences/{name}: a numbered sequence's
// allocator state, as stored in its KV key, and what an operator wants
// to know of it.
type Sequence struct {
	Version int `json:"v"` // of the stored value's format
	// HWM: numbers at or above it were never leased. Numbers start at 1.
	HWM       uint64 `json:"hwm"`
	NextEpoch uint64 `json:"next_epoch"`
	// Free is a version 1 free list, kept only to migrate.
	Free   []Span          `json:"free,omitempty"`
	Leases []SequenceLease `json:"leases,omitempty"` // open blocks, by epoch
	Closed []ClosedBlock   `json:"closed,omitempty"` // by start
	Dense  Dense           `json:"dense"`
	// Applied: each holder's nonce of its last write that landed.
	Applied map[string]string `json:"applied,omitempty"`
	// Numbered is how many numbers have their final rank: every
	// milestone up to it has fired or is being claimed.
	Numbered uint64 `json:"numbered"`
	// Holes are numbers leased and never used, below the final ones.
	Holes uint64 `json:"holes"`
	// OldestOpen is the lowest block still open: the ranks of every number
	// above it wait for it to close.
	OldestOpen *SequenceLease `json:"oldest_open,omitempty"`
}

// Span is the half-open range of numbers [Start, End).
type Span struct {
	Start uint64 `json:"start"`
	End   uint64 `json:"end"`
}

// SequenceLease is one open block of a sequence, held by one replica:
// numbers [Start, Used) are spent; Beat is bumped by every renewal.
type SequenceLease struct {
	Epoch  uint64 `json:"epoch"`
	Holder string `json:"holder"`
	Start  uint64 `json:"start"`
	End    uint64 `json:"end"`
	Used   uint64 `json:"used"`
	Beat   uint64 `json:"beat"`
}

// ClosedBlock is a block whose use is final: [Start, Used) were used,
// [Used, End) never will be. Folded: every number below Start is final
// too, and Base of them were used.
type ClosedBlock struct {
	Epoch  uint64 `json:"epoch"`
	Holder string `json:"holder"`
	Start  uint64 `json:"start"`
	End    uint64 `json:"end"`
	Used   uint64 `json:"used"`
	Folded bool   `json:"folded,omitempty"`
	Base   uint64 `json:"base,omitempty"`
}

// Dense is how far a sequence's numbers are final: every number below
// Pos is in a closed block, and Rank of them were used.
type Dense struct {
	Pos  uint64 `json:"pos"`
	Rank uint64 `json:"rank"`
}

// History answers GET /v1/likes/{item}/{user}/history: the pair's likes
// and unlikes as the replicas accepted them, oldest first.
type History struct {
	Item    string          `json:"item"`
	User    string          `json:"user"`
	Actions []HistoryAction `json:"actions"`
	// Complete: every replica answered with its whole history. Missing
	// lists those that did not answer: their actions are not in the list.
	// Partial lists those whose history does not cover their whole life
	// (their data directory was lost or restored from an old copy): the
	// actions they accepted before may not be in the list.
	Complete bool     `json:"complete"`
	Missing  []string `json:"missing,omitempty"`
	Partial  []string `json:"partial,omitempty"`
}

// HistoryAction is one like or unlike.
type HistoryAction struct {
	Liked   bool   `json:"liked"`
	At      string `json:"at"` // RFC 3339 with milliseconds, UTC
	HLC     string `json:"hlc"`
	Replica string `json:"replica"`
	Region  string `json:"region"`
}

// Audit answers GET /v1/audit: this replica's own entries recomputed from
// its event log and compared with the stored ones.
type Audit struct {
	Replica string `json:"replica"`
	OK      bool   `json:"ok"`
	// Complete: the log was never trimmed, so it must account for every
	// own entry; when false, differences may be trimmed history.
	Complete bool        `json:"complete"`
	Events   uint64      `json:"events"`
	FirstSeq uint64      `json:"first_seq"`
	LastSeq  uint64      `json:"last_seq"`
	Vectors  int         `json:"vectors"`
	Diffs    []AuditDiff `json:"diffs"`
}

// AuditDiff is one vector whose own entry the log does not account for.
type AuditDiff struct {
	Kind   string `json:"kind"` // "likes" or "counters"
	Key    string `json:"key"`
	Logged PN     `json:"logged"`
	Stored PN     `json:"stored"`
}

// PeerStatus is this replica's view of one peer.
type PeerStatus struct {
	Replica        string     `json:"replica"`
	Region         string     `json:"region,omitempty"`
	LastHeard      *time.Time `json:"last_heard,omitempty"`
	LastHeardAgoMs int64      `json:"last_heard_ago_ms"`
	LagMs          int64      `json:"lag_ms"`
	Stale          bool       `json:"stale"`
	LostMessages   uint64     `json:"lost_messages"`
	// InSync: the last digest comparison, at most two anti-entropy
	// intervals ago and without error, found no differing anti-entropy
	// segment.
	InSync bool `json:"in_sync"`
	// DifferingSegments: the anti-entropy segments that differed then
	// (JSON name kept for clients: a segment).
	DifferingSegments int        `json:"differing_buckets"`
	ComparedAt        *time.Time `json:"compared_at,omitempty"`
	InSyncSince       *time.Time `json:"in_sync_since,omitempty"`
	Synced            bool       `json:"synced"`
	Error             string     `json:"error,omitempty"`
}

// Convergence answers GET /v1/convergence.
type Convergence struct {
	Replica string `json:"replica"`
	// Converged: every known peer's digests matched ours at the last
	// comparison and no peer is stale.
	Converged bool         `json:"converged"`
	Recovered bool         `json:"recovered"`
	Peers     []PeerStatus `json:"peers"`
}

// Link is one inter-region link of a local deployment.
type Link struct {
	A       string `json:"a"`
	B       string `json:"b"`
	Up      bool   `json:"up"`
	BytesAB int64  `json:"bytes_ab"`
	BytesBA int64  `json:"bytes_ba"`
}

// Links answers GET /v1/admin/links.
type Links struct {
	Links []Link    `json:"links"`
	At    time.Time `json:"at"`
}

// ShardMap answers GET /v1/shards: which of a region's replicas hold
// each of the deployment's shards. Shards lists numbers and runs
// ("0-340", "342"); Count is how many shards that is. Revision is the
// map's revision in the deployment's shard map bucket (JetStream KV,
// `tallyd admin shards`); absent for a map the replica computed from its
// config because the bucket held none.
type ShardMap struct {
	Region   string         `json:"region"`
	Shards   int            `json:"shards"`
	Copies   int            `json:"copies"`
	Revision uint64         `json:"revision,omitempty"`
	Replicas []ShardHolding `json:"replicas"`
}

// ShardHolding is one replica's shards in a ShardMap.
type ShardHolding struct {
	Replica string   `json:"replica"`
	Shards  []string `json:"shards"`
	Count   int      `json:"count"`
	// State is how the replica answering sees this one: "up" (itself, or
	// a peer heard from within its timeout) or "stale"; absent in a map
	// not read from a replica.
	State string `json:"state,omitempty"`
	// URL is the replica's HTTP address as it advertises it
	// (advertise_url, else its bound address): a client may send a key's
	// requests straight to a holder of the key's shard. Absent when the
	// replica did not answer the replica serving the map in time, or
	// listens on every interface without advertise_url.
	URL string `json:"url,omitempty"`
	// Joining and Leaving are a shard move in progress (`tallyd admin
	// shards move`): the shards the replica is taking (it syncs them and
	// serves them once the map switches) and those it gave up (it keeps
	// them until their holders have its entries, then deletes them).
	Joining []string `json:"joining,omitempty"`
	Leaving []string `json:"leaving,omitempty"`
	// Synced (a replica joining shards) says it has pulled them from
	// every holder since it started joining; Released (a replica leaving
	// shards) says every replica keeping them compared equal with it
	// since the switch. Each as the replica itself answered (absent when
	// it did not answer in time or moves nothing).
	Synced   *bool `json:"synced,omitempty"`
	Released *bool `json:"released,omitempty"`
	// MapRevision is the revision of the region's map the replica serves
	// by, as it answered (absent when it did not answer, or serves by its
	// config's map).
	MapRevision uint64 `json:"map_revision,omitempty"`
}

// ShardMove answers PUT /v1/admin/shards/{region} in a local deployment:
// a move of the region's shards begun (State "moving"), whose progress
// GET /v1/shards shows (joining, synced, leaving, released); the
// deployment's log says when it is done.
type ShardMove struct {
	Region string `json:"region"`
	State  string `json:"state"`
	// Added is the replica added to the region, when the move spreads
	// the shards to a new one ({"add": 1}).
	Added string `json:"added,omitempty"`
	// Target is the map the region moves to.
	Target ShardMap `json:"target"`
}

// ReplicaState is one replica of a local deployment, as PUT and GET
// /v1/admin/replicas answer it. State is "up", "stopping", "down" or
// "starting"; a stop or start is asynchronous, so a PUT answers the state
// it left the replica in, and GET follows it.
type ReplicaState struct {
	Replica string `json:"replica"`
	Region  string `json:"region"`
	URL     string `json:"url"`
	State   string `json:"state"`
	// Error is why the last start failed, if it did.
	Error string `json:"error,omitempty"`
}

// Replicas answers GET /v1/admin/replicas.
type Replicas struct {
	Replicas []ReplicaState `json:"replicas"`
}

// Milestone is one milestone: the like that took the number.
type Milestone struct {
	Sequence string `json:"sequence"` // the sequence's name, e.g. "likes"
	Number   uint64 `json:"number"`
	// Item is the liked item, or the counter key whose increment took
	// the number.
	Item string `json:"item"`
	// User is who liked; empty for a counter's milestone.
	User    string `json:"user,omitempty"`
	Region  string `json:"region"`  // where the like or increment was counted
	Replica string `json:"replica"` // and by which replica
	// Time is when the like or increment was counted (its replica's
	// clock).
	Time time.Time `json:"time"`
	// StreamSeq is the event's sequence in the milestone stream, once read
	// from it.
	StreamSeq uint64 `json:"stream_seq,omitempty"`
}

// Milestones answers GET /v1/milestones.
type Milestones struct {
	// Milestones are ordered by sequence, then number; with ?limit=N, the
	// last N of that order (the newest of the likes sequence).
	Milestones []Milestone `json:"milestones"`
	// Total is how many milestones this region knows, whatever the limit.
	Total int `json:"total"`
	// Synced: this region has read the whole stream at least once. While
	// the stream is out of reach the list is what was read before, and
	// StreamError says why it is not current.
	Synced      bool   `json:"synced"`
	StreamError string `json:"stream_error,omitempty"`
}

// Window answers GET /v1/counters/{key}/window, /v1/likes/{item}/window and
// /v1/window: the net change of a count over [from, to).
type Window struct {
	Kind string `json:"kind"`          // "likes" or "counters"
	Key  string `json:"key,omitempty"` // item or counter key; absent: the family's total
	// Value is the net change in the window: additions minus removals
	// booked into its slots (likes minus unlikes, for likes).
	Value int64     `json:"value"`
	From  time.Time `json:"from"`
	To    time.Time `json:"to"`
	// SlotWidth is the width of the slots summed, e.g. "1s": the window's
	// bounds are the asked ones widened to whole slots. (JSON name kept
	// for clients: a slot width.)
	SlotWidth string `json:"bucket"`
	// Approx: the value may still move (a peer is unheard-from, a record
	// of the key is unreconciled, or recovery is running).
	Approx bool `json:"approx"`
	// Final: the window ended long enough ago that no event can still be
	// booked into it here, and approx is false: the value will not move.
	Final        bool             `json:"final"`
	Unreconciled int              `json:"unreconciled,omitempty"`
	Replicas     map[string]PN    `json:"replicas"` // per replica: additions (p) and removals (n) in the window
	Regions      map[string]int64 `json:"regions"`  // per region: net change booked by its replicas
	// Mode is "approx" if the key is an approximate counter (or, for the
	// counters' total, if any counter may be), and Approx is then true;
	// Error bounds a key's window (absent for the total). Final still
	// says whether the value can move.
	Mode  string       `json:"mode,omitempty"`
	Error *ApproxError `json:"error,omitempty"`
	// Parts, Partial and MissingParts as for Likes, for an item split
	// into parts: the window sums them.
	Parts        int   `json:"parts,omitempty"`
	Partial      bool  `json:"partial,omitempty"`
	MissingParts []int `json:"missing_parts,omitempty"`
}

// Series answers GET /v1/series and the per-key series routes: points of
// step width, one value per point per key.
type Series struct {
	Kind   string        `json:"kind"`
	From   time.Time     `json:"from"`
	To     time.Time     `json:"to"`
	Step   string        `json:"step"`
	Times  []int64       `json:"times"` // each point's start, unix ms
	Approx bool          `json:"approx"`
	Final  bool          `json:"final"`
	Series []SeriesOfKey `json:"series"`
	// Parts, Partial and MissingParts as for Likes, for an item split
	// into parts: its values sum them.
	Parts        int   `json:"parts,omitempty"`
	Partial      bool  `json:"partial,omitempty"`
	MissingParts []int `json:"missing_parts,omitempty"`
}

// SeriesOfKey is one key's points.
type SeriesOfKey struct {
	Key     string             `json:"key"` // "*" is the family's total
	Values  []int64            `json:"values"`
	Regions map[string][]int64 `json:"regions,omitempty"` // with by=region
	// Mode and Error as for a Window, per point (the Series is then
	// approx).
	Mode  string       `json:"mode,omitempty"`
	Error *SeriesError `json:"error,omitempty"`
}

// Trending answers GET /v1/trending.
type Trending struct {
	Kind   string         `json:"kind"`
	Window string         `json:"window"` // e.g. "10m", or "all"
	From   *time.Time     `json:"from,omitempty"`
	To     *time.Time     `json:"to,omitempty"`
	Region string         `json:"region,omitempty"`
	Prefix string         `json:"prefix,omitempty"`
	Items  []TrendingItem `json:"items"`
	// Approx and Final as for a window.
	Approx bool `json:"approx"`
	Final  bool `json:"final"`
	// Candidates is how many keys were scored exactly; Capacity is k:
	// every key with more than 1/k of the window's additions is a
	// candidate, and every count is exact.
	Candidates int `json:"candidates"`
	Capacity   int `json:"capacity"`
	// Partial, in a sharded region: some replica holding part of the
	// keys did not answer in time, so keys of MissingShards shards are
	// left out.
	Partial       bool `json:"partial,omitempty"`
	MissingShards int  `json:"missing_shards,omitempty"`
}

// TrendingItem is one key of a trending list and its exact net change.
type TrendingItem struct {
	Item  string `json:"item"`
	Count int64  `json:"count"`
	// Approx: the key is an approximate counter, so Count is its
	// estimated change (and the Trending is approx).
	Approx bool `json:"approx,omitempty"`
	// Meta (with ?with=meta) is the metadata of the key's event type,
	// absent if it has none.
	Meta *TypeMeta `json:"meta,omitempty"`
}

// UniquesAdded answers POST /v1/uniques/{key}.
type UniquesAdded struct {
	Key string `json:"key"`
	// IDs is how many ids the request added (repeats included).
	IDs int `json:"ids"`
	// Changed: this replica's sketch of the key moved (some id was new to
	// it, or at least raised a register). False means every id was, very
	// probably, seen before.
	Changed bool `json:"changed"`
}

// Uniques answers GET /v1/uniques/{key} and GET /v1/uniques: the number of
// distinct ids added to the key (or to any of the keys), estimated from
// the union of every replica's HyperLogLog sketch.
type Uniques struct {
	Keys []string `json:"keys"`
	// Estimate is the distinct count, rounded.
	Estimate int64 `json:"estimate"`
	// StdError is one standard error of the estimate, in ids (RelStdError
	// times the estimate): about 68% of estimates are within it, 95%
	// within twice it.
	StdError    float64 `json:"std_error"`
	RelStdError float64 `json:"rel_std_error"`
	// Approx is always true: a sketch estimates. Stale says whether some
	// peer is unheard-from, so ids added there may be missing.
	Approx bool `json:"approx"`
	Stale  bool `json:"stale"`
	// From, To and SlotWidth are set for a windowed read (last= or from=):
	// the union of the slots of that width starting in [from, to). (JSON
	// name "bucket" kept for clients: a slot width.)
	From      *time.Time `json:"from,omitempty"`
	To        *time.Time `json:"to,omitempty"`
	SlotWidth string     `json:"bucket,omitempty"`
	// Final: a windowed read that ended long enough ago that no add can
	// still be booked into it here, with no peer stale.
	Final *bool `json:"final,omitempty"`
	// Replicas whose sketches the read found, and their regions.
	Replicas []string `json:"replicas"`
	Regions  []string `json:"regions"`
	// ByRegion (with ?by=region) estimates each region's own distinct ids:
	// the union of its replicas' sketches. An id seen in two regions
	// counts in both, so these add up to more than the estimate.
	ByRegion map[string]int64 `json:"by_region,omitempty"`
	// Partial, in a sharded region: some replica holding part of the
	// keys did not answer in time, so the keys of MissingShards shards
	// are left out of the union.
	Partial       bool `json:"partial,omitempty"`
	MissingShards int  `json:"missing_shards,omitempty"`
}

// BudgetGrant answers POST /v1/budgets/{key}/grant.
type BudgetGrant struct {
	Key     string `json:"key"`
	Granted int64  `json:"granted"`
	// Remaining is the budget's remaining as this region sees it; Rights
	// is how much of it this region may spend without asking.
	Remaining int64 `json:"remaining"`
	Rights    int64 `json:"rights"`
	// Duplicate: the grant's idempotency key was applied before (here or
	// in a region this one has heard from); nothing was granted now.
	Duplicate bool `json:"duplicate"`
}

// BudgetSpend answers POST /v1/budgets/{key}/spend when the spend is done
// (or was done before: Duplicate).
type BudgetSpend struct {
	Key       string `json:"key"`
	Spent     int64  `json:"spent"`
	Remaining int64  `json:"remaining"`
	Rights    int64  `json:"rights"`
	Duplicate bool   `json:"duplicate"`
}

// BudgetRefused is the 409 body of a spend or cashback the region cannot
// cover: Code is budget_exhausted or rights_elsewhere, Key the budget that
// fell short (of a cashback: its budget or its merchant's balance).
type BudgetRefused struct {
	Error     string `json:"error"`
	Code      string `json:"code"`
	Key       string `json:"key"`
	Remaining int64  `json:"remaining"`
	Rights    int64  `json:"rights"`
}

// Budget answers GET /v1/budgets/{key}.
type Budget struct {
	Key       string `json:"key"`
	Remaining int64  `json:"remaining"`
	Granted   int64  `json:"granted"`
	Spent     int64  `json:"spent"`
	// Rights: what each replica holds, by replica id, as this region
	// knows it (exact for its own: LocalRights).
	Rights      map[string]int64 `json:"rights"`
	LocalRights int64            `json:"local_rights"`
	// Approx: other regions hold rights and may be spending them, so the
	// remaining may be lower there now (never below zero anywhere).
	Approx bool `json:"approx"`
	// Unreconciled: keyed spends applied in more than one region whose
	// refunds are still on their way (Spent may still fall).
	Unreconciled int `json:"unreconciled,omitempty"`
}

// BudgetHandoff answers the /v1/admin/budgets/handoff routes: the replica
// this one hands its budget rights to ("" when no handoff is on), and the
// rights it still holds, in how many budgets.
type BudgetHandoff struct {
	To      string `json:"to"`
	Budgets int    `json:"budgets"`
	Held    int64  `json:"held"`
	// Moved: the rights moved since this handoff began (PUT only): by the
	// request's pass and by the commits that raced it.
	Moved int64 `json:"moved"`
}

// Balance is one key's value in a cashback answer.
type Balance struct {
	Key   string `json:"key"`
	Value int64  `json:"value"`
}

// Cashback answers POST /v1/cashback.
type Cashback struct {
	Amount    int64 `json:"amount"`
	Duplicate bool  `json:"duplicate"`
	// Budget's and Merchant's values are their remaining as seen here
	// (the merchant's balance is a budget); User's is its counter's value.
	Budget   Balance `json:"budget"`
	Merchant Balance `json:"merchant"`
	User     Balance `json:"user"`
}

// Edge is how the replica's HTTP listener is protected (Status.Edge).
type Edge struct {
	// TLS: the API is served over HTTPS.
	TLS bool `json:"tls"`
	// ClientCerts: a client certificate signed by the configured CA is
	// required (mutual TLS).
	ClientCerts bool `json:"client_certs"`
	// InsecureListen: the operator opted in to listening beyond loopback
	// without TLS or without a write token.
	InsecureListen bool `json:"insecure_listen"`
	// InsecureOpenAdmin: the operator opted in to admin routes without a
	// token on a listener beyond loopback.
	InsecureOpenAdmin bool `json:"insecure_open_admin"`
	// Draining: the replica is stopping; /readyz fails.
	Draining bool `json:"draining,omitempty"`
	// Limits are the rate limits per route class, per replica.
	Limits []Limit `json:"limits"`
}

// Limit is one route class's rate limits (Edge.Limits): requests (events,
// for batches) per second and token-bucket sizes, per client and per user.
type Limit struct {
	Class       string  `json:"class"`
	Client      float64 `json:"client,omitempty"`
	ClientBurst int     `json:"client_burst,omitempty"`
	User        float64 `json:"user,omitempty"`
	UserBurst   int     `json:"user_burst,omitempty"`
}

// Auth is which roles' routes need a token (Status.Auth).
type Auth struct {
	Read  bool `json:"read"`
	Write bool `json:"write"`
	Admin bool `json:"admin"`
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
	// Shards is a sharded region's replica's answer to the replica that
	// gathers the total: its sums per shard it holds.
	Shards []TypeTotalShard `json:"shards,omitempty"`
}

// TypeTotalShard is the sum of the keys of one shard in TypeTotal.Shards.
type TypeTotalShard struct {
	Shard    int           `json:"shard"`
	Keys     int           `json:"keys"`
	Replicas map[string]PN `json:"replicas"`
	Approx   bool          `json:"approx"`
	// Unreconciled (TypeWindow): records of the shard's keys whose
	// excess is not zero yet.
	Unreconciled int `json:"unreconciled,omitempty"`
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
	// Partial, MissingShards and Shards as for TypeTotal.
	Partial       bool             `json:"partial,omitempty"`
	MissingShards int              `json:"missing_shards,omitempty"`
	Shards        []TypeTotalShard `json:"shards,omitempty"`
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

// Backup answers POST /v1/admin/backup: the checkpoint the replica wrote,
// on its own machine, ready to replace a data directory
// (docs/operations.md, "Backup and restore").
type Backup struct {
	Replica string `json:"replica"`
	Region  string `json:"region"`
	// Dir is the directory the checkpoint is in.
	Dir   string `json:"dir"`
	Files int    `json:"files"`
	// Bytes is the checkpoint's size; tables it shares with the data
	// directory through hard links count in full.
	Bytes int64 `json:"bytes"`
	// TakenAt is when the checkpoint was taken, RFC 3339 in UTC.
	TakenAt string `json:"taken_at"`
}
