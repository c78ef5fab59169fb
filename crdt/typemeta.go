package crdt

import (
	"encoding/binary"
	"strings"
	"unicode/utf8"
)

// TypeMeta is the metadata of one event type (a counter key or a key
// prefix, see TypeOf): its owner, its status and a description, as a
// last-writer-wins register ordered by (HLC, Origin), like a block flag.
// The zero TypeMeta is "never registered", which loses to every real one.
type TypeMeta struct {
	Owner       string
	Status      string // TypeActive or TypeInactive
	Description string
	HLC         HLC
	Origin      string // replica that wrote the winning metadata
}

// Type statuses. Writes to a key whose type is inactive are refused.
const (
	TypeActive   = "active"
	TypeInactive = "inactive"
)

// Bounds of a type's texts, in bytes: an owner is a name, a description a
// sentence or two.
const (
	MaxTypeOwner       = 128
	MaxTypeDescription = 1024
)

// IsZero reports whether m was never set.
func (m TypeMeta) IsZero() bool { return m == TypeMeta{} }

// Inactive reports whether writes to the type are refused.
func (m TypeMeta) Inactive() bool { return m.Status == TypeInactive }

// ValidTypeTexts checks a type's owner, status and description: texts of
// valid UTF-8 within their bounds, a known status. It returns what is
// wrong ("" if nothing).
func ValidTypeTexts(owner, status, description string) string {
	switch {
	case len(owner) > MaxTypeOwner || !utf8.ValidString(owner):
		return "owner must be valid UTF-8 of at most 128 bytes"
	case status != TypeActive && status != TypeInactive:
		return `status must be "active" or "inactive"`
	case len(description) > MaxTypeDescription || !utf8.ValidString(description):
		return "description must be valid UTF-8 of at most 1024 bytes"
	}
	return ""
}

// Wins reports whether m beats o: larger HLC, ties broken by origin id,
// then (corrupt input only: one write has one stamp) by the texts, so that
// Merge stays commutative.
func (m TypeMeta) Wins(o TypeMeta) bool {
	if m.HLC != o.HLC {
		return m.HLC > o.HLC
	}
	if m.Origin != o.Origin {
		return m.Origin > o.Origin
	}
	if m.Status != o.Status {
		return m.Status > o.Status
	}
	if m.Owner != o.Owner {
		return m.Owner > o.Owner
	}
	return m.Description > o.Description
}

// Merge folds o into m and reports whether m changed.
func (m *TypeMeta) Merge(o TypeMeta) bool {
	if !o.Wins(*m) {
		return false
	}
	*m = o
	return true
}

// TypeOf returns the registered type a key belongs to: the key itself if
// it is registered, else the longest registered prefix of it that ends at
// a ':' (a type "video" or "video:" covers "video:123" and "video:1:2";
// "vid" covers neither). lookup reports a name's metadata. ok is false if
// no name matches.
func TypeOf(key string, lookup func(name string) (TypeMeta, bool)) (name string, m TypeMeta, ok bool) {
	if m, ok := lookup(key); ok {
		return key, m, true
	}
	for i := len(key) - 1; i > 0; i-- {
		if key[i] != ':' {
			continue
		}
		if m, ok := lookup(key[:i+1]); ok { // "video:"
			return key[:i+1], m, true
		}
		if m, ok := lookup(key[:i]); ok { // "video"
			return key[:i], m, true
		}
	}
	return "", TypeMeta{}, false
}

// TypeMeta encoding:
//
//	TypeMeta: v1 | HLC | origin | owner | status | description
//
// Every stored or sent TypeMeta is a real write: a non-zero HLC, an
// origin id, a known status and texts within their bounds.

// AppendTypeMeta appends the encoding of m to dst.
func AppendTypeMeta(dst []byte, m TypeMeta) []byte {
	dst = append(dst, formatV1)
	dst = binary.AppendUvarint(dst, uint64(m.HLC))
	dst = appendString(dst, m.Origin)
	dst = appendString(dst, m.Owner)
	dst = appendString(dst, m.Status)
	return appendString(dst, m.Description)
}

// DecodeTypeMeta decodes an AppendTypeMeta encoding. It accepts only
// canonical input of a real write.
func DecodeTypeMeta(b []byte) (TypeMeta, error) {
	d := decoder{b: b}
	d.version()
	m := TypeMeta{HLC: HLC(d.uvarint())}
	m.Origin = d.string()
	m.Owner = d.string()
	m.Status = d.string()
	m.Description = d.longString(MaxTypeDescription)
	switch {
	case d.err != nil:
	case m.HLC == 0 || !ValidID(m.Origin):
		d.fail("type metadata stamped %d by %q", m.HLC, m.Origin)
	default:
		if why := ValidTypeTexts(m.Owner, m.Status, m.Description); why != "" {
			d.fail("type metadata: %s", why)
		}
	}
	if err := d.finish("type metadata"); err != nil {
		return TypeMeta{}, err
	}
	return m, nil
}

// longString reads a string of at most max bytes.
func (d *decoder) longString(max int) string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(max) || n > uint64(len(d.b)) {
		d.fail("string length %d", n)
		return ""
	}
	s := strings.Clone(string(d.b[:n]))
	d.b = d.b[n:]
	return s
}

// TypeMeta is a Record so that it travels between replicas as records do
// (the fast path, anti-entropy pages), under its own record item: a
// register with no contributions, so nothing to reconcile.

// Excess is 0: a type's metadata counts nothing.
func (*TypeMeta) Excess() int64 { return 0 }

// BookedMs is 0: nothing is booked in time windows.
func (*TypeMeta) BookedMs() int64 { return 0 }

// Empty reports whether m was never set.
func (m *TypeMeta) Empty() bool { return m.IsZero() }

// Stamp is the register's HLC and origin.
func (m *TypeMeta) Stamp() (HLC, string) { return m.HLC, m.Origin }

// Contributions is nil: a type's metadata has none.
func (*TypeMeta) Contributions() Vector { return nil }

func (*TypeMeta) isRecord() {}

// Restrict is m if keep(m.Origin), else the zero TypeMeta (cut true): a
// replica may say only what it may speak for, as for a record's register.
func (m *TypeMeta) Restrict(keep func(string) bool) (*TypeMeta, bool) {
	if m.IsZero() || keep(m.Origin) {
		return m, false
	}
	return &TypeMeta{}, true
}
