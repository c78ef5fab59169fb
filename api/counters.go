// The counter routes' shapes: increments, reads (exact and approximate),
// windows, series, trending and uniques.

package api

import "time"

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
