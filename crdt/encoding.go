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
//	Record:     v1 | flags | HLC | origin | [amount] | [at] | [asked] | [idem] | count | (replica | P | N)*
//	            (LikeRecord, KeyedRecord and Spend alike)
//	            flags bit 0 = liked (applied), bit 1 = keyed, bit 2 = at, bit 3 = asked,
//	            bit 4 = idem, bit 5 = fenced; amount (zigzag varint) only in a keyed record with a register;
//	            at (unix ms) only with bit 2; asked (zigzag varint, not 0, not amount) only
//	            with bit 3, in a keyed record with a register; idem (a string, an id) only
//	            with bit 4, in a like record with a register (bit 4 came with toggles:
//	            earlier encodings never set it and decode as before); fenced only
//	            in a keyed record's register with amount and asked zero (bit 5 came
//	            with fences that beat applications: earlier encodings never set it)
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

// The three kinds of record share one encoding, told apart by the keyed
// flag (a KeyedRecord and a Spend set it) and, between those two, by the
// name they are stored and sent under (SpendName). A keyed kind's liked
// flag says it holds a register (it is applied).

// wireRecord is a record of any kind in the shape of its encoding.
type wireRecord struct {
	liked, keyed      bool
	hlc               HLC
	origin            string
	amount, asked, at int64
	idem              string // a like record's toggle key
	fenced            bool   // a keyed record's register is a fence
	contrib           Vector
}

// AppendLikeRecord appends the encoding of r to dst.
func AppendLikeRecord(dst []byte, r *LikeRecord) []byte {
	return appendRecord(dst, &wireRecord{liked: r.Liked, hlc: r.HLC, origin: r.Origin, at: r.At, idem: r.Idem, contrib: r.Contrib})
}

// AppendKeyedRecord appends the encoding of r to dst.
func AppendKeyedRecord(dst []byte, r *KeyedRecord) []byte {
	return appendRecord(dst, &wireRecord{liked: r.Applied(), keyed: true, hlc: r.HLC, origin: r.Origin, amount: r.Amount,
		asked: r.Asked, at: r.At, fenced: r.Fenced, contrib: r.Contrib})
}

// AppendSpend appends the encoding of s to dst: a keyed record's.
func AppendSpend(dst []byte, s *Spend) []byte { return AppendKeyedRecord(dst, s.keyed()) }

// AppendRecord appends the encoding of a record of any kind to dst.
func AppendRecord(dst []byte, r Record) []byte {
	switch r := r.(type) {
	case *LikeRecord:
		return AppendLikeRecord(dst, r)
	case *KeyedRecord:
		return AppendKeyedRecord(dst, r)
	case *Spend:
		return AppendSpend(dst, r)
	case interface{ appendRecord([]byte) []byte }: // a Register
		return r.appendRecord(dst)
	}
	panic("crdt: AppendRecord of a nil record")
}

// DecodeLikeRecord decodes an AppendLikeRecord encoding.
func DecodeLikeRecord(b []byte) (*LikeRecord, error) {
	w, err := decodeRecord(b, "like record", kindLike)
	if err != nil {
		return nil, err
	}
	return likeOf(&w), nil
}

// DecodeKeyedRecord decodes an AppendKeyedRecord encoding.
func DecodeKeyedRecord(b []byte) (*KeyedRecord, error) {
	w, err := decodeRecord(b, "keyed record", kindKeyed)
	if err != nil {
		return nil, err
	}
	return keyedOf(&w), nil
}

// DecodeSpend decodes an AppendSpend encoding.
func DecodeSpend(b []byte) (*Spend, error) {
	r, err := DecodeKeyedRecord(b)
	return (*Spend)(r), err
}

// DecodeRecord decodes a record of the kind its encoding says: a like
// record or, keyed, a KeyedRecord, or a Spend if spend (its name says so:
// SpendKey). A spend that is not keyed is corrupt.
func DecodeRecord(b []byte, spend bool) (Record, error) {
	want, what := kindAny, "record"
	if spend {
		want, what = kindKeyed, "spend"
	}
	w, err := decodeRecord(b, what, want)
	switch {
	case err != nil:
		return nil, err
	case spend:
		return (*Spend)(keyedOf(&w)), nil
	case w.keyed:
		return keyedOf(&w), nil
	}
	return likeOf(&w), nil
}

func likeOf(w *wireRecord) *LikeRecord {
	return &LikeRecord{Liked: w.liked, HLC: w.hlc, Origin: w.origin, At: w.at, Idem: w.idem, Contrib: w.contrib}
}

func keyedOf(w *wireRecord) *KeyedRecord {
	return &KeyedRecord{HLC: w.hlc, Origin: w.origin, Amount: w.amount, Asked: w.asked, At: w.at, Fenced: w.fenced, Contrib: w.contrib}
}

func appendRecord(dst []byte, r *wireRecord) []byte {
	var flags byte
	if r.liked {
		flags |= 1
	}
	if r.keyed {
		flags |= 2
	}
	if r.at != 0 && r.hlc != 0 {
		flags |= 4
	}
	if r.asked != 0 && r.keyed && r.hlc != 0 {
		flags |= 8
	}
	if r.idem != "" && !r.keyed && r.hlc != 0 {
		flags |= 16
	}
	if r.fenced && r.keyed && r.hlc != 0 {
		flags |= 32
	}
	dst = append(dst, formatV1, flags)
	dst = binary.AppendUvarint(dst, uint64(r.hlc))
	dst = appendString(dst, r.origin)
	if r.keyed && r.hlc != 0 {
		dst = binary.AppendVarint(dst, r.amount)
	}
	if flags&4 != 0 {
		dst = binary.AppendUvarint(dst, uint64(r.at))
	}
	if flags&8 != 0 {
		dst = binary.AppendVarint(dst, r.asked)
	}
	if flags&16 != 0 {
		dst = appendString(dst, r.idem)
	}
	return appendVectorBody(dst, r.contrib)
}

// The kinds a decoder takes: a like record, a keyed record or spend, or
// either, as the flags say.
const (
	kindAny = iota
	kindLike
	kindKeyed
)

// decodeRecord decodes a record's encoding, which must be of kind want;
// what names the kind in errors.
func decodeRecord(b []byte, what string, want int) (wireRecord, error) {
	d := decoder{b: b}
	d.version()
	flags := d.byte()
	if d.err == nil && flags&^63 != 0 {
		d.fail("unknown flags %#x", flags)
	}
	r := wireRecord{liked: flags&1 != 0, keyed: flags&2 != 0, hlc: HLC(d.uvarint())}
	r.origin = d.string()
	if d.err == nil && (r.origin == "") != (r.hlc == 0) {
		d.fail("origin %q with hlc %d", r.origin, r.hlc)
	}
	if d.err == nil && r.liked && r.hlc == 0 {
		d.fail("liked without a timestamp")
	}
	if d.err == nil && r.origin != "" && !ValidID(r.origin) {
		d.fail("bad origin id")
	}
	if r.keyed && r.hlc != 0 {
		if r.amount = d.varint(); d.err == nil && !r.liked {
			d.fail("keyed record not applied")
		}
	}
	if flags&4 != 0 {
		if r.at = int64(d.uvarint()); d.err == nil && (r.hlc == 0 || r.at <= 0 || r.at > 1<<47) {
			d.fail("bad at %d", r.at)
		}
	}
	if flags&8 != 0 {
		// Canonical: only a keyed application stores Asked, and only when
		// it differs from the Amount counted.
		if r.asked = d.varint(); d.err == nil && (!r.keyed || r.hlc == 0 || r.asked == 0 || r.asked == r.amount) {
			d.fail("bad asked %d", r.asked)
		}
	}
	if flags&16 != 0 {
		// Canonical: only a like record's register stores a toggle's key.
		if r.idem = d.string(); d.err == nil && (r.keyed || r.hlc == 0 || !ValidID(r.idem)) {
			d.fail("bad idempotency key %q", r.idem)
		}
	}
	if flags&32 != 0 {
		// Canonical: only a keyed record's register is a fence, and a
		// fence counts nothing.
		if r.fenced = true; d.err == nil && (!r.keyed || r.hlc == 0 || r.amount != 0 || r.asked != 0) {
			d.fail("bad fence")
		}
	}
	r.contrib = d.vector()
	switch {
	case d.err != nil:
	case want == kindLike && r.keyed:
		d.fail("keyed where a like record is expected")
	case want == kindKeyed && !r.keyed:
		d.fail("not keyed where a keyed record is expected")
	}
	if err := d.finish(what); err != nil {
		return wireRecord{}, err
	}
	return r, nil
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
