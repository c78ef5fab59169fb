package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tally-dev/tally/api"
)

// Likes, their lists and the feed, and the block list.

// EventTime is when an event happened by the client, sent in a body as
// "at": the replica books the event into the time slots of that moment.
// The API takes RFC 3339 or unix milliseconds; At and AtUnixMilli choose
// which is sent. The zero EventTime sends none: the replica's clock
// decides.
type EventTime struct {
	ms      int64
	rfc3339 bool
}

// At is t, sent as RFC 3339 in UTC with its milliseconds. A zero t is
// the zero EventTime.
func At(t time.Time) EventTime {
	if t.IsZero() {
		return EventTime{}
	}
	return EventTime{ms: t.UnixMilli(), rfc3339: true}
}

// AtUnixMilli is ms, sent as a number of unix milliseconds.
func AtUnixMilli(ms int64) EventTime { return EventTime{ms: ms} }

// IsZero reports whether e sends no time.
func (e EventTime) IsZero() bool { return e.ms == 0 }

// MarshalJSON writes e as the API takes it.
func (e EventTime) MarshalJSON() ([]byte, error) {
	if e.rfc3339 {
		return json.Marshal(time.UnixMilli(e.ms).UTC().Format(time.RFC3339Nano))
	}
	return strconv.AppendInt(nil, e.ms, 10), nil
}

// Like likes item for user (idempotent).
func (c *Client) Like(ctx context.Context, item, user string) (api.Like, error) {
	var out api.Like
	return out, c.do(ctx, http.MethodPut, "/v1/likes/"+esc(item)+"/"+esc(user), nil, nil, &out)
}

// Unlike unlikes item for user (idempotent).
func (c *Client) Unlike(ctx context.Context, item, user string) (api.Like, error) {
	var out api.Like
	return out, c.do(ctx, http.MethodDelete, "/v1/likes/"+esc(item)+"/"+esc(user), nil, nil, &out)
}

// Toggle flips user's like of item in one step of the region's writer
// and answers the new state (POST /v1/likes/{item}/{user}/toggle). With an
// idempotency key (idem not "") a retry, in any region the toggle has
// reached, flips nothing: it answers Duplicate and the state the toggle
// decided.
func (c *Client) Toggle(ctx context.Context, item, user, idem string) (api.Like, error) {
	var body any
	if idem != "" {
		body = struct {
			Idem string `json:"idempotency_key"`
		}{idem}
	}
	var out api.Like
	return out, c.do(ctx, http.MethodPost, "/v1/likes/"+esc(item)+"/"+esc(user)+"/toggle", nil, body, &out)
}

// LikeRequest is a like or unlike sent by the body routes, which take
// the client's event time: a like or unlike older than the state it finds
// changes nothing (the client's time orders a user's actions).
type LikeRequest struct {
	Item string    `json:"item,omitempty"`
	User string    `json:"userId"`
	At   EventTime `json:"at,omitzero"`
}

// LikeAt likes req.Item for req.User at req.At (POST /v1/likes).
func (c *Client) LikeAt(ctx context.Context, req LikeRequest) (api.Like, error) {
	var out api.Like
	return out, c.do(ctx, http.MethodPost, "/v1/likes", nil, req, &out)
}

// UnlikeAt unlikes req.Item for req.User at req.At (DELETE
// /v1/likes/{item} with a body).
func (c *Client) UnlikeAt(ctx context.Context, req LikeRequest) (api.Like, error) {
	item := req.Item
	req.Item = "" // named by the path
	var out api.Like
	return out, c.do(ctx, http.MethodDelete, "/v1/likes/"+esc(item), nil, req, &out)
}

// Likes reads an item's like count.
func (c *Client) Likes(ctx context.Context, item string) (api.Likes, error) {
	var out api.Likes
	return out, c.do(ctx, http.MethodGet, "/v1/likes/"+esc(item), nil, nil, &out)
}

// Liked reads whether user likes item in this replica's view.
func (c *Client) Liked(ctx context.Context, item, user string) (api.Liked, error) {
	var out api.Liked
	return out, c.do(ctx, http.MethodGet, "/v1/likes/"+esc(item)+"/"+esc(user), nil, nil, &out)
}

// History reads the likes and unlikes of (item, user), from every replica
// the asked one reaches: the newest limit of each (0: the server's
// default, 100).
func (c *Client) History(ctx context.Context, item, user string, limit int) (api.History, error) {
	var q url.Values
	if limit > 0 {
		q = url.Values{"limit": {strconv.Itoa(limit)}}
	}
	var out api.History
	return out, c.do(ctx, http.MethodGet, "/v1/likes/"+esc(item)+"/"+esc(user)+"/history", q, nil, &out)
}

// Page asks for one page of a list in id order: up to Limit entries (0:
// the server's default) after the id After ("": from the first). An
// answer's Next is the After of the next page, "" on the last.
type Page struct {
	After string
	Limit int
}

func (p Page) query() url.Values {
	q := url.Values{}
	if p.After != "" {
		q.Set("after", p.After)
	}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	return q
}

// Likers reads one page of the users who like item.
func (c *Client) Likers(ctx context.Context, item string, p Page) (api.Likers, error) {
	var out api.Likers
	return out, c.do(ctx, http.MethodGet, "/v1/likers/"+esc(item), p.query(), nil, &out)
}

// UserLikes reads one page of the items user likes.
func (c *Client) UserLikes(ctx context.Context, user string, p Page) (api.UserLikes, error) {
	var out api.UserLikes
	return out, c.do(ctx, http.MethodGet, "/v1/users/"+esc(user)+"/likes", p.query(), nil, &out)
}

// MaxFeedQuery is the most items Feed asks for in a query string (GET
// /v1/feed); more are sent as a body (POST /v1/feed, up to 1,000).
const MaxFeedQuery = 100

// Feed reads, for each of items in order, its like count and whether
// user likes it.
func (c *Client) Feed(ctx context.Context, user string, items []string) (api.Feed, error) {
	var out api.Feed
	if len(items) <= MaxFeedQuery {
		q := url.Values{"user": {user}, "items": {strings.Join(items, ",")}}
		return out, c.do(ctx, http.MethodGet, "/v1/feed", q, nil, &out)
	}
	body := struct {
		User  string   `json:"user"`
		Items []string `json:"items"`
	}{user, items}
	return out, c.do(ctx, http.MethodPost, "/v1/feed", nil, body, &out)
}

// Block blocks (blocked) or unblocks user (an admin route): a blocked
// user's likes stop counting in every region, and their likes and
// unlikes are refused with 403 user_blocked.
func (c *Client) Block(ctx context.Context, user string, blocked bool) (api.Block, error) {
	var out api.Block
	if blocked {
		return out, c.do(ctx, http.MethodPut, "/v1/blocks/"+esc(user), nil, nil, &out)
	}
	return out, c.do(ctx, http.MethodDelete, "/v1/blocks/"+esc(user), nil, nil, &out)
}

// BlockOf reads user's block flag as the replica sees it (an admin route).
func (c *Client) BlockOf(ctx context.Context, user string) (api.Block, error) {
	var out api.Block
	return out, c.do(ctx, http.MethodGet, "/v1/blocks/"+esc(user), nil, nil, &out)
}

// Blocks reads one page of the blocked users (an admin route).
func (c *Client) Blocks(ctx context.Context, p Page) (api.Blocks, error) {
	var out api.Blocks
	return out, c.do(ctx, http.MethodGet, "/v1/blocks", p.query(), nil, &out)
}
