// Package route is the wire between the replicas of one sharded region:
// the subject each replica takes forwarded work on, and the typed,
// versioned encoding of that work (Request) and of its answer (Answer).
//
// The rules it holds (docs/architecture.md, "Routing"):
//
//   - A request goes to one chosen holder's own subject,
//     tally.route.<region>.to.<replica>, which only that replica may
//     subscribe to (internal/natsperm). No queue group is shared, so no
//     other replica's credentials can read a request or answer it. The
//     answer goes to the sender's own inbox prefix, which only the sender
//     may subscribe to.
//   - A request carries typed fields the entry replica filled after it
//     parsed, authenticated and rate-limited the client: never a client's
//     token, never a client's header, never a RESP command's bytes (its
//     keys travel as typed operations, Op, and typed reads, answered by
//     Read). A holder trusts the fields because only a replica of the
//     region may publish on the region's subjects.
//   - Under load, requests of typed operations for one holder travel
//     together as one request of kind KindBatch, on the same subject, and
//     are answered together, one answer each (Sender.Ask, batch.go).
//   - An answer of kind NotServed says nothing was applied (the replica
//     does not hold the shard now, or does not accept writes yet): the
//     sender tries the next holder. Any other failure may have applied a
//     write and is never retried elsewhere (Sender, sender.go; its rules
//     are played by the scripts in testdata/route).
package route

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/tally-dev/tally/replication"
)

// Version is the encoding's version, the first byte of every Request and
// Answer. A decoder refuses any other.
const Version = 1

// Kind says what a Request asks.
type Kind uint8

const (
	// Kinds 1, 2 and 3 were a client's HTTP request or RESP command,
	// whole, for a holder or for every replica: each now travels as
	// typed operations (KindOps) or a typed question (KindQuestion).
	// Their numbers stay unused, and a decoder refuses them.

	// KindOps is typed operations of one shard's keys (Request.Ops), for
	// a holder; the answer's Body is their results (MarshalResults).
	KindOps Kind = iota + 4
	// KindQuestion is a gathered read, typed (Request.Question), that
	// every other replica of the region answers from the shards it holds;
	// the answer's Body is its Reply (MarshalReply, question.go).
	KindQuestion
	// KindBatch is requests of kind KindOps for one holder, forwarded
	// together (Request.Batch; Sender batches them while an earlier
	// request to the holder is in flight); the answer is of kind Answers,
	// one answer per request, in order (MarshalAnswers).
	KindBatch

	numKinds = KindBatch + 1
)

// Bounds a decoder holds a Request or Answer to, so no length read from
// the wire is allocated or looped on before it is checked.
const (
	MaxBytes = 8 << 20 // a whole message
	MaxOps   = 1 << 14 // typed operations of one request
	MaxBatch = 1 << 10 // requests of one batch (KindBatch)
)

// Request is one piece of work a replica forwards to another.
type Request struct {
	Kind Kind
	// From is the sending replica (for logs; it proves nothing).
	From string
	// Shard is the shard the request is for: the receiver serves it only
	// while it holds that shard (or, for a read, keeps it passively).
	// Unused (-1) for KindQuestion.
	Shard int
	// DeadlineMs is when the sender stops waiting (unix ms): a receiver
	// that picks the request up later drops it.
	DeadlineMs int64

	// KindOps: the operations, in order.
	Ops []Op

	// KindQuestion: the gathered read asked.
	Question *Question

	// KindBatch: the requests, each of kind KindOps, in order. The
	// batch's own Shard is -1 and its DeadlineMs the earliest of theirs;
	// each keeps its own.
	Batch []Request
}

// AnswerKind says how a receiver took a Request.
type AnswerKind uint8

const (
	// Served: the receiver ran the request; the answer follows.
	Served AnswerKind = iota + 1
	// NotServed: the receiver does not serve the request's shard now
	// (not held, or it does not accept writes yet); nothing was applied.
	NotServed
	// Answers: the answer to a batch (KindBatch), its Body one answer
	// per request, in order (MarshalAnswers).
	Answers

	numAnswerKinds = Answers + 1
)

// Unanswered is the kind of a batch's answer (UnmarshalAnswers) the
// holder gave none: the request came past its deadline, or the writer may
// or may not have applied it. The sender answers "timeout", never
// "nothing applied". It is never a whole message's kind.
const Unanswered AnswerKind = 0

// Answer is a receiver's answer to a Request.
type Answer struct {
	Kind AnswerKind
	// Reason says why a request was NotServed.
	Reason string
	// Body is the results of typed operations (MarshalResults, or a
	// read's own encoding: History, Uniques, Windows), or a gathered
	// read's Reply (MarshalReply).
	Body []byte
}

// Subject is where replica of region takes forwarded requests.
func Subject(region, replica string) string {
	return "tally.route." + replication.SubjectToken(region) + ".to." + replication.SubjectToken(replica)
}

// SendSubjects is the pattern of every replica's Subject in region: what
// a replica of region may publish to (internal/natsperm).
func SendSubjects(region string) string {
	return "tally.route." + replication.SubjectToken(region) + ".to.*"
}

// Marshal encodes r.
func (r *Request) Marshal() []byte {
	n := 32 + len(r.From)
	for i := range r.Ops {
		n += r.Ops[i].size()
	}
	if r.Question != nil {
		n += r.Question.size()
	}
	items := make([][]byte, len(r.Batch))
	for i := range r.Batch {
		items[i] = r.Batch[i].Marshal()
		n += len(items[i]) + binary.MaxVarintLen64
	}
	b := make([]byte, 0, n)
	b = append(b, Version, byte(r.Kind))
	b = appendString(b, r.From)
	b = binary.AppendVarint(b, int64(r.Shard))
	b = binary.AppendVarint(b, r.DeadlineMs)
	b = appendString(b, "") // was the client's address, for a whole HTTP request: always empty
	switch r.Kind {
	case KindOps:
		b = binary.AppendUvarint(b, uint64(len(r.Ops)))
		for i := range r.Ops {
			b = r.Ops[i].append(b)
		}
	case KindQuestion:
		q := r.Question
		if q == nil {
			q = &Question{}
		}
		b = q.append(b)
	case KindBatch:
		b = appendItems(b, items)
	}
	return b
}

// MarshalBatch encodes a Request of kind KindBatch from requests already
// encoded (Request.Marshal), each of kind KindOps: the same bytes as
// Request{Kind: KindBatch, From: from, Shard: -1, DeadlineMs: deadlineMs,
// Batch: them decoded}.Marshal().
func MarshalBatch(from string, deadlineMs int64, items [][]byte) []byte {
	n := 32 + len(from)
	for _, it := range items {
		n += len(it) + binary.MaxVarintLen64
	}
	b := make([]byte, 0, n)
	b = append(b, Version, byte(KindBatch))
	b = appendString(b, from)
	b = binary.AppendVarint(b, -1)
	b = binary.AppendVarint(b, deadlineMs)
	b = appendString(b, "")
	return appendItems(b, items)
}

func appendItems(b []byte, items [][]byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(items)))
	for _, it := range items {
		b = appendBytes(b, it)
	}
	return b
}

// UnmarshalRequest decodes a Request, refusing anything malformed,
// unknown or out of bounds.
func UnmarshalRequest(b []byte) (Request, error) {
	d := decoder{b: b}
	var r Request
	d.header()
	r.Kind = Kind(d.byte())
	if d.err == nil && (r.Kind < KindOps || r.Kind >= numKinds) {
		d.fail("unknown request kind %d", r.Kind)
	}
	r.From = d.string()
	r.Shard = int(d.varint())
	r.DeadlineMs = d.varint()
	if remote := d.string(); d.err == nil && remote != "" {
		d.fail("a client address in a typed request")
	}
	switch r.Kind {
	case KindOps:
		n := d.count(MaxOps)
		if n > 0 {
			r.Ops = make([]Op, 0, min(n, len(d.b)/opMinBytes+1))
		}
		for range n {
			if d.err != nil {
				break
			}
			r.Ops = append(r.Ops, d.op())
		}
	case KindQuestion:
		r.Question = d.question()
	case KindBatch:
		r.Batch = d.batch()
		if d.err == nil && r.Shard != -1 {
			d.fail("a batch for shard %d", r.Shard)
		}
	}
	if d.err == nil && r.Shard < -1 {
		d.fail("shard %d", r.Shard)
	}
	return r, d.end()
}

// batch reads a batch's requests: each of kind KindOps, whole.
func (d *decoder) batch() []Request {
	n := d.count(MaxBatch)
	if d.err == nil && n == 0 {
		d.fail("an empty batch")
	}
	var out []Request
	if n > 0 {
		out = make([]Request, 0, min(n, len(d.b)))
	}
	for range n {
		b := d.bytes()
		if d.err != nil {
			break
		}
		r, err := UnmarshalRequest(b)
		if err == nil && r.Kind != KindOps {
			err = fmt.Errorf("%w: a request of kind %d in a batch", ErrMalformed, r.Kind)
		}
		if err != nil {
			d.fail("request %d of the batch: %v", len(out), err)
			break
		}
		out = append(out, r)
	}
	return out
}

// MarshalAnswers encodes the answers to a batch's requests, in order
// (the Body of an Answer of kind Answers), after the Version; one of kind
// Unanswered says the holder gave none.
func MarshalAnswers(as []Answer) []byte {
	items := make([][]byte, len(as))
	n := binary.MaxVarintLen64
	for i := range as {
		if as[i].Kind != Unanswered {
			items[i] = as[i].Marshal()
		}
		n += len(items[i]) + binary.MaxVarintLen64
	}
	return appendItems(append(make([]byte, 0, n), Version), items)
}

// UnmarshalAnswers decodes the answers to a batch's requests
// (MarshalAnswers), refusing anything malformed, out of bounds, or an
// answer of kind Answers within.
func UnmarshalAnswers(b []byte) ([]Answer, error) {
	d := decoder{b: b}
	d.header()
	n := d.count(MaxBatch)
	var out []Answer
	if n > 0 {
		out = make([]Answer, 0, min(n, len(d.b)))
	}
	for range n {
		item := d.bytes()
		if d.err != nil {
			break
		}
		var a Answer
		if len(item) > 0 {
			var err error
			if a, err = UnmarshalAnswer(item); err == nil && a.Kind == Answers {
				err = fmt.Errorf("%w: answers within answers", ErrMalformed)
			}
			if err != nil {
				d.fail("answer %d: %v", len(out), err)
				break
			}
		}
		out = append(out, a)
	}
	return out, d.end()
}

// Marshal encodes a.
func (a *Answer) Marshal() []byte {
	b := make([]byte, 0, 16+len(a.Reason)+len(a.Body))
	b = append(b, Version, byte(a.Kind))
	b = appendString(b, a.Reason)
	// An HTTP status and headers were answered here to whole HTTP
	// requests: none now, and the layout stays.
	b = binary.AppendUvarint(b, 0)
	b = binary.AppendUvarint(b, 0)
	return appendBytes(b, a.Body)
}

// UnmarshalAnswer decodes an Answer, refusing anything malformed, unknown
// or out of bounds.
func UnmarshalAnswer(b []byte) (Answer, error) {
	d := decoder{b: b}
	var a Answer
	d.header()
	a.Kind = AnswerKind(d.byte())
	if d.err == nil && (a.Kind == 0 || a.Kind >= numAnswerKinds) {
		d.fail("unknown answer kind %d", a.Kind)
	}
	a.Reason = d.string()
	if status, headers := d.uvarint(), d.uvarint(); d.err == nil && (status != 0 || headers != 0) {
		d.fail("an HTTP status or headers in a typed answer")
	}
	a.Body = d.bytes()
	if d.err == nil && a.Kind == Answers {
		if a.Reason != "" {
			d.fail("a reason with a batch's answers")
		} else if _, err := UnmarshalAnswers(a.Body); err != nil {
			d.fail("a batch's answers: %v", err)
		}
	}
	return a, d.end()
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

// ErrMalformed wraps every decoding error.
var ErrMalformed = errors.New("route: malformed message")

// decoder reads fields off b, remembering the first error; once it has
// one, every read returns a zero value.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) header() {
	if len(d.b) > MaxBytes {
		d.fail("%d bytes, more than %d", len(d.b), MaxBytes)
		return
	}
	if v := d.byte(); d.err == nil && v != Version {
		d.fail("version %d, this replica reads %d", v, Version)
	}
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail("short")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad number")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad number")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a count of items of at least one byte each, at most max.
func (d *decoder) count(max int) int {
	n := d.uvarint()
	if d.err == nil && (n > uint64(max) || n > uint64(len(d.b))) {
		d.fail("count %d", n)
		return 0
	}
	return int(n)
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail("length %d past the end", n)
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string { return string(d.bytes()) }

func (d *decoder) end() error {
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d bytes past the end", len(d.b))
	}
	return d.err
}
