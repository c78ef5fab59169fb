// The likes routes' shapes: a like, an item's likes, like lists, the feed,
// a pair's history and the milestones.

package api

import "time"

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
