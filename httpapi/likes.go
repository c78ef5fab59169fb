package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
	tallyroute "github.com/tally-dev/tally/route"
)

// replicasJSON is a vector as the API shows it.
func replicasJSON(v crdt.Vector) map[string]api.PN {
	m := make(map[string]api.PN, len(v))
	for _, e := range v {
		m[e.Replica] = api.PN{P: e.P, N: e.N}
	}
	return m
}

// likeRequest is the optional body of PUT and DELETE
// /v1/likes/{item}/{user}: when the action happened by the client, which
// orders it against the user's other actions of the item, and an
// idempotency key.
type likeRequest struct {
	At        json.RawMessage `json:"at"`
	Timestamp json.RawMessage `json:"timestamp"`
	// IdempotencyKey makes a retry of the action answer what it did
	// (duplicate), even after the user's later actions; the
	// Idempotency-Key header is an alternative.
	IdempotencyKey *string `json:"idempotency_key"`
}

// PUT /v1/likes/{item}/{user} [{"at": ..., "idempotency_key": "..."}]
func (s *Server) putLike(w http.ResponseWriter, r *http.Request) error {
	return s.pathLike(w, r, true)
}

// DELETE /v1/likes/{item}/{user} [{"at": ..., "idempotency_key": "..."}]
func (s *Server) deleteLike(w http.ResponseWriter, r *http.Request) error {
	return s.pathLike(w, r, false)
}

// pathLike is a like or unlike of the path's item and user.
func (s *Server) pathLike(w http.ResponseWriter, r *http.Request, liked bool) error {
	ids, err := pathIDs(r, "item", "user")
	if err != nil {
		return err
	}
	var body likeRequest
	if err := s.decodeBody(w, r, &body); err != nil && !errors.Is(err, errEmptyBody) {
		return err
	}
	at, err := eventTime(body.At, body.Timestamp)
	if err != nil {
		return err
	}
	idem, err := idempotencyKey(r, body.IdempotencyKey)
	if err != nil {
		return err
	}
	return s.likeAt(w, r, ids[0], ids[1], liked, at, idem)
}

// toggleRequest is the optional body of POST
// /v1/likes/{item}/{user}/toggle.
type toggleRequest struct {
	// IdempotencyKey makes a retried toggle flip once; the
	// Idempotency-Key header is an alternative.
	IdempotencyKey *string `json:"idempotency_key"`
	// (No at or timestamp: a toggle flips the state it finds, so it is
	// ordered right after it. They are unknown fields here.)
}

// POST /v1/likes/{item}/{user}/toggle [{"idempotency_key": "..."}]
func (s *Server) toggleLike(w http.ResponseWriter, r *http.Request) error {
	ids, err := pathIDs(r, "item", "user")
	if err != nil {
		return err
	}
	var body toggleRequest
	if err := s.decodeBody(w, r, &body); err != nil && !errors.Is(err, errEmptyBody) {
		return err
	}
	idem, err := idempotencyKey(r, body.IdempotencyKey)
	if err != nil {
		return err
	}
	item, user := ids[0], ids[1]
	if err := s.limitUser(user); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	name := s.actionName(item, user, false) // a split item's: the user's part
	res, err := s.apply(ctx, w, r, region.Op{Kind: region.OpToggle, Item: name, User: user, IdemKey: idem})
	if err != nil {
		return err
	}
	s.writeLike(w, item, user, name, res)
	return nil
}

// seedLikeRequest is the body of the seed-style routes: POST /v1/likes names
// the item in the body (as videoId or item, exactly one), DELETE
// /v1/likes/{item} in the path (the body may repeat it).
type seedLikeRequest struct {
	VideoID *string `json:"videoId"`
	Item    *string `json:"item"`
	UserID  *string `json:"userId"`
	// At (or Timestamp, as the seed clients send it) is when the like
	// happened by the client (eventTime).
	At        json.RawMessage `json:"at"`
	Timestamp json.RawMessage `json:"timestamp"`
}

// itemAndUser checks the body's ids. pathItem is "" when the item must come
// from the body.
func (b *seedLikeRequest) itemAndUser(pathItem string) (item, user string, err error) {
	var field string
	switch {
	case b.VideoID != nil && b.Item != nil:
		return "", "", newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "give exactly one of videoId and item, not both")
	case b.VideoID != nil:
		field, item = "videoId", *b.VideoID
	case b.Item != nil:
		field, item = "item", *b.Item
	case pathItem == "":
		return "", "", newError(http.StatusBadRequest, frontdoor.CodeMissingField, "body needs videoId (or item) and userId")
	}
	if field != "" {
		if err := checkID(field, item); err != nil {
			return "", "", err
		}
		if pathItem != "" && item != pathItem {
			return "", "", newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "%s %q in the body differs from item %q in the path", field, item, pathItem)
		}
	}
	if pathItem != "" {
		item = pathItem
	}
	if b.UserID == nil {
		return "", "", newError(http.StatusBadRequest, frontdoor.CodeMissingField, "body needs userId")
	}
	if err := checkID("userId", *b.UserID); err != nil {
		return "", "", err
	}
	return item, *b.UserID, nil
}

// POST /v1/likes {"videoId"|"item": "...", "userId": "..."}
func (s *Server) postLike(w http.ResponseWriter, r *http.Request) error {
	var body seedLikeRequest
	if err := s.decodeRequired(w, r, &body, `{"videoId":"...","userId":"..."}`); err != nil {
		return err
	}
	item, user, err := body.itemAndUser("")
	if err != nil {
		return err
	}
	at, err := eventTime(body.At, body.Timestamp)
	if err != nil {
		return err
	}
	return s.likeAt(w, r, item, user, true, at, "")
}

// DELETE /v1/likes/{item} {"userId": "..."}
func (s *Server) deleteLikeBody(w http.ResponseWriter, r *http.Request) error {
	pathItem, err := pathID(r, "item")
	if err != nil {
		return err
	}
	var body seedLikeRequest
	if err := s.decodeRequired(w, r, &body, `{"userId":"..."}`); err != nil {
		return err
	}
	item, user, err := body.itemAndUser(pathItem)
	if err != nil {
		return err
	}
	at, err := eventTime(body.At, body.Timestamp)
	if err != nil {
		return err
	}
	return s.likeAt(w, r, item, user, false, at, "")
}

// decodeRequired decodes a body that must be present.
func (s *Server) decodeRequired(w http.ResponseWriter, r *http.Request, dst any, want string) error {
	err := s.decodeBody(w, r, dst)
	if errors.Is(err, errEmptyBody) {
		return newError(http.StatusBadRequest, frontdoor.CodeBadJSON, "request body is empty; want %s", want)
	}
	return err
}

// likeAt applies a like (liked) or unlike durably, with the client's time
// of the action (unix ms; zero: none, the replica's clock), and answers
// the user's state and the count.
func (s *Server) likeAt(w http.ResponseWriter, r *http.Request, item, user string, liked bool, at int64, idem string) error {
	if err := s.limitUser(user); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	kind := region.OpUnlike
	if liked {
		kind = region.OpLike
	}
	name := s.actionName(item, user, !liked) // a split item's: the user's part
	res, err := s.apply(ctx, w, r, region.Op{Kind: kind, Item: name, User: user, At: at, IdemKey: idem})
	if err != nil {
		return err
	}
	s.writeLike(w, item, user, name, res)
	return nil
}

// writeLike answers a like, unlike or toggle of item by user, applied to
// name (a split item's part, or item).
func (s *Server) writeLike(w http.ResponseWriter, item, user, name string, res region.Result) {
	out := api.Like{Item: item, User: user, Liked: res.Liked, Changed: res.Changed, Count: res.Value, Duplicate: res.Duplicate}
	if _, k, ok := crdt.SplitPart(name); ok {
		out.Part, out.Parts = &k, s.cfg.Hot.Parts(item)
	}
	writeJSON(w, http.StatusOK, out)
}

// GET /v1/likes/{item}
func (s *Server) getLikes(w http.ResponseWriter, r *http.Request) error {
	item, err := pathID(r, "item")
	if err != nil {
		return err
	}
	meta, err := withMeta(r.URL.Query())
	if err != nil {
		return err
	}
	if n := s.cfg.Hot.Parts(item); n > 0 {
		return s.getHotLikes(w, r, item, n)
	}
	rd, v, err := s.readLikes(w, r, item)
	if err != nil {
		return err
	}
	approx, staleness := v.approx, v.staleness
	if !meta {
		writeJSONBytes(w, http.StatusOK, appendLikes(make([]byte, 0, 256), item, rd, approx, staleness))
		return nil
	}
	out := api.Likes{
		Item: item, Count: rd.Value, Approx: approx, StalenessMs: staleness,
		Replicas: replicasJSON(rd.Vector), Unreconciled: rd.Unreconciled, Meta: s.typeMeta(item),
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// readLikes reads item's like count here, or at a holder of its shard
// (readsElsewhere), with the view it was read from.
func (s *Server) readLikes(w http.ResponseWriter, r *http.Request, item string) (region.Read, readView, error) {
	return s.readLikesAt(w, r, item, s.readsElsewhere(r, item))
}

// readLikesAt reads item's like count at a holder of its shard if
// elsewhere, else here, with the view it was read from.
func (s *Server) readLikesAt(w http.ResponseWriter, r *http.Request, item string, elsewhere bool) (region.Read, readView, error) {
	if !elsewhere {
		rd, err := s.rep.Likes().Count(item)
		if err != nil {
			return region.Read{}, readView{}, err
		}
		return rd, s.localView(rd, item), nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	res, err := s.readAt(ctx, w, item, tallyroute.Op{Kind: tallyroute.OpLikesView, Key: item})
	if err != nil {
		return region.Read{}, readView{}, err
	}
	return holderRead(res)
}

// readView is how old the view a read came from may be: approx and
// staleness_ms of its answer, the holder's word when a holder read it.
type readView struct {
	approx    bool
	staleness map[string]int64
}

// localView is this replica's view of rd, a read of key.
func (s *Server) localView(rd region.Read, key string) readView {
	return readView{approx: s.approx(rd, key), staleness: s.staleness(key)}
}

// holderRead is a holder's view read (tallyroute.OpCounterView,
// tallyroute.OpLikesView) as this replica's own read would be.
func holderRead(res tallyroute.Result) (region.Read, readView, error) {
	d := res.Detail
	if d.Unreconciled < 0 || d.Unreconciled > math.MaxInt32 {
		return region.Read{}, readView{}, fmt.Errorf("the holder answered %d unreconciled records", d.Unreconciled)
	}
	rd := region.Read{Value: res.Value, Vector: d.Vector, Unreconciled: int(d.Unreconciled), ApproxError: d.ApproxError}
	return rd, readView{approx: rd.Unreconciled > 0 || d.Stale, staleness: d.Staleness}, nil
}
