package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
)

// MaxBatchEvents caps the events in one POST /v1/events.
const MaxBatchEvents = 10000

// An event is a JSON object. Likes and unlikes name item and user (or the
// seed-style videoId and userId); increments name key, by (default 1) and
// an optional idempotency key; a toggle flips the user's like (with an
// optional idempotency key, no time) and its result says "liked":
//
//	{"type":"like","item":"v1","user":"alice"}
//	{"type":"toggle","item":"v1","user":"alice","idempotency_key":"tap-7"}
//	{"type":"incr","key":"views:v1","by":5,"idempotency_key":"req-42"}
//
// a unique event adds an id (or user) to a key's unique count, and grant
// and spend events raise and spend a budget (spend: by defaults to 1):
//
//	{"type":"unique","key":"viewers:v1","id":"alice"}
//	{"type":"grant","key":"campaign-7","by":1000}
//	{"type":"spend","key":"campaign-7","by":3,"idempotency_key":"imp-981"}
//
// The answer has one result per event, in request order:
//
//	{"applied":A,"rejected":R,"results":[{"ok":true,"value":V,"changed":true},
//	  {"ok":false,"value":0,"error":"...","code":"bad_id"},...]}
//
// where value is the like count or counter value after the event (a
// budget's remaining as this region sees it), changed (likes) and
// duplicate (increments, grants, spends) appear only when true, a spend the region
// cannot cover is rejected with code budget_exhausted or rights_elsewhere
// (nothing spent), an increment
// of an approximate counter says "approx":true and, if it counted
// anything, what it "counted", and a rejected event carries its own error
// and code.

// eventsBatch is one request's working memory, pooled: the body, the
// decoded operations and the answer. Nothing in it outlives the request
// except through copies (ops hold their own strings).
type eventsBatch struct {
	body    []byte
	ops     []region.Op
	spans   [][2]int   // each op's event's bytes in body (a sharded region's split)
	errs    []eventErr // rejected events, in event order
	out     []byte
	intern  map[string]int32 // id -> its index in ids
	ids     []internedID
	scanner eventScanner
	// importing: the batch is a backfill (POST /v1/admin/import, import.go);
	// seen counts each identical line so far, for its derived identity.
	importing bool
	seen      map[[importKeyBytes]byte]int
}

// eventErr is one rejected event.
type eventErr struct {
	event int
	err   *apiError
}

// maxUpfrontBody bounds what readBody allocates before the bytes arrive.
const maxUpfrontBody = 64 << 10

// maxPooledBody keeps a request with a huge configured MaxBodyBytes from
// parking that much memory in the pool.
const maxPooledBody = 4 << 20

func newEventsPool() *sync.Pool {
	return &sync.Pool{New: func() any { return &eventsBatch{intern: make(map[string]int32)} }}
}

// reset drops every reference the batch holds, keeping its buffers.
func (b *eventsBatch) reset() {
	clear(b.ops) // the op strings and the errors; the slices are reused
	clear(b.errs)
	b.ops, b.spans, b.errs, b.out = b.ops[:0], b.spans[:0], b.errs[:0], b.out[:0]
	clear(b.intern)
	clear(b.ids)
	b.ids = b.ids[:0]
	b.scanner = eventScanner{}
	b.importing = false
	clear(b.seen)
}

// POST /v1/events: a batch of like, unlike and incr events as a JSON array
// or as NDJSON (one object per line). Malformed JSON rejects the whole
// batch; an event with a bad id or type is rejected alone, with its own
// error, and the rest are applied in order in one durable group commit.
func (s *Server) postEvents(w http.ResponseWriter, r *http.Request) error {
	return s.ingest(w, r, false)
}

// ingest applies a batch of events: POST /v1/events, or a backfill (POST
// /v1/admin/import) if importing.
func (s *Server) ingest(w http.ResponseWriter, r *http.Request, importing bool) error {
	b := s.eventsPool.Get().(*eventsBatch)
	b.importing = importing
	pooled := true
	defer func() {
		if pooled && cap(b.body) <= maxPooledBody {
			b.reset()
			s.eventsPool.Put(b)
		}
	}()
	n, err := s.decodeEvents(w, r, b)
	if err != nil {
		return err
	}
	if err := s.limitEvents(r, n); err != nil {
		return err
	}
	s.hotOps(b.ops)
	if s.cfg.Shards != nil && !s.holdsAll(b.ops) {
		// An import splits as a batch does, its increments carrying the
		// keys derived here from their lines' bytes and occurrences in
		// the whole batch (identical lines are on one shard, so a
		// holder's share of them is all of them, in their order).
		return s.postSplitEvents(w, r, b, n) // eventsplit.go
	}
	var res []region.Result
	if len(b.ops) > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
		defer cancel()
		res, err = s.rep.Do(ctx, b.ops)
		if err != nil {
			// The writer may still hold the ops (a timeout after they were
			// queued), so they must not go back to the pool.
			pooled = false
			return err
		}
	}
	b.out = s.appendEventsAnswer(b.out[:0], r, n, b.errs, b.ops, res)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(b.out)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b.out)
	return nil
}

// decodeEvents reads and decodes the body into b.ops (valid events) and
// b.errs (rejected ones) and returns the number of events.
func (s *Server) decodeEvents(w http.ResponseWriter, r *http.Request, b *eventsBatch) (int, error) {
	limit := s.cfg.MaxBodyBytes
	if r.ContentLength > limit {
		return 0, tooLarge(limit)
	}
	var err error
	if b.body, err = readBody(http.MaxBytesReader(w, r.Body, limit), b.body[:0], r.ContentLength); err != nil {
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) {
			return 0, tooLarge(limit)
		}
		return 0, newError(http.StatusBadRequest, frontdoor.CodeBadJSON, "cannot read the body: %v", err)
	}
	sc := &b.scanner
	if err := sc.start(b.body); err != nil {
		return 0, err
	}
	var e rawEvent
	n := 0
	for {
		ok, err := sc.next(&e)
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		if n == MaxBatchEvents {
			return 0, newError(http.StatusRequestEntityTooLarge, frontdoor.CodeBodyTooLarge, "more than %d events in one batch", MaxBatchEvents)
		}
		if b.importing {
			importShape(&e)
		}
		op, bad := b.op(&e)
		if bad == nil && b.importing {
			bad = b.importOp(&op, &e)
		}
		if bad != nil {
			b.errs = append(b.errs, eventErr{n, bad})
		} else {
			b.ops = append(b.ops, op)
			b.spans = append(b.spans, [2]int{e.start, e.end})
		}
		n++
	}
	if n == 0 {
		return 0, newError(http.StatusBadRequest, frontdoor.CodeMissingField, "no events in the batch")
	}
	return n, nil
}

// readBody reads r to its end into buf. A Content-Length of n > 0 sizes
// the first allocation, but only up to maxUpfrontBody: beyond that the
// buffer grows as bytes arrive, so a client that sends headers claiming a
// large body and then nothing pins no more than that (1,500 such
// connections once pinned 1.5 GiB). Pooled buffers make the growth a
// one-off cost.
func readBody(r io.Reader, buf []byte, n int64) ([]byte, error) {
	if n > 0 && int64(cap(buf)) < n+1 { // +1: EOF is seen without a grow
		buf = make([]byte, 0, min(n+1, maxUpfrontBody))
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		m, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// op validates one event into a replica operation. Its strings are copies
// (the body is reused); item and counter key repeat in a batch, so one copy
// of each serves every event that names it.
func (b *eventsBatch) op(e *rawEvent) (region.Op, *apiError) {
	bad := func(code, format string, args ...any) (region.Op, *apiError) {
		return region.Op{}, newError(http.StatusBadRequest, code, format, args...)
	}
	typ := string(e.typ) // compared only: no allocation
	var at int64
	var err *apiError
	if e.at != nil {
		at, err = eventTimeAPI(eventTimeString(e.atField, e.at))
	} else if e.hasAtNum {
		at, err = eventTimeAPI(eventTimeNumber(e.atField, e.atNum))
	}
	if err != nil {
		return region.Op{}, err
	}
	switch typ {
	case "like", "unlike", "toggle":
		switch {
		case len(e.key) > 0 || e.hasBy || len(e.id) > 0:
			return bad(frontdoor.CodeBadRequest, "%s events take item, user and idempotency_key only", typ)
		case typ == "toggle" && at != 0:
			return bad(frontdoor.CodeBadRequest, "toggle events take no at or timestamp: a toggle flips the state it finds")
		}
		item, err := pick("item", e.item, "videoId", e.videoID)
		if err != nil {
			return region.Op{}, err
		}
		user, err := pick("user", e.user, "userId", e.userID)
		if err != nil {
			return region.Op{}, err
		}
		idem, err := eventIdem(e)
		if err != nil {
			return region.Op{}, err
		}
		if typ == "toggle" {
			return region.Op{Kind: region.OpToggle, Item: b.ids[b.internID(item)].s, User: string(user), IdemKey: idem}, nil
		}
		kind := region.OpLike
		if typ == "unlike" {
			kind = region.OpUnlike
		}
		return region.Op{Kind: kind, Item: b.ids[b.internID(item)].s, User: string(user), At: at, IdemKey: idem}, nil
	case "incr":
		if len(e.item) > 0 || len(e.videoID) > 0 || len(e.user) > 0 || len(e.userID) > 0 || len(e.id) > 0 {
			return bad(frontdoor.CodeBadRequest, "incr events take key, by and idempotency_key only")
		}
		if err := checkIDBytes("key", e.key); err != nil {
			return region.Op{}, err
		}
		by := int64(1)
		if e.hasBy {
			by = e.by
		}
		if by > region.MaxBy || by < -region.MaxBy {
			return bad(frontdoor.CodeBadBy, "by %d is out of range; want |by| <= %d", by, int64(region.MaxBy))
		}
		idem, err := eventIdem(e)
		if err != nil {
			return region.Op{}, err
		}
		id := &b.ids[b.internID(e.key)]
		if !id.add(by) {
			return bad(frontdoor.CodeBadBy, "the increments of key %s in this batch would add up past %d in one direction", quoteShort(id.s), int64(region.MaxBy))
		}
		return region.Op{Kind: region.OpIncr, Item: id.s, By: by, IdemKey: idem, At: at}, nil
	case "unique":
		if len(e.item) > 0 || len(e.videoID) > 0 || e.hasBy || len(e.idem) > 0 {
			return bad(frontdoor.CodeBadRequest, "unique events take key and id (or user) only")
		}
		if err := checkIDBytes("key", e.key); err != nil {
			return region.Op{}, err
		}
		uid, err := pick("id", e.id, "user", e.user)
		if err != nil {
			return region.Op{}, err
		}
		if len(e.userID) > 0 {
			return bad(frontdoor.CodeBadRequest, "unique events take id or user, not userId")
		}
		return region.Op{Kind: region.OpUniques, Item: b.ids[b.internID(e.key)].s, IDs: []string{string(uid)}, At: at}, nil
	case "grant", "spend":
		if len(e.item) > 0 || len(e.videoID) > 0 || len(e.user) > 0 || len(e.userID) > 0 || len(e.id) > 0 || e.at != nil || e.hasAtNum {
			return bad(frontdoor.CodeBadRequest, "%s events take key, by and idempotency_key only", typ)
		}
		if err := checkIDBytes("key", e.key); err != nil {
			return region.Op{}, err
		}
		kind, by := region.OpSpend, int64(1)
		if typ == "grant" {
			kind = region.OpGrant
			if !e.hasBy {
				return bad(frontdoor.CodeMissingField, "grant events need by")
			}
		}
		if e.hasBy {
			by = e.by
		}
		if by < 1 || by > region.MaxBy {
			return bad(frontdoor.CodeBadBy, "by %d is out of range; want 1 to %d", by, int64(region.MaxBy))
		}
		idem, err := eventIdem(e)
		if err != nil {
			return region.Op{}, err
		}
		id := &b.ids[b.internID(e.key)]
		signed := by // a grant raises the budget's entry, a spend lowers it
		if kind == region.OpSpend {
			signed = -by
		}
		if !id.add(signed) {
			return bad(frontdoor.CodeBadBy, "the %ss of key %s in this batch would add up past %d", typ, quoteShort(id.s), int64(region.MaxBy))
		}
		return region.Op{Kind: kind, Item: id.s, By: by, IdemKey: idem}, nil
	case "":
		return bad(frontdoor.CodeMissingField, `event needs "type": like, unlike, toggle, incr, unique, grant or spend`)
	}
	return bad(frontdoor.CodeBadRequest, "unknown event type %s: want like, unlike, toggle, incr, unique, grant or spend", quoteShort(typ))
}

// pick returns the one of two alternative fields that is set, validated.
func pick(field string, a []byte, altField string, b []byte) ([]byte, *apiError) {
	if len(a) > 0 && len(b) > 0 && !bytes.Equal(a, b) {
		return nil, newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "%s and %s differ", field, altField)
	}
	if len(a) == 0 {
		a = b
	}
	return a, checkIDBytes(field, a)
}

// checkIDBytes is checkID for an id still in the body.
func checkIDBytes(field string, v []byte) *apiError {
	if crdt.ValidIDBytes(v) {
		return nil
	}
	if err := checkID(field, string(v)); err != nil {
		return err.(*apiError)
	}
	return nil
}

// internedID is one distinct id of a batch: one string copy, and for a
// counter or budget key the sums of the batch's changes up and down.
type internedID struct {
	s        string
	up, down int64
}

// add counts a change by `by` of the key, unless it would take the batch's
// changes past MaxBy in its direction. One batch may add at most MaxBy to
// a key, and subtract at most MaxBy: without the cap, one batch of 10,000
// maximal increments would catch up with region.EntryCap at once, and the
// key would refuse large increments (or grants) until the cap rises.
func (id *internedID) add(by int64) bool {
	if by > 0 && id.up+by > region.MaxBy || by < 0 && id.down-by > region.MaxBy {
		return false
	}
	if by > 0 {
		id.up += by
	} else {
		id.down -= by
	}
	return true
}

// eventIdem is an event's idempotency key, validated ("" if none).
func eventIdem(e *rawEvent) (string, *apiError) {
	if len(e.idem) == 0 {
		return "", nil
	}
	if !crdt.ValidIDBytes(e.idem) {
		return "", newError(http.StatusBadRequest, frontdoor.CodeBadID, "idempotency_key must be %s", frontdoor.IDRule)
	}
	return string(e.idem), nil
}

// internID returns the index in b.ids of a (valid) id, adding it if it is
// new to the batch.
func (b *eventsBatch) internID(id []byte) int32 {
	if i, ok := b.intern[string(id)]; ok { // no allocation for the lookup
		return i
	}
	s := string(id)
	i := int32(len(b.ids))
	b.ids = append(b.ids, internedID{s: s})
	b.intern[s] = i
	return i
}

// appendEventsAnswer appends the answer to dst: n results, errs merged
// with res (the results of the valid events, in order).
func (s *Server) appendEventsAnswer(dst []byte, r *http.Request, n int, errs []eventErr, ops []region.Op, res []region.Result) []byte {
	applied := 0
	for i := range res {
		if res[i].Err == nil {
			applied++
		}
	}
	dst = append(dst, `{"applied":`...)
	dst = strconv.AppendInt(dst, int64(applied), 10)
	dst = append(dst, `,"rejected":`...)
	dst = strconv.AppendInt(dst, int64(n-applied), 10)
	dst = append(dst, `,"results":[`...)
	appendErr := func(dst []byte, e *apiError) []byte {
		dst = append(dst, `{"ok":false,"value":0,"error":`...)
		dst = appendJSONString(dst, e.Msg)
		dst = append(dst, `,"code":`...)
		dst = appendJSONString(dst, e.Code)
		return append(dst, '}')
	}
	j := 0
	for i := range n {
		if i > 0 {
			dst = append(dst, ',')
		}
		if len(errs) > 0 && errs[0].event == i {
			dst = appendErr(dst, errs[0].err)
			errs = errs[1:]
			continue
		}
		// A toggle says the state it left; so does a keyed like or
		// unlike, whose retry answers the state the first left.
		rr, toggle := &res[j], ops[j].Kind == region.OpToggle || ops[j].IdemKey != "" && (ops[j].Kind == region.OpLike || ops[j].Kind == region.OpUnlike)
		j++
		if rr.Err != nil {
			dst = appendErr(dst, s.classify(r, rr.Err))
			continue
		}
		dst = append(dst, `{"ok":true,"value":`...)
		dst = strconv.AppendInt(dst, rr.Value, 10)
		if toggle {
			dst = append(dst, `,"liked":`...)
			dst = strconv.AppendBool(dst, rr.Liked)
		}
		if rr.Changed {
			dst = append(dst, `,"changed":true`...)
		}
		if rr.Duplicate {
			dst = append(dst, `,"duplicate":true`...)
		}
		if rr.Approx {
			// Most increments of a hot approximate counter count nothing:
			// "counted" only when they did keeps a batch's answer small.
			dst = append(dst, `,"approx":true`...)
			if rr.Counted != 0 {
				dst = append(dst, `,"counted":`...)
				dst = strconv.AppendInt(dst, rr.Counted, 10)
			}
		}
		dst = append(dst, '}')
	}
	return append(dst, "]}\n"...)
}

// appendJSONString appends s as a JSON string, escaped as encoding/json
// escapes it. Ids are printable ASCII that needs no escape and are copied
// as they are; anything else (quotes, backslashes, <, >, &, control
// bytes, non-ASCII) goes through encoding/json itself.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return appendMarshaledString(dst, s)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

func appendMarshaledString(dst []byte, s string) []byte {
	b, err := json.Marshal(s)
	if err != nil { // a string always marshals
		return append(dst, `""`...)
	}
	return append(dst, b...)
}
