package region

import "github.com/tally-dev/tally/storage"

// The storage names a replica's callers see in its methods (a family's
// Kind, a like list's Listed entries, the store's Durability), re-exported
// so that the front doors (httpapi, resp) stand on region and need not
// import storage. They are aliases: a region.Kind is a storage.Kind.

// Kind selects a family of vectors: likes, counters, budgets.
type Kind = storage.Kind

// The families the front doors name.
const (
	KindLikes    = storage.Likes
	KindCounters = storage.Counters
	KindBudgets  = storage.Budgets
)

// Listed is one entry of a like list (Likers, LikedItems, AllLikers).
type Listed = storage.Listed

// Durability says when a commit is acknowledged (Replica.Durability).
type Durability = storage.Durability

// DurabilityNone acknowledges a commit before its fsync (opt-in).
const DurabilityNone = storage.DurabilityNone

// Segments is how many segments a family's keys are spread over; a scan
// (ScanItems) walks segments 0..Segments-1 and ends at Segments.
const Segments = storage.Segments
