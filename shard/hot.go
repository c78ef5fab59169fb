package shard

import (
	"fmt"
	"strings"

	"github.com/tally-dev/tally/crdt"
)

// Split names hot items spread over several parts (a sharded counter):
// every item whose id starts with Prefix is split into Parts parts, part k
// an item of its own (crdt.PartName) on its own shard. A user's like and
// unlike of the item always go to the same part (PartOf), so a like record
// and the vector entries it counts stay one atomic commit there, and the
// item's count is the sum of its parts' counts.
type Split struct {
	Prefix string
	Parts  int
}

// Hot is a deployment's split items. Every replica of every region must
// have the same: it decides where a user's like of an item is stored.
type Hot []Split

// Validate checks every split: a prefix of a valid id, 2..crdt.MaxParts
// parts, no prefix twice.
func (h Hot) Validate() error {
	seen := map[string]bool{}
	for _, s := range h {
		switch {
		case s.Prefix == "" || !crdt.ValidID(s.Prefix):
			return fmt.Errorf("hot item prefix %q: want the start of an id, [A-Za-z0-9_.:@-]", s.Prefix)
		case s.Parts < 2 || s.Parts > crdt.MaxParts:
			return fmt.Errorf("hot item prefix %q: splits %d: want 2..%d", s.Prefix, s.Parts, crdt.MaxParts)
		case seen[s.Prefix]:
			return fmt.Errorf("hot item prefix %q given twice", s.Prefix)
		}
		seen[s.Prefix] = true
	}
	return nil
}

// Parts is how many parts item is split into: that of the longest prefix
// it starts with, or 0 when it is not split (nor is an item longer than
// crdt.MaxSplitIDLen, whose parts' names would not be ids' length).
func (h Hot) Parts(item string) int {
	best, parts := -1, 0
	if len(item) > crdt.MaxSplitIDLen {
		return 0
	}
	for _, s := range h {
		if len(s.Prefix) > best && strings.HasPrefix(item, s.Prefix) {
			best, parts = len(s.Prefix), s.Parts
		}
	}
	return parts
}

// PartOf is the part of an item split into parts that user's likes and
// unlikes of it go to.
func PartOf(user string, parts int) int {
	// FNV-1a of "@"+user, not Hash(user): a user's part should not
	// follow the shard of the user's other keys.
	h := uint32(2166136261) ^ '@'
	h *= 16777619
	for i := 0; i < len(user); i++ {
		h ^= uint32(user[i])
		h *= 16777619
	}
	return int(h % uint32(parts))
}

// Name is the item name user's like or unlike of item is stored under:
// the user's part (crdt.PartName) of a split item, else item.
func (h Hot) Name(item, user string) string {
	if n := h.Parts(item); n > 0 {
		return crdt.PartName(item, PartOf(user, n))
	}
	return item
}

// Names is every part's name of a split item, or item alone.
func (h Hot) Names(item string) []string {
	n := h.Parts(item)
	if n == 0 {
		return []string{item}
	}
	out := make([]string, n)
	for k := range out {
		out[k] = crdt.PartName(item, k)
	}
	return out
}
