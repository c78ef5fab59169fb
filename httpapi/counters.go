package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
	tallyroute "github.com/tally-dev/tally/route"
)

// incrRequest is the optional body of POST /v1/counters/{key}/incr.
type incrRequest struct {
	// By is the amount to add; negative subtracts. Absent or null means 1.
	// Zero is accepted: it changes nothing and answers the current value
	// (with an idempotency key, that answer is what a retry gets).
	By *int64 `json:"by"`
	// IdempotencyKey makes retries count once; the Idempotency-Key header
	// is an alternative (if both are given they must be equal).
	IdempotencyKey *string `json:"idempotency_key"`
	// At (or Timestamp) is when the increment happened by the client: it
	// is booked into the slots of that moment (eventTime).
	At        json.RawMessage `json:"at"`
	Timestamp json.RawMessage `json:"timestamp"`
}

// POST /v1/counters/{key}/incr {"by": n, "idempotency_key": "..."}
func (s *Server) incr(w http.ResponseWriter, r *http.Request) error {
	key, err := pathID(r, "key")
	if err != nil {
		return err
	}
	var body incrRequest
	if err := s.decodeBody(w, r, &body); err != nil && !errors.Is(err, errEmptyBody) {
		return err
	}
	by := int64(1)
	if body.By != nil {
		by = *body.By
	}
	if err := frontdoor.CheckBy(by); err != nil {
		return err
	}
	idem, err := idempotencyKey(r, body.IdempotencyKey)
	if err != nil {
		return err
	}
	at, err := eventTime(body.At, body.Timestamp)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	res, err := s.apply(ctx, w, r, region.Op{Kind: region.OpIncr, Item: key, By: by, IdemKey: idem, At: at})
	if err != nil {
		return err
	}
	out := api.Incr{Key: key, Value: res.Value, Duplicate: res.Duplicate, Approx: res.Approx}
	if res.Approx && !res.Duplicate {
		out.Counted = &res.Counted
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// idempotencyKey merges the body's key and the Idempotency-Key header.
func idempotencyKey(r *http.Request, fromBody *string) (string, error) {
	header, inHeader := r.Header["Idempotency-Key"]
	switch {
	case inHeader && len(header) != 1:
		return "", newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "give one Idempotency-Key header, not %d", len(header))
	case inHeader && fromBody != nil && header[0] != *fromBody:
		return "", newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "Idempotency-Key header and idempotency_key in the body differ")
	case inHeader:
		return header[0], checkID("Idempotency-Key header", header[0])
	case fromBody != nil:
		return *fromBody, checkID("idempotency_key", *fromBody)
	}
	return "", nil
}

// GET /v1/counters/{key}
func (s *Server) getCounter(w http.ResponseWriter, r *http.Request) error {
	key, err := pathID(r, "key")
	if err != nil {
		return err
	}
	meta, err := withMeta(r.URL.Query())
	if err != nil {
		return err
	}
	rd, v, err := s.readCounter(w, r, key)
	if err != nil {
		return err
	}
	out := api.Counter{Key: key, Value: rd.Value, Approx: v.approx, Replicas: replicasJSON(rd.Vector),
		StalenessMs: v.staleness, Unreconciled: rd.Unreconciled}
	if rd.ApproxError > 0 {
		out.Approx, out.Mode = true, api.ModeApprox
		out.Error = approxError(rd.ApproxError, region.CounterStd(rd.ApproxError, rd.Vector))
	}
	if meta {
		out.Meta = s.typeMeta(key)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// approxError is the error of an approximate count whose standard
// deviation is at most std, in whole counts rounded up.
func approxError(relErr, std float64) *api.ApproxError {
	s := int64(math.Ceil(std))
	return &api.ApproxError{Relative: relErr, Std: s, Bound95: 2 * s}
}

// readCounter reads counter key here, or at a holder of its shard
// (readsElsewhere), with the view it was read from.
func (s *Server) readCounter(w http.ResponseWriter, r *http.Request, key string) (region.Read, readView, error) {
	if !s.readsElsewhere(r, key) {
		rd, err := s.rep.Counters().Get(key)
		if err != nil {
			return region.Read{}, readView{}, err
		}
		return rd, s.localView(rd, key), nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	res, err := s.readAt(ctx, w, key, tallyroute.Op{Kind: tallyroute.OpCounterView, Key: key})
	if err != nil {
		return region.Read{}, readView{}, err
	}
	return holderRead(res)
}
