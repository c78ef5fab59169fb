package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/tally-dev/tally/api"
)

// TypeRequest is an event type's metadata for SetType. Status is
// "active" (the default when empty) or "inactive": writes of the type's
// keys are then refused with 409 inactive_type.
type TypeRequest struct {
	Owner       string `json:"owner"`
	Status      string `json:"status,omitempty"`
	Description string `json:"description"`
}

// SetType registers event type name (a counter key or item, or a prefix
// of keys ending at a ':'), or updates its metadata, in every region (an
// admin route).
func (c *Client) SetType(ctx context.Context, name string, req TypeRequest) (api.EventType, error) {
	var out api.EventType
	return out, c.do(ctx, http.MethodPut, "/v1/types/"+esc(name), nil, req, &out)
}

// Type reads an event type's metadata as the replica sees it (404
// not_found if it was never registered).
func (c *Client) Type(ctx context.Context, name string) (api.EventType, error) {
	var out api.EventType
	return out, c.do(ctx, http.MethodGet, "/v1/types/"+esc(name), nil, nil, &out)
}

// TypeTotal reads the all-time sum over the keys of event type name:
// kind "counters" (the default, for "") or "likes".
func (c *Client) TypeTotal(ctx context.Context, name, kind string) (api.TypeTotal, error) {
	var q url.Values
	if kind != "" {
		q = url.Values{"kind": {kind}}
	}
	var out api.TypeTotal
	return out, c.do(ctx, http.MethodGet, "/v1/types/"+esc(name)+"/total", q, nil, &out)
}

// TypeWindow reads the net change of event type name over r: the sum of
// its keys' windows, kind "counters" (the default, for "") or "likes".
func (c *Client) TypeWindow(ctx context.Context, name, kind string, r Range) (api.TypeWindow, error) {
	q := r.query()
	if kind != "" {
		q.Set("kind", kind)
	}
	var out api.TypeWindow
	return out, c.do(ctx, http.MethodGet, "/v1/types/"+esc(name)+"/window", q, nil, &out)
}

// Types reads one page of the event types, in name order.
func (c *Client) Types(ctx context.Context, p Page) (api.EventTypes, error) {
	var out api.EventTypes
	return out, c.do(ctx, http.MethodGet, "/v1/types", p.query(), nil, &out)
}

// CounterMeta reads a counter with the metadata of its event type (Meta,
// nil if it has none).
func (c *Client) CounterMeta(ctx context.Context, key string) (api.Counter, error) {
	var out api.Counter
	return out, c.do(ctx, http.MethodGet, "/v1/counters/"+esc(key), url.Values{"with": {"meta"}}, nil, &out)
}
