package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
)

// MaxBatchEvents caps the events in one POST /v1/events.
const MaxBatchEvents = 10000

// eventJSON is one event of a batch. Likes name item and user (or the
// seed-style videoId and userId); increments name key, by (default 1) and
// an optional idempotency key.
type eventJSON struct {
	Type           string `json:"type"`
	Item           string `json:"item,omitempty"`
	VideoID        string `json:"videoId,omitempty"`
	User           string `json:"user,omitempty"`
	UserID         string `json:"userId,omitempty"`
	Key            string `json:"key,omitempty"`
	By             *int64 `json:"by,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// eventResult is one event's outcome, in request order.
type eventResult struct {
	OK        bool   `json:"ok"`
	Value     int64  `json:"value"` // like count or counter value after the event
	Changed   bool   `json:"changed,omitempty"`
	Duplicate bool   `json:"duplicate,omitempty"`
	Error     string `json:"error,omitempty"`
	Code      string `json:"code,omitempty"`
}

type eventsResponse struct {
	Applied  int           `json:"applied"`
	Rejected int           `json:"rejected"`
	Results  []eventResult `json:"results"`
}

// POST /v1/events: a batch of like, unlike and incr events as a JSON array
// or as NDJSON (one object per line). Malformed JSON rejects the whole
// batch; an event with a bad id or type is rejected alone, with its own
// error, and the rest are applied in order in one durable group commit.
func (s *Server) postEvents(w http.ResponseWriter, r *http.Request) error {
	events, err := s.decodeEvents(w, r)
	if err != nil {
		return err
	}
	results := make([]eventResult, len(events))
	ops := make([]region.Op, 0, len(events))
	index := make([]int, 0, len(events)) // ops[i] is events[index[i]]
	for i := range events {
		op, err := events[i].op()
		if err != nil {
			ae := s.classify(r, err)
			results[i] = eventResult{Error: ae.msg, Code: ae.code}
			continue
		}
		ops = append(ops, op)
		index = append(index, i)
	}
	if len(ops) > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
		defer cancel()
		res, err := s.rep.Do(ctx, ops)
		if err != nil {
			return err
		}
		for j, rr := range res {
			i := index[j]
			if rr.Err != nil {
				ae := s.classify(r, rr.Err)
				results[i] = eventResult{Error: ae.msg, Code: ae.code}
				continue
			}
			results[i] = eventResult{OK: true, Value: rr.Value, Changed: rr.Changed, Duplicate: rr.Duplicate}
		}
	}
	out := eventsResponse{Results: results}
	for _, rr := range results {
		if rr.OK {
			out.Applied++
		} else {
			out.Rejected++
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// op validates one event into a replica operation.
func (e *eventJSON) op() (region.Op, error) {
	bad := func(code, format string, args ...any) (region.Op, error) {
		return region.Op{}, newError(http.StatusBadRequest, code, format, args...)
	}
	pick := func(field, a, altField, b string) (string, error) {
		if a != "" && b != "" && a != b {
			return "", newError(http.StatusBadRequest, CodeBadRequest, "%s and %s differ", field, altField)
		}
		if a == "" {
			a = b
		}
		return a, checkID(field, a)
	}
	switch e.Type {
	case "like", "unlike":
		if e.Key != "" || e.By != nil || e.IdempotencyKey != "" {
			return bad(CodeBadRequest, "%s events take item and user only", e.Type)
		}
		item, err := pick("item", e.Item, "videoId", e.VideoID)
		if err != nil {
			return region.Op{}, err
		}
		user, err := pick("user", e.User, "userId", e.UserID)
		if err != nil {
			return region.Op{}, err
		}
		kind := region.OpLike
		if e.Type == "unlike" {
			kind = region.OpUnlike
		}
		return region.Op{Kind: kind, Item: item, User: user}, nil
	case "incr":
		if e.Item != "" || e.VideoID != "" || e.User != "" || e.UserID != "" {
			return bad(CodeBadRequest, "incr events take key, by and idempotency_key only")
		}
		if err := checkID("key", e.Key); err != nil {
			return region.Op{}, err
		}
		by := int64(1)
		if e.By != nil {
			by = *e.By
		}
		if by > region.MaxBy || by < -region.MaxBy {
			return bad(CodeBadBy, "by %d is out of range; want |by| <= %d", by, int64(region.MaxBy))
		}
		if e.IdempotencyKey != "" && !crdt.ValidID(e.IdempotencyKey) {
			return bad(CodeBadID, "idempotency_key must be 1..128 bytes of [A-Za-z0-9_.:@-]")
		}
		return region.Op{Kind: region.OpIncr, Item: e.Key, By: by, IdemKey: e.IdempotencyKey}, nil
	case "":
		return bad(CodeMissingField, `event needs "type": like, unlike or incr`)
	}
	return bad(CodeBadRequest, "unknown event type %q: want like, unlike or incr", e.Type)
}

// decodeEvents reads a JSON array or NDJSON of events, bounded in bytes and
// count.
func (s *Server) decodeEvents(w http.ResponseWriter, r *http.Request) ([]eventJSON, error) {
	limit := s.cfg.MaxBodyBytes
	if r.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	br := bufio.NewReader(http.MaxBytesReader(w, r.Body, limit))
	first, err := firstNonSpace(br)
	if errors.Is(err, io.EOF) {
		return nil, newError(http.StatusBadRequest, CodeMissingField, "no events: send a JSON array or NDJSON of events")
	}
	if err != nil {
		return nil, jsonError(err, limit)
	}
	dec := json.NewDecoder(br)
	dec.DisallowUnknownFields()
	array := first == '['
	if array {
		if _, err := dec.Token(); err != nil {
			return nil, jsonError(err, limit)
		}
	}
	var events []eventJSON
	for {
		if array && !dec.More() {
			if _, err := dec.Token(); err != nil { // the closing ]
				return nil, jsonError(err, limit)
			}
			if _, err := dec.Token(); !errors.Is(err, io.EOF) {
				return nil, newError(http.StatusBadRequest, CodeBadJSON, "trailing data after the events array")
			}
			break
		}
		var e eventJSON
		err := dec.Decode(&e)
		if !array && errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, eventError(len(events), jsonError(err, limit))
		}
		if len(events) == MaxBatchEvents {
			return nil, newError(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "more than %d events in one batch", MaxBatchEvents)
		}
		events = append(events, e)
	}
	if len(events) == 0 {
		return nil, newError(http.StatusBadRequest, CodeMissingField, "no events in the batch")
	}
	return events, nil
}

// eventError says which event a decoding error is in.
func eventError(i int, err error) error {
	var ae *apiError
	if errors.As(err, &ae) && ae.status == http.StatusBadRequest {
		ae.msg = fmt.Sprintf("event %d: %s", i, ae.msg)
	}
	return err
}

func firstNonSpace(br *bufio.Reader) (byte, error) {
	for {
		c, err := br.ReadByte()
		if err != nil {
			return 0, err
		}
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c, br.UnreadByte()
	}
}
