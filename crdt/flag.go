package crdt

import "encoding/binary"

// Flag is a user's block flag: a last-writer-wins register {Blocked, HLC,
// Origin} ordered by (HLC, Origin), like the register of a like record.
// The zero Flag is "never flagged", which loses to every real one.
//
// A blocked user's likes do not count. The excess of each of the user's
// like records is then d = Σ Contrib − (Liked && !Blocked ? 1 : 0)
// (LikeRecord.ExcessBlocked), and the record's winner brings it to zero
// whenever its view of the record or of the user's flag changes: every
// record's winner eventually sees the final flag, so every record ends at
// d = 0 and the counts are exact.
type Flag struct {
	Blocked bool
	HLC     HLC
	Origin  string // replica that set the winning flag
}

// IsZero reports whether f was never set.
func (f Flag) IsZero() bool { return f == Flag{} }

// Wins reports whether f beats o: larger HLC, ties broken by origin id.
// Equal (HLC, Origin) is the same write; the last tie-break on Blocked only
// keeps Merge commutative should corrupt input ever disagree.
func (f Flag) Wins(o Flag) bool {
	if f.HLC != o.HLC {
		return f.HLC > o.HLC
	}
	if f.Origin != o.Origin {
		return f.Origin > o.Origin
	}
	return f.Blocked && !o.Blocked
}

// Merge folds o into f and reports whether f changed.
func (f *Flag) Merge(o Flag) bool {
	if !o.Wins(*f) {
		return false
	}
	*f = o
	return true
}

// Set records a local block (blocked) or unblock at replica self, stamped
// hlc, which must exceed every HLC self has seen. It reports whether the
// blocked state changed.
func (f *Flag) Set(self string, blocked bool, hlc HLC) (changed bool) {
	changed = f.Blocked != blocked
	*f = Flag{Blocked: blocked, HLC: hlc, Origin: self}
	return changed
}

// Flag encoding:
//
//	Flag: v1 | blocked (0 or 1) | HLC | origin
//
// A zero HLC goes with an empty origin and not blocked (the zero Flag);
// anything else has both.

// AppendFlag appends the encoding of f to dst.
func AppendFlag(dst []byte, f Flag) []byte {
	var b byte
	if f.Blocked {
		b = 1
	}
	dst = append(dst, formatV1, b)
	dst = binary.AppendUvarint(dst, uint64(f.HLC))
	return appendString(dst, f.Origin)
}

// DecodeFlag decodes an AppendFlag encoding. It accepts only canonical
// input, so equal flags keep equal bytes (digests depend on it).
func DecodeFlag(b []byte) (Flag, error) {
	d := decoder{b: b}
	d.version()
	blocked := d.byte()
	if d.err == nil && blocked > 1 {
		d.fail("blocked byte %d", blocked)
	}
	f := Flag{Blocked: blocked == 1, HLC: HLC(d.uvarint())}
	f.Origin = d.string()
	switch {
	case d.err != nil:
	case (f.Origin == "") != (f.HLC == 0):
		d.fail("origin %q with hlc %d", f.Origin, f.HLC)
	case f.Blocked && f.HLC == 0:
		d.fail("blocked without a timestamp")
	case f.Origin != "" && !ValidID(f.Origin):
		d.fail("bad origin id")
	}
	if err := d.finish("flag"); err != nil {
		return Flag{}, err
	}
	return f, nil
}

// Record is f as a register-only like record {Liked: Blocked, HLC,
// Origin}: the form a flag travels in between replicas, so that the fast
// path, anti-entropy pages and provenance cuts (LikeRecord.Restrict)
// carry it as they carry any record's register.
func (f Flag) Record() *LikeRecord {
	return &LikeRecord{Liked: f.Blocked, HLC: f.HLC, Origin: f.Origin}
}

// FlagOfRecord reads a flag back from its Record form. It refuses (ok
// false) a record that is not a pure register: with contributions, a
// client time or a toggle's idempotency key.
func FlagOfRecord(r *LikeRecord) (f Flag, ok bool) {
	if len(r.Contrib) > 0 || r.At != 0 || r.Idem != "" {
		return Flag{}, false
	}
	return Flag{Blocked: r.Liked, HLC: r.HLC, Origin: r.Origin}, true
}
