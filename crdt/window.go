package crdt

import (
	"strconv"
	"strings"
)

// A slot is one interval of a key's time windows (a window sums whole
// slots), stored as a PN vector like any other: one per (key, level, start),
// where only replica r raises entry r and merge is element-wise max. What
// makes it a slot is its name, which carries everything its expiry rule
// needs, so that every replica applies the same rule to it without sharing
// any configuration:
//
//	<key>#<width>.<start>.<keep>
//
// width and keep in seconds (decimal), start in unix seconds as 10 hex
// digits, so that the slots of one (key, width) sort by start. '#' and
// the parts after it never occur in an id (ValidID), so a slot name never
// collides with a counter or item id. An empty key names the family's total.

// Slot names one slot.
type Slot struct {
	Key   string // counter key or item; "" is the family's total
	Width int64  // seconds
	Start int64  // unix seconds, a multiple of Width
	Keep  int64  // seconds the slot is kept after it ends
}

// Limits of a slot's fields.
const (
	MaxSlotWidth = 1 << 24 // seconds, about 194 days
	MaxSlotKeep  = 1 << 32 // seconds, about 136 years
	maxSlotStart = 1 << 40 // 10 hex digits
)

// ExpiryGraceMs is how long after its retention a slot still lives: twice
// the clock bound, so that a replica whose clock is behind does not offer a
// slot that a peer has deleted for long (the peer drops it either way).
const ExpiryGraceMs = 120_000

// Name is the slot's vector name.
func (s Slot) Name() string {
	return string(s.AppendName(make([]byte, 0, len(s.Key)+24)))
}

// AppendName appends Name to dst.
func (s Slot) AppendName(dst []byte) []byte {
	dst = append(dst, s.Key...)
	dst = append(dst, '#')
	dst = strconv.AppendInt(dst, s.Width, 10)
	dst = append(dst, '.')
	const hex = "0123456789abcdef"
	for shift := 36; shift >= 0; shift -= 4 {
		dst = append(dst, hex[s.Start>>shift&0xf])
	}
	dst = append(dst, '.')
	return strconv.AppendInt(dst, s.Keep, 10)
}

// SeriesPrefix is the name prefix shared by every slot of (key, width):
// its slots sort by start after it.
func SeriesPrefix(key string, width int64) string {
	return key + "#" + strconv.FormatInt(width, 10) + "."
}

// StartName is the 10-hex-digit start as it appears in a name, for range
// bounds: every slot of (key, width) starting at or after start sorts at
// or after SeriesPrefix + StartName(start).
func StartName(start int64) string {
	n := Slot{Start: start}.AppendName(nil)
	i := strings.IndexByte(string(n), '.')
	return string(n[i+1 : i+11])
}

// BaseKey is the part of a vector name before '#' or '~': the key of a time
// slot or of a budget's inbox vector, or the whole name of a plain
// vector. Anti-entropy segments hash it, so all of a key's slots and
// inboxes live next to its all-time vector.
func BaseKey(name string) string {
	if i := strings.IndexByte(name, '#'); i >= 0 {
		return name[:i]
	}
	if i := strings.IndexByte(name, BudgetInboxSep); i >= 0 {
		return name[:i]
	}
	return name
}

// ParseSlot decodes a slot name, checking every field: the key is empty,
// a valid id or an item's part (ValidItemName), width and keep are in range, start is a multiple of width.
func ParseSlot(name string) (Slot, bool) {
	key, rest, ok := strings.Cut(name, "#")
	if !ok || key != "" && !ValidItemName(key) {
		return Slot{}, false
	}
	w, rest, ok1 := strings.Cut(rest, ".")
	s, k, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || len(s) != 10 {
		return Slot{}, false
	}
	width, err1 := parseDec(w)
	start, err2 := strconv.ParseUint(s, 16, 64)
	keep, err3 := parseDec(k)
	if err1 || err2 != nil || err3 || strings.ToLower(s) != s {
		return Slot{}, false
	}
	b := Slot{Key: key, Width: width, Start: int64(start), Keep: keep}
	if width < 1 || width > MaxSlotWidth || keep > MaxSlotKeep || b.Start >= maxSlotStart || b.Start%width != 0 {
		return Slot{}, false
	}
	return b, true
}

// parseDec parses a canonical non-negative decimal (no sign, no leading
// zero), so that one slot has exactly one name.
func parseDec(s string) (int64, bool) {
	if s == "" || len(s) > 10 || len(s) > 1 && s[0] == '0' || s[0] < '0' || s[0] > '9' {
		return 0, true
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err != nil || n < 0
}

// ExpiresMs is when the slot is gone by rule, in unix ms: Keep after its
// end, plus ExpiryGraceMs. Keep zero means never (ExpiresMs is 0).
func (s Slot) ExpiresMs() int64 {
	if s.Keep == 0 {
		return 0
	}
	return (s.Start+s.Width+s.Keep)*1000 + ExpiryGraceMs
}

// Expired is the rule every replica applies to a slot, by its own clock:
// a slot past ExpiresMs is deleted, a merge carrying it is dropped and an
// anti-entropy page leaves it out, so it never comes back.
func (s Slot) Expired(nowMs int64) bool {
	e := s.ExpiresMs()
	return e != 0 && e <= nowMs
}

// SlotStart is the start (unix seconds) of the slot of width seconds
// holding time ms.
func SlotStart(ms, width int64) int64 {
	s := ms / 1000
	if ms < 0 && ms%1000 != 0 {
		s--
	}
	return s - ((s%width)+width)%width
}
