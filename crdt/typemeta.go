package crdt

import (
	"strings"
	"unicode/utf8"
)

// TypeMeta is the metadata of one event type (a counter key or a key
// prefix, see TypeOf) as a Register of a TypeInfo, ordered by (HLC,
// Origin) like a block flag. The zero TypeMeta is "never registered",
// which loses to every real one.
type TypeMeta = Register[TypeInfo]

// TypeInfo is a type's metadata: its owner, its status and a
// description.
type TypeInfo struct {
	Owner       string
	Status      string // TypeActive or TypeInactive
	Description string
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

// Inactive reports whether writes to the type are refused.
func (t TypeInfo) Inactive() bool { return t.Status == TypeInactive }

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

// Less orders by status, owner, then description.
func (t TypeInfo) Less(o TypeInfo) bool {
	if t.Status != o.Status {
		return t.Status < o.Status
	}
	if t.Owner != o.Owner {
		return t.Owner < o.Owner
	}
	return t.Description < o.Description
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

// TypeMeta encoding (Register with the value last):
//
//	TypeMeta: v1 | HLC | origin | owner | status | description
//
// Every stored or sent TypeMeta is a real write: a non-zero HLC, an
// origin id, a known status and texts within their bounds.

func (TypeInfo) valueFirst() bool { return false }

func (t TypeInfo) appendValue(dst []byte) []byte {
	dst = appendString(dst, t.Owner)
	dst = appendString(dst, t.Status)
	return appendString(dst, t.Description)
}

func (TypeInfo) decodeValue(d *decoder) TypeInfo {
	var t TypeInfo
	t.Owner = d.string()
	t.Status = d.string()
	t.Description = d.longString(MaxTypeDescription)
	return t
}

func (t TypeInfo) invalid(hlc HLC) string {
	if hlc == 0 {
		return "type metadata without a stamp"
	}
	if why := ValidTypeTexts(t.Owner, t.Status, t.Description); why != "" {
		return "type metadata: " + why
	}
	return ""
}

func (TypeInfo) what() string { return "type metadata" }

// AppendTypeMeta appends the encoding of m to dst.
func AppendTypeMeta(dst []byte, m TypeMeta) []byte { return AppendRegister(dst, m) }

// DecodeTypeMeta decodes an AppendTypeMeta encoding. It accepts only
// canonical input of a real write.
func DecodeTypeMeta(b []byte) (TypeMeta, error) { return DecodeRegister[TypeInfo](b) }

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
