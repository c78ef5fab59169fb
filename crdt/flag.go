package crdt

// Flag is a user's block flag: a Register of a Block, ordered by (HLC,
// Origin) like the register of a like record. The zero Flag is "never
// flagged", which loses to every real one.
//
// A blocked user's likes do not count. The excess of each of the user's
// like records is then d = Σ Contrib − (Liked && !Blocked ? 1 : 0)
// (LikeRecord.ExcessBlocked), and the record's winner brings it to zero
// whenever its view of the record or of the user's flag changes: every
// record's winner eventually sees the final flag, so every record ends at
// d = 0 and the counts are exact.
type Flag = Register[Block]

// Block is a flag's value: whether the user is blocked.
type Block struct {
	Blocked bool
}

// Less orders not blocked before blocked.
func (b Block) Less(o Block) bool { return !b.Blocked && o.Blocked }

// Flag encoding (Register with the value first):
//
//	Flag: v1 | blocked (0 or 1) | HLC | origin
//
// A zero HLC goes with an empty origin and not blocked (the zero Flag);
// anything else has both.

func (Block) valueFirst() bool { return true }

func (b Block) appendValue(dst []byte) []byte {
	if b.Blocked {
		return append(dst, 1)
	}
	return append(dst, 0)
}

func (Block) decodeValue(d *decoder) Block {
	c := d.byte()
	if d.err == nil && c > 1 {
		d.fail("blocked byte %d", c)
	}
	return Block{Blocked: c == 1}
}

func (Block) invalid(HLC) string { return "" }

func (Block) what() string { return "flag" }

// AppendFlag appends the encoding of f to dst.
func AppendFlag(dst []byte, f Flag) []byte { return AppendRegister(dst, f) }

// DecodeFlag decodes an AppendFlag encoding. It accepts only canonical
// input, so equal flags keep equal bytes (digests depend on it).
func DecodeFlag(b []byte) (Flag, error) { return DecodeRegister[Block](b) }

// FlagRecord is f as a register-only like record {Liked: Blocked, HLC,
// Origin}: the form a flag travels in between replicas, so that the fast
// path, anti-entropy pages and provenance cuts (LikeRecord.Restrict)
// carry it as they carry any record's register.
func FlagRecord(f Flag) *LikeRecord {
	return &LikeRecord{Liked: f.Value.Blocked, HLC: f.HLC, Origin: f.Origin}
}

// FlagOfRecord reads a flag back from its Record form. It refuses (ok
// false) a record that is not a pure register: with contributions, a
// client time or a toggle's idempotency key.
func FlagOfRecord(r *LikeRecord) (f Flag, ok bool) {
	if len(r.Contrib) > 0 || r.At != 0 || r.Idem != "" {
		return Flag{}, false
	}
	return Flag{Value: Block{Blocked: r.Liked}, HLC: r.HLC, Origin: r.Origin}, true
}
