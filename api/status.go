// The shapes of what a replica reports of itself: health, /v1/status and
// its parts (edge, limits, auth, RESP, event log, numbering), the audit,
// peers and convergence.

package api

import "time"

// ApproxRule is one approximate-counter rule, in /v1/status.
type ApproxRule struct {
	// Prefix: the counters whose keys start with it ("" is all of them).
	Prefix string `json:"prefix"`
	// Error is their relative standard error target.
	Error float64 `json:"error"`
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

// LeaseHolder is this replica's leaseholder of a sequence (alloc.Leaseholder); the
// type keeps its older name, which the OpenAPI schema and generated
// clients use.
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
