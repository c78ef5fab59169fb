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
	// OpToggle flips item Key's like by User, once per Idem if set
	// (region.OpToggle); the result's Liked is the state it decided.
	OpToggle
	// OpUniques adds the ids List to unique counter Key
	// (region.OpUniques); the result's Changed says whether its sketch
	// changed.
	OpUniques

	// The reads: answered from the holder's view, never by its writer.
	// A request holds reads only or writes only.

	// OpGet reads counter Key: Value, and Found unless it was never
	// written.
	OpGet
	// OpUniqueCount counts the distinct ids of the union of the unique
	// counters List: Value, the estimate rounded.
	OpUniqueCount
	// OpLiked reads whether User likes item (or part) Key: Liked.
	OpLiked
	// OpLikeCount reads item (or part) Key's like count: Value.
	OpLikeCount
	// OpLikers lists up to By (1..region.MaxListLimit) users who like
	// item Key, after user User ("" from the first): Users, and More if
	// any follow.
	OpLikers
	// OpAllLikers lists up to By (1..region.MaxAllLikers) users who like
	// item Key, from one view of the store: Users, and More if it has
	// more.
	OpAllLikers

	// The view reads: what a front door shows of a read, its value with
	// the holder's view it was read from (Result.Detail).

	// OpCounterView reads counter Key as OpGet, with Detail's Vector,
	// Unreconciled, ApproxError, Stale and Staleness.
	OpCounterView
	// OpLikesView reads item (or part) Key's like count as OpLikeCount,
	// with Detail's Vector, Unreconciled, Stale and Staleness.
	OpLikesView
	// OpLikedView reads User's like of item (or part) Key as OpLiked,
	// with Detail's Origin and HLCs (one: the winning stamp, 0 if none).
	OpLikedView
	// OpLikersView lists as OpLikers, with Detail's HLCs: when each
	// listed user liked the item.
	OpLikersView
	// OpBudgetView reads budget Key: Value its remaining, Rights the
	// holder's own rights, and Detail's Granted, Spent, Rights,
	// Unreconciled and Origin (the holder, whose view it is).
	OpBudgetView

	// The backfills (POST /v1/admin/import's events, region.Op.Import):
	// as OpLike, OpUnlike, OpIncr and OpUniques, at AtMs however far in
	// the past. Writes, numbered after the reads: a replica that does not
	// know them refuses the request whole (an unknown kind).
	OpImportLike
	OpImportUnlike
	OpImportIncr
	OpImportUniques

	// OpHistory reads the history of User's like of item (or part) Key,
	// the newest By (1..region.MaxHistory) actions at each replica,
	// gathered by the holder (ReadHistory). A read, alone in its request,
	// answered as one History (history.go), not as Results.
	OpHistory

	// OpUniqueRead reads the unique count of the union of the counters
	// List, all time or over a range of slots, as GET /v1/uniques does
	// (UniqueReadOp, uniques.go). A read, alone in its request, answered
	// as one Uniques, not as Results.
	OpUniqueRead
	// OpWindow reads the window of key Key ("" for the family's total)
	// over Span; OpSeries the series of keys List over Span. Reads, each
	// alone in its request, answered as one Windows (windows.go), not as
	// Results.
	OpWindow
	OpSeries

	numOpKinds = OpSeries + 1
)

// Read reports whether k is a read (OpGet through OpBudgetView,
// OpHistory, OpUniqueRead, OpWindow and OpSeries).
func (k OpKind) Read() bool {
	return k >= OpGet && k <= OpBudgetView || k == OpHistory || k == OpUniqueRead || k.window()
}

// hasList reports whether an operation of kind k carries List on the
// wire (only those do, so every other kind encodes as before List was).
func (k OpKind) hasList() bool {
	return k == OpUniques || k == OpUniqueCount || k == OpImportUniques || k == OpUniqueRead || k == OpSeries
}

// Op is one typed operation a replica forwards to a holder of its key's
// shard. The entry replica has checked and authenticated it.
type Op struct {
	Kind                      OpKind
	Key, User, Merchant, Idem string
	By                        int64
	// AtMs is the client's time of the event (unix ms), 0 for now.
	AtMs int64
	// List is OpUniques' (and OpImportUniques') ids or OpUniqueCount's
	// keys, at most MaxList; on the wire for those kinds only.
	List []string
	// Span is OpWindow's and OpSeries' range; on the wire for those
	// kinds only (windows.go).
	Span Span
}

// opMinBytes is the fewest bytes an encoded Op takes.
const opMinBytes = 7

func (o *Op) size() int {
	n := 48 + len(o.Key) + len(o.User) + len(o.Merchant) + len(o.Idem)
	for _, s := range o.List {
		n += len(s) + 2
	}
	return n
}

func (o *Op) append(b []byte) []byte {
	b = append(b, byte(o.Kind))
	b = appendString(b, o.Key)
	b = appendString(b, o.User)
	b = appendString(b, o.Merchant)
	b = appendString(b, o.Idem)
	b = binary.AppendVarint(b, o.By)
	b = binary.AppendVarint(b, o.AtMs)
	if o.Kind.hasList() {
		b = appendStrings(b, o.List)
	}
	if o.Kind.hasSpan() {
		b = o.Span.append(b)
	}
	return b
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
	if o.Kind.hasList() {
		o.List = d.strings()
	}
	if o.Kind.hasSpan() {
		o.Span = d.span()
	}
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
	// Found: an OpGet's counter was written. More: an OpLikers' or
	// OpAllLikers' item has likers past Users, the users it listed (at
	// most MaxList).
	Found, More bool
	Users       []string
	// Detail is a view read's (OpCounterView and after); nil for any
	// other operation.
	Detail *Detail
}

// Result flags, one bit each; flagUsers says Users follows, non-empty.
const (
	flagDuplicate = 1 << iota
	flagLiked
	flagChanged
	flagApprox
	flagFound
	flagMore
	flagUsers
	// flagDetail says Detail follows (the last bit of the byte: every
	// flags byte now means something).
	flagDetail
)

// resultMinBytes is the fewest bytes an encoded Result takes.
const resultMinBytes = 9

// MarshalResults encodes the results of a KindOps request, the Body of its
// answer.
func MarshalResults(rs []Result) []byte {
	n := 4
	for i := range rs {
		n += 48 + len(rs[i].Code) + len(rs[i].Msg) + len(rs[i].Refused)
		for _, u := range rs[i].Users {
			n += len(u) + 2
		}
		if rs[i].Detail != nil {
			n += rs[i].Detail.size()
		}
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
		for i, f := range [...]bool{r.Duplicate, r.Liked, r.Changed, r.Approx, r.Found, r.More, len(r.Users) > 0, r.Detail != nil} {
			if f {
				flags |= 1 << i
			}
		}
		b = append(b, flags)
		if len(r.Users) > 0 {
			b = appendStrings(b, r.Users)
		}
		if r.Detail != nil {
			b = r.Detail.append(b)
		}
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
		default:
			r.Duplicate, r.Liked, r.Changed, r.Approx = f&flagDuplicate != 0, f&flagLiked != 0, f&flagChanged != 0, f&flagApprox != 0
			r.Found, r.More = f&flagFound != 0, f&flagMore != 0
			if f&flagUsers != 0 {
				if r.Users = d.strings(); d.err == nil && len(r.Users) == 0 {
					d.fail("an empty list of users flagged")
				}
			}
			if f&flagDetail != 0 {
				r.Detail = d.detail()
			}
		}
		out = append(out, r)
	}
	return out, d.end()
}

// MaxList bounds an Op's List and a Result's Users.
const MaxList = 1 << 16

func appendStrings(b []byte, ss []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = appendString(b, s)
	}
	return b
}

// strings reads a list of at most MaxList strings; nil when empty.
func (d *decoder) strings() []string {
	n := d.count(MaxList)
	if n == 0 {
		return nil
	}
	out := make([]string, 0, min(n, len(d.b)))
	for range n {
		if d.err != nil {
			return nil
		}
		out = append(out, d.string())
	}
	return out
}
