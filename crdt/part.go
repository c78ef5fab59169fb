package crdt

import (
	"strconv"
	"strings"
)

// A hot item may be split into parts (a sharded counter): part k of item X
// is an item of its own, named
//
//	X|k
//
// with k decimal, 0..MaxParts-1, no leading zeros. Its vector, like records
// and slots ("X|k#...") are those of any item; the item's count is the sum
// of its parts' counts. '|' never occurs in an id (ValidID), so no user's
// item collides with a part, and BaseKey keeps it, so part k hashes (and
// shards) as its own key.

// PartSep separates an item from its part number in a part's name.
const PartSep = '|'

// MaxParts bounds how many parts an item is split into.
const MaxParts = 64

// PartName is the name of part k of item.
func PartName(item string, k int) string {
	return item + string(PartSep) + strconv.Itoa(k)
}

// MaxSplitIDLen is the longest item that can be split: its parts' names
// are ids' length at most (MaxIDLen), as storage and the wire bound them.
const MaxSplitIDLen = MaxIDLen - 3

// SplitPart parses a part's name into its item and part number; ok is
// false for any other name.
func SplitPart(name string) (item string, k int, ok bool) {
	i := strings.IndexByte(name, PartSep)
	if i < 0 || len(name) > MaxIDLen {
		return "", 0, false
	}
	item, num := name[:i], name[i+1:]
	if !ValidID(item) || num == "" || len(num) > 2 || num[0] == '0' && len(num) > 1 {
		return "", 0, false
	}
	k, err := strconv.Atoi(num)
	if err != nil || k < 0 || k >= MaxParts || strconv.Itoa(k) != num {
		return "", 0, false
	}
	return item, k, true
}

// ItemOf is the item a name belongs to: X for part "X|k", else name
// itself.
func ItemOf(name string) string {
	if item, _, ok := SplitPart(name); ok {
		return item
	}
	return name
}

// ValidItemName reports whether s names an item's state: an id, or a
// part of one (PartName).
func ValidItemName(s string) bool {
	if ValidID(s) {
		return true
	}
	_, _, ok := SplitPart(s)
	return ok
}
