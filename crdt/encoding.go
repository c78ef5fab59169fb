package crdt

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Binary encodings. Every encoded value starts with a format version byte so
// the layout can change without a flag day. Integers are uvarints; strings
// are a uvarint length then bytes. Vectors are written in replica order, so
// equal values encode to equal bytes (digests depend on it).
//
//	PN:         v1 | P | N
//	Vector:     v1 | count | (replica | P | N)*
//	LikeRecord: v1 | flags | HLC | origin | [amount] | [at] | [asked] | count | (replica | P | N)*
//	            flags bit 0 = liked, bit 1 = keyed, bit 2 = at, bit 3 = asked; amount (zigzag
//	            varint) only in a keyed record with a register; at (unix ms) only with bit 2;
//	            asked (zigzag varint, not 0, not amount) only with bit 3, in a keyed record
//	            with a register
const formatV1 = 1

// ErrCorrupt is returned (wrapped) by every decoder for malformed input.
var ErrCorrupt = errors.New("crdt: corrupt encoding")

// maxEntries bounds a decoded vector: far more replicas than any deployment,
// few enough that a hostile length cannot make the decoder allocate much.
const maxEntries = 4096

// AppendPN appends the encoding of e to dst.
func AppendPN(dst []byte, e PN) []byte {
	dst = append(dst, formatV1)
	dst = binary.AppendUvarint(dst, e.P)
	return binary.AppendUvarint(dst, e.N)
}

// DecodePN decodes an AppendPN encoding.
func DecodePN(b []byte) (PN, error) {
	d := decoder{b: b}
	d.version()
	e := PN{P: d.uvarint(), N: d.uvarint()}
	return e, d.finish("pn")
}

// AppendLikeRecord appends the encoding of r to dst.
func AppendLikeRecord(dst []byte, r *LikeRecord) []byte {
	var flags byte
	if r.Liked {
		flags |= 1
	}
	if r.Keyed {
		flags |= 2
	}
	if r.At != 0 && r.HLC != 0 {
		flags |= 4
	}
	if r.Asked != 0 && r.Keyed && r.HLC != 0 {
		flags |= 8
	}
	dst = append(dst, formatV1, flags)
	dst = binary.AppendUvarint(dst, uint64(r.HLC))
	dst = appendString(dst, r.Origin)
	if r.Keyed && r.HLC != 0 {
		dst = binary.AppendVarint(dst, r.Amount)
	}
	if flags&4 != 0 {
		dst = binary.AppendUvarint(dst, uint64(r.At))
	}
	if flags&8 != 0 {
		dst = binary.AppendVarint(dst, r.Asked)
	}
	return appendVectorBody(dst, r.Contrib)
}

// DecodeLikeRecord decodes an AppendLikeRecord encoding.
func DecodeLikeRecord(b []byte) (*LikeRecord, error) {
	d := decoder{b: b}
	d.version()
	flags := d.byte()
	if d.err == nil && flags&^15 != 0 {
		d.fail("unknown flags %#x", flags)
	}
	r := &LikeRecord{Liked: flags&1 != 0, Keyed: flags&2 != 0, HLC: HLC(d.uvarint())}
	r.Origin = d.string()
	if d.err == nil && (r.Origin == "") != (r.HLC == 0) {
		d.fail("origin %q with hlc %d", r.Origin, r.HLC)
	}
	if d.err == nil && r.Liked && r.HLC == 0 {
		d.fail("liked without a timestamp")
	}
	if d.err == nil && r.Origin != "" && !ValidID(r.Origin) {
		d.fail("bad origin id")
	}
	if r.Keyed && r.HLC != 0 {
		if r.Amount = d.varint(); d.err == nil && !r.Liked {
			d.fail("keyed record not applied")
		}
	}
	if flags&4 != 0 {
		if r.At = int64(d.uvarint()); d.err == nil && (r.HLC == 0 || r.At <= 0 || r.At > 1<<47) {
			d.fail("bad at %d", r.At)
		}
	}
	if flags&8 != 0 {
		// Canonical: only a keyed application stores Asked, and only when
		// it differs from the Amount counted.
		if r.Asked = d.varint(); d.err == nil && (!r.Keyed || r.HLC == 0 || r.Asked == 0 || r.Asked == r.Amount) {
			d.fail("bad asked %d", r.Asked)
		}
	}
	r.Contrib = d.vector()
	return r, d.finish("like record")
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendVectorBody(dst []byte, v Vector) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(v)))
	for _, e := range v {
		dst = appendString(dst, e.Replica)
		dst = binary.AppendUvarint(dst, e.P)
		dst = binary.AppendUvarint(dst, e.N)
	}
	return dst
}

// decoder reads a buffer and remembers the first error, so call sites read
// straight through and check once.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
	}
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) version() {
	if v := d.byte(); d.err == nil && v != formatV1 {
		d.fail("unknown format version %d", v)
	}
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	x, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	// binary.Uvarint accepts overlong forms (0x80 0x00 for 0); only the
	// minimal one is canonical, so equal values keep equal bytes.
	if n > 1 && d.b[n-1] == 0 {
		d.fail("non-minimal uvarint")
		return 0
	}
	d.b = d.b[n:]
	return x
}

func (d *decoder) varint() int64 {
	u := d.uvarint() // zigzag, as binary.AppendVarint writes it
	return int64(u>>1) ^ -int64(u&1)
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > MaxIDLen || n > uint64(len(d.b)) {
		d.fail("string length %d", n)
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) vector() Vector {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	// Each entry takes at least 4 bytes (length, one id byte, P, N).
	if n > maxEntries || n > uint64(len(d.b))/4 {
		d.fail("vector length %d", n)
		return nil
	}
	if n == 0 {
		return nil
	}
	v := make(Vector, 0, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		e := Entry{Replica: d.string(), PN: PN{P: d.uvarint(), N: d.uvarint()}}
		switch {
		case d.err != nil:
		case !ValidID(e.Replica):
			d.fail("bad replica id")
		case len(v) > 0 && v[len(v)-1].Replica >= e.Replica:
			d.fail("replicas out of order")
		case e.PN == PN{}:
			d.fail("zero entry for %q", e.Replica)
		default:
			v = append(v, e)
		}
	}
	return v
}

func (d *decoder) finish(what string) error {
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return fmt.Errorf("decode %s: %w", what, d.err)
	}
	return nil
}
