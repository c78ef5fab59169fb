package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/tally-dev/tally/api"
)

// Time windows: a count's change over a range, series of such changes,
// and trending keys.

// Kind is a family of counts.
type Kind string

// The families. KindBudgets is only for Audit.
const (
	KindLikes    Kind = "likes"
	KindCounters Kind = "counters"
	KindBudgets  Kind = "budgets"
)

// Range is a window of time: the Last span up to now, in the API's
// syntax ("60s", "10m", "24h", "7d"), or From to To (To zero: now). The
// zero Range is none: the route's default.
type Range struct {
	Last     string
	From, To time.Time
}

func (r Range) query() url.Values {
	q := url.Values{}
	if r.Last != "" {
		q.Set("last", r.Last)
	}
	if !r.From.IsZero() {
		q.Set("from", strconv.FormatInt(r.From.UnixMilli(), 10))
	}
	if !r.To.IsZero() {
		q.Set("to", strconv.FormatInt(r.To.UnixMilli(), 10))
	}
	return q
}

// WindowQuery is a window of a family: of one Key, or of the family's
// total ("" or "*").
type WindowQuery struct {
	Kind Kind
	Key  string
	Range
}

// Window reads the net change of a key, or of a family's total, over a
// range.
func (c *Client) Window(ctx context.Context, wq WindowQuery) (api.Window, error) {
	q := wq.Range.query()
	if wq.Kind != "" {
		q.Set("kind", string(wq.Kind))
	}
	if wq.Key != "" {
		q.Set("key", wq.Key)
	}
	var out api.Window
	return out, c.do(ctx, http.MethodGet, "/v1/window", q, nil, &out)
}

// LikesWindow reads the net change of an item's likes over r.
func (c *Client) LikesWindow(ctx context.Context, item string, r Range) (api.Window, error) {
	var out api.Window
	return out, c.do(ctx, http.MethodGet, "/v1/likes/"+esc(item)+"/window", r.query(), nil, &out)
}

// CounterWindow reads the net change of a counter over r.
func (c *Client) CounterWindow(ctx context.Context, key string, r Range) (api.Window, error) {
	var out api.Window
	return out, c.do(ctx, http.MethodGet, "/v1/counters/"+esc(key)+"/window", r.query(), nil, &out)
}

// SeriesOptions shape a series: its Range, the Step between points in the
// API's syntax ("" is 1m), and whether each key is split per region.
type SeriesOptions struct {
	Range
	Step     string
	ByRegion bool
}

func (o SeriesOptions) query() url.Values {
	q := o.Range.query()
	if o.Step != "" {
		q.Set("step", o.Step)
	}
	if o.ByRegion {
		q.Set("by", "region")
	}
	return q
}

// SeriesQuery is a series of several keys of a family ("*": its total;
// no keys: the total alone).
type SeriesQuery struct {
	Kind Kind
	Keys []string
	SeriesOptions
}

// Series reads one series per key, on one time grid.
func (c *Client) Series(ctx context.Context, sq SeriesQuery) (api.Series, error) {
	q := sq.SeriesOptions.query()
	if sq.Kind != "" {
		q.Set("kind", string(sq.Kind))
	}
	q["key"] = sq.Keys
	if len(sq.Keys) == 0 {
		delete(q, "key")
	}
	var out api.Series
	return out, c.do(ctx, http.MethodGet, "/v1/series", q, nil, &out)
}

// LikesSeries reads the series of an item's likes.
func (c *Client) LikesSeries(ctx context.Context, item string, o SeriesOptions) (api.Series, error) {
	var out api.Series
	return out, c.do(ctx, http.MethodGet, "/v1/likes/"+esc(item)+"/series", o.query(), nil, &out)
}

// CounterSeries reads the series of a counter.
func (c *Client) CounterSeries(ctx context.Context, key string, o SeriesOptions) (api.Series, error) {
	var out api.Series
	return out, c.do(ctx, http.MethodGet, "/v1/counters/"+esc(key)+"/series", o.query(), nil, &out)
}

// TrendingQuery asks for the top N keys (0: 10) of a family by net change
// over Window ("10m", "2h", "day", or "all" for all-time counts; "": 10m),
// of keys starting with Prefix, as booked by the replicas of Region (""
// all).
type TrendingQuery struct {
	Kind   Kind
	Window string
	N      int
	Region string
	Prefix string
	// Meta adds each key's event type (TrendingItem.Meta).
	Meta bool
}

// Trending reads the trending keys.
func (c *Client) Trending(ctx context.Context, tq TrendingQuery) (api.Trending, error) {
	q := url.Values{}
	for name, v := range map[string]string{"kind": string(tq.Kind), "window": tq.Window, "region": tq.Region, "prefix": tq.Prefix} {
		if v != "" {
			q.Set(name, v)
		}
	}
	if tq.N > 0 {
		q.Set("n", strconv.Itoa(tq.N))
	}
	if tq.Meta {
		q.Set("with", "meta")
	}
	var out api.Trending
	return out, c.do(ctx, http.MethodGet, "/v1/trending", q, nil, &out)
}
