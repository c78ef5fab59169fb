package route

import "encoding/binary"

// OpKind says what a typed operation (Op) does. The values are the wire's:
// never renumber one.
type OpKind uint8

const (
	// OpSpend takes By from budget Key, once per Idem if set.
	OpSpend OpKind = iota + 1
	// OpIncr adds By to counter Key, once per Idem if set.
	OpIncr
	// OpGrant adds By to budget Key, once per Idem if set.
	OpGrant
	// OpFence closes budget Key's Idem to spends unless a spend of By
	// was applied under it (region.OpFence).
	OpFence
	// OpCashback spends By from budgets Key and Merchant and adds it to
	// counter User, under Idem, in one commit (region.OpCashback): for a
	// holder of all three keys.
	OpCashback
	// OpLike and OpUnlike mark item Key liked or not by User, at AtMs if
	// set, once per Idem if set.
	OpLike
	OpUnlike
	// OpCallOff fences budget Key's Idem whatever was applied under it
	// (region.OpCallOff); OpCallOffCredit counter Key's
	// (region.OpCallOffCredit).
	OpCallOff
	OpCallOffCredit

	numOpKinds = OpCallOffCredit + 1
)

// Op is one typed operation a replica forwards to a holder of its key's
// shard. The entry replica has checked and authenticated it.
type Op struct {
	Kind                      OpKind
	Key, User, Merchant, Idem string
	By                        int64
	// AtMs is the client's time of the event (unix ms), 0 for now.
	AtMs int64
}

// opMinBytes is the fewest bytes an encoded Op takes.
const opMinBytes = 7

func (o *Op) size() int { return 24 + len(o.Key) + len(o.User) + len(o.Merchant) + len(o.Idem) }

func (o *Op) append(b []byte) []byte {
	b = append(b, byte(o.Kind))
	b = appendString(b, o.Key)
	b = appendString(b, o.User)
	b = appendString(b, o.Merchant)
	b = appendString(b, o.Idem)
	b = binary.AppendVarint(b, o.By)
	return binary.AppendVarint(b, o.AtMs)
}

func (d *decoder) op() Op {
	var o Op
	o.Kind = OpKind(d.byte())
	if d.err == nil && (o.Kind == 0 || o.Kind >= numOpKinds) {
		d.fail("unknown operation kind %d", o.Kind)
	}
	o.Key = d.string()
	o.User = d.string()
	o.Merchant = d.string()
	o.Idem = d.string()
	o.By = d.varint()
	o.AtMs = d.varint()
	return o
}

// Result is a holder's answer to one Op.
type Result struct {
	// Code is "" when the operation applied (or was a duplicate), else
	// why it did not: a code of the API's errors (budget_exhausted,
	// rights_elsewhere, fenced, ...), Msg saying more.
	Code, Msg string
	// Refused names the budget a refused cashback could not spend from.
	Refused string
	// Value is the counter's value or the budget's remaining after the
	// operation; Merchant and User a cashback's other balances; Rights
	// the holder's rights to the budget.
	Value, Merchant, User, Rights int64
	// Duplicate: the idempotency key was applied before (for OpFence:
	// the spend was applied, so nothing was fenced).
	Duplicate bool
	// Liked and Changed: a like's or unlike's user state after it, and
	// whether it changed. Approx and Counted: an increment of an
	// approximate counter, and what it counted.
	Liked, Changed, Approx bool
	Counted                int64
}

// resultMinBytes is the fewest bytes an encoded Result takes.
const resultMinBytes = 9

// MarshalResults encodes the results of a KindOps request, the Body of its
// answer.
func MarshalResults(rs []Result) []byte {
	n := 4
	for i := range rs {
		n += 48 + len(rs[i].Code) + len(rs[i].Msg) + len(rs[i].Refused)
	}
	b := make([]byte, 0, n)
	b = append(b, Version)
	b = binary.AppendUvarint(b, uint64(len(rs)))
	for i := range rs {
		r := &rs[i]
		b = appendString(b, r.Code)
		b = appendString(b, r.Msg)
		b = appendString(b, r.Refused)
		b = binary.AppendVarint(b, r.Value)
		b = binary.AppendVarint(b, r.Merchant)
		b = binary.AppendVarint(b, r.User)
		b = binary.AppendVarint(b, r.Rights)
		b = binary.AppendVarint(b, r.Counted)
		var flags byte
		for i, f := range [...]bool{r.Duplicate, r.Liked, r.Changed, r.Approx} {
			if f {
				flags |= 1 << i
			}
		}
		b = append(b, flags)
	}
	return b
}

// UnmarshalResults decodes what MarshalResults encoded, refusing anything
// malformed or out of bounds.
func UnmarshalResults(b []byte) ([]Result, error) {
	d := decoder{b: b}
	d.header()
	n := d.count(MaxOps)
	var out []Result
	if n > 0 {
		out = make([]Result, 0, min(n, len(d.b)/resultMinBytes+1))
	}
	for range n {
		if d.err != nil {
			break
		}
		var r Result
		r.Code = d.string()
		r.Msg = d.string()
		r.Refused = d.string()
		r.Value = d.varint()
		r.Merchant = d.varint()
		r.User = d.varint()
		r.Rights = d.varint()
		r.Counted = d.varint()
		switch f := d.byte(); {
		case d.err != nil:
		case f >= 1<<4:
			d.fail("result flags %d", f)
		default:
			r.Duplicate, r.Liked, r.Changed, r.Approx = f&1 != 0, f&2 != 0, f&4 != 0, f&8 != 0
		}
		out = append(out, r)
	}
	return out, d.end()
}
