package crdt

import "encoding/binary"

// Register is a last-writer-wins register: a value stamped with the HLC
// and origin of the write that set it, ordered by (HLC, Origin). A user's
// block flag (Flag) and an event type's metadata (TypeMeta) are both one,
// written by an admin at one replica and replicated to all. The zero
// Register is "never written", which loses to every real one.
type Register[V RegisterValue[V]] struct {
	Value  V
	HLC    HLC
	Origin string // replica that wrote the winning value
}

// RegisterValue is what a Register holds: a comparable value with a total
// order (Less) that breaks ties between two values under one stamp, and
// its part of the register's encoding. The encodings are part of this
// package's format (they are stored and sent), so the values are the
// ones defined here.
type RegisterValue[V any] interface {
	comparable
	// Less orders two values. One write has one stamp, so only corrupt
	// input holds two values under one (HLC, Origin); the order keeps
	// Merge commutative even then.
	Less(o V) bool

	registerCodec[V]
}

// registerCodec is a register value's part of the encoding:
//
//	Register: v1 | [value] | HLC | origin | [value]
//
// the value before the stamp or after it, as the value says (each kept
// the layout it had before registers were one type).
type registerCodec[V any] interface {
	// valueFirst reports whether the value's bytes precede the stamp.
	valueFirst() bool
	appendValue(dst []byte) []byte
	decodeValue(d *decoder) V
	// invalid says what is wrong with the value under stamp hlc ("" if
	// nothing): a decoder accepts only what a write can produce.
	invalid(hlc HLC) string
	// what names the register in errors.
	what() string
}

// IsZero reports whether r was never written.
func (r Register[V]) IsZero() bool { return r == Register[V]{} }

// Wins reports whether r beats o: larger HLC, ties broken by origin id,
// then (corrupt input only) by the value's order, so that Merge stays
// commutative.
func (r Register[V]) Wins(o Register[V]) bool {
	if r.HLC != o.HLC {
		return r.HLC > o.HLC
	}
	if r.Origin != o.Origin {
		return r.Origin > o.Origin
	}
	return o.Value.Less(r.Value)
}

// Merge folds o into r and reports whether r changed.
func (r *Register[V]) Merge(o Register[V]) bool {
	if !o.Wins(*r) {
		return false
	}
	*r = o
	return true
}

// Set records a local write of v at replica self, stamped hlc, which must
// exceed every HLC self has seen. It reports whether the value changed.
func (r *Register[V]) Set(self string, v V, hlc HLC) (changed bool) {
	changed = r.Value != v
	*r = Register[V]{Value: v, HLC: hlc, Origin: self}
	return changed
}

// AppendRegister appends the encoding of r to dst.
func AppendRegister[V RegisterValue[V]](dst []byte, r Register[V]) []byte {
	first := r.Value.valueFirst()
	dst = append(dst, formatV1)
	if first {
		dst = r.Value.appendValue(dst)
	}
	dst = binary.AppendUvarint(dst, uint64(r.HLC))
	dst = appendString(dst, r.Origin)
	if !first {
		dst = r.Value.appendValue(dst)
	}
	return dst
}

// DecodeRegister decodes an AppendRegister encoding. It accepts only
// canonical input, so equal registers keep equal bytes (digests depend on
// it): a zero stamp goes with an empty origin and the zero value, anything
// else has an origin id and a value the value type accepts.
func DecodeRegister[V RegisterValue[V]](b []byte) (Register[V], error) {
	var zero V
	first := zero.valueFirst()
	d := decoder{b: b}
	d.version()
	var r Register[V]
	if first {
		r.Value = zero.decodeValue(&d)
	}
	r.HLC = HLC(d.uvarint())
	r.Origin = d.string()
	if !first {
		r.Value = zero.decodeValue(&d)
	}
	switch {
	case d.err != nil:
	case (r.Origin == "") != (r.HLC == 0):
		d.fail("origin %q with hlc %d", r.Origin, r.HLC)
	case r.HLC == 0 && r.Value != zero:
		d.fail("a value without a timestamp")
	case r.Origin != "" && !ValidID(r.Origin):
		d.fail("bad origin id")
	default:
		if why := r.Value.invalid(r.HLC); why != "" {
			d.fail("%s", why)
		}
	}
	if err := d.finish(zero.what()); err != nil {
		return Register[V]{}, err
	}
	return r, nil
}

// A Register is a Record so that it travels between replicas as records
// do (the fast path, anti-entropy pages), under its own record item: a
// register with no contributions, so nothing to reconcile. (A flag still
// travels in its like record form, FlagRecord, which replicas of every
// version read.)

// Excess is 0: a register counts nothing.
func (*Register[V]) Excess() int64 { return 0 }

// BookedMs is 0: nothing is booked in time windows.
func (*Register[V]) BookedMs() int64 { return 0 }

// Empty reports whether r was never written.
func (r *Register[V]) Empty() bool { return r.IsZero() }

// Stamp is the register's HLC and origin.
func (r *Register[V]) Stamp() (HLC, string) { return r.HLC, r.Origin }

// Contributions is nil: a register has none.
func (*Register[V]) Contributions() Vector { return nil }

func (*Register[V]) isRecord() {}

// appendRecord is AppendRecord of a register.
func (r *Register[V]) appendRecord(dst []byte) []byte { return AppendRegister(dst, *r) }

// Restrict is r if keep(r.Origin), else the zero register (cut true): a
// replica may say only what it may speak for, as for a record's register.
func (r *Register[V]) Restrict(keep func(string) bool) (*Register[V], bool) {
	if r.IsZero() || keep(r.Origin) {
		return r, false
	}
	return &Register[V]{}, true
}
