package storage

import "github.com/tally-dev/tally/crdt"

// Kind selects which family of vectors a key belongs to.
type Kind byte

const (
	// Likes vectors count liked users per item.
	Likes Kind = 'l'
	// Counters vectors are generic PN-counters.
	Counters Kind = 'c'
	// LikesWindows vectors are the slots of items' like counts,
	// named by crdt.Slot.
	LikesWindows Kind = 'L'
	// CountersWindows vectors are the slots of counters.
	CountersWindows Kind = 'C'
	// Budgets vectors are bounded counters (crdt.Budget): the main vector
	// under the budget's key, and one inbox vector per replica that was
	// sent rights, named crdt.BudgetInboxName(key, replica).
	Budgets Kind = 'g'
)

func (k Kind) String() string {
	switch k {
	case Likes:
		return "likes"
	case Counters:
		return "counters"
	case LikesWindows:
		return "likes-windows"
	case CountersWindows:
		return "counters-windows"
	case Uniques:
		return "uniques"
	case UniquesWindows:
		return "uniques-windows"
	case Budgets:
		return "budgets"
	}
	return "unknown"
}

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool {
	return k == Likes || k == Counters || k == LikesWindows || k == CountersWindows || k == Budgets
}

// Windows is the kind of k's slots (k itself if it is one).
func (k Kind) Windows() Kind {
	switch k {
	case Likes:
		return LikesWindows
	case Counters:
		return CountersWindows
	}
	return k
}

// Base is the all-time kind of a windows kind (k itself if it is one).
func (k Kind) Base() Kind {
	switch k {
	case LikesWindows:
		return Likes
	case CountersWindows:
		return Counters
	}
	return k
}

// IsWindows reports whether k's vectors are slots.
func (k Kind) IsWindows() bool { return k == LikesWindows || k == CountersWindows }

// ValidItem reports whether item is a well-formed vector name of kind k: an
// id (or, for likes, an item's part: crdt.PartName) for an all-time vector, a slot name (crdt.ParseSlot) for a slot,
// a key or inbox name (crdt.SplitBudgetName) for a budget.
func ValidItem(k Kind, item string) bool {
	if k.IsWindows() {
		_, ok := crdt.ParseSlot(item)
		return ok
	}
	if k == Budgets {
		_, _, _, ok := crdt.SplitBudgetName(item)
		return ok
	}
	if k == Likes {
		return crdt.ValidItemName(item) // a hot item's part too
	}
	return k.Valid() && crdt.ValidID(item)
}

const (
	prefixSegment = 'b' // replicated state, by anti-entropy segment ('b': they were called buckets)
	prefixVector  = 'v'
	prefixRecord  = 'r'
	prefixMarker  = 'x'
	prefixIdem    = 'i'
	prefixMeta    = 'm'
)

// segmentPrefix is "b<3 hex digits>/": one anti-entropy segment.
func segmentPrefix(seg int) []byte { return appendSegmentPrefix(nil, seg) }

func appendSegmentPrefix(dst []byte, seg int) []byte {
	const hex = "0123456789abcdef"
	return append(dst, prefixSegment, hex[seg>>8&0xf], hex[seg>>4&0xf], hex[seg&0xf], '/')
}

// segmentOfKey parses the segment of a replicated key.
func segmentOfKey(k []byte) (int, bool) {
	if len(k) < 5 || k[0] != prefixSegment || k[4] != '/' {
		return 0, false
	}
	return parseHex(k[1:4])
}

// parseHex reads lowercase hex digits (the segment and sketch page numbers
// in keys).
func parseHex(b []byte) (int, bool) {
	v := 0
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			v = v<<4 | int(c-'0')
		case 'a' <= c && c <= 'f':
			v = v<<4 | int(c-'a'+10)
		default:
			return 0, false
		}
	}
	return v, true
}

func appendKey(dst []byte, prefix byte, parts ...string) []byte {
	dst = append(dst, prefix)
	for _, p := range parts {
		dst = append(dst, '/')
		dst = append(dst, p...)
	}
	return dst
}

func appendVectorEntryKey(dst []byte, k Kind, item, replica string) []byte {
	dst = appendSegmentPrefix(dst, VectorSegment(item))
	dst = append(dst, prefixVector, '/', byte(k), '/')
	dst = append(dst, item...)
	dst = append(dst, '/')
	return append(dst, replica...)
}

// vectorPrefix is "b<segment>/v/<k>/<item>/": all replicas' entries of one
// vector.
func vectorPrefix(k Kind, item string) []byte {
	dst := append([]byte(nil), segmentPrefix(VectorSegment(item))...)
	return append(appendKey(dst, prefixVector, string(k), item), '/')
}

func recordKey(item, user string) []byte {
	return appendRecordKey(make([]byte, 0, 8+len(item)+len(user)), item, user)
}

func appendRecordKey(dst []byte, item, user string) []byte {
	return appendSegmentRecordKey(dst, prefixRecord, item, user)
}

// appendSegmentRecordKey is "b<segment>/<prefix>/<a>/<b>": a like record
// (prefixRecord) or keyed record (prefixKeyed) in its anti-entropy segment.
func appendSegmentRecordKey(dst []byte, prefix byte, a, b string) []byte {
	dst = appendSegmentPrefix(dst, RecordSegment(a, b))
	dst = append(dst, prefix, '/')
	dst = append(dst, a...)
	dst = append(dst, '/')
	return append(dst, b...)
}

func markerKey(item, user string) []byte {
	return appendKey(make([]byte, 0, 3+len(item)+len(user)), prefixMarker, item, user)
}

func idemKey(key, idem string) []byte {
	return appendKey(make([]byte, 0, 3+len(key)+len(idem)), prefixIdem, key, idem)
}

func metaKey(name string) []byte { return appendKey(nil, prefixMeta, name) }

// prefixEnd returns the smallest key greater than every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}
