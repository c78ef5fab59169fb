// The numbered sequences' shapes: GET /v1/sequences/{name} and its blocks.

package api

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
	Epoch       uint64 `json:"epoch"`
	Leaseholder string `json:"holder"`
	Start       uint64 `json:"start"`
	End         uint64 `json:"end"`
	Used        uint64 `json:"used"`
	Beat        uint64 `json:"beat"`
}

// ClosedBlock is a block whose use is final: [Start, Used) were used,
// [Used, End) never will be. Folded: every number below Start is final
// too, and Base of them were used.
type ClosedBlock struct {
	Epoch       uint64 `json:"epoch"`
	Leaseholder string `json:"holder"`
	Start       uint64 `json:"start"`
	End         uint64 `json:"end"`
	Used        uint64 `json:"used"`
	Folded      bool   `json:"folded,omitempty"`
	Base        uint64 `json:"base,omitempty"`
}

// Dense is how far a sequence's numbers are final: every number below
// Pos is in a closed block, and Rank of them were used.
type Dense struct {
	Pos  uint64 `json:"pos"`
	Rank uint64 `json:"rank"`
}
