package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tally-dev/tally/shard"
)

// Routing by the shard map (Config.Route). In a sharded region every
// replica takes every request, forwarding one for a key it does not hold
// to a holder over NATS; a routing client saves that hop. It reads the
// region's map (GET /v1/shards at BaseURL, which lists each replica's
// address) at its first request for a key, sends each request for a key to
// a holder of the key's shard that is up (in turn, when there are
// several), and reads the map again, at most once per mapRefresh, when a
// holder cannot be reached or answers 421 shard_not_held (the map moved).
// Such a request goes to BaseURL instead, which forwards it: only requests
// that never reached a replica, or that it refused whole, are sent again.

// mapRefresh is how often a routing client may read the map again.
const mapRefresh = time.Second

// router is a routing client's view of the map.
type router struct {
	mu      sync.Mutex
	holders [][]string // shard -> holders' URLs, up ones only; nil before the first read
	read    time.Time  // of the last read, or try
	next    atomic.Uint64
}

// keyPrefixes are the routes whose first path segment after the prefix
// is a key ({item} or {key}), which routes the request to the key's shard.
var keyPrefixes = []string{"/v1/likes/", "/v1/likers/", "/v1/counters/", "/v1/uniques/", "/v1/budgets/"}

// keyOf returns the key a request is for, if it names one: the first
// path segment after a key route's prefix, a POST /v1/likes body's item,
// or the keys of a window or series read when they share a shard.
func keyOf(path string, q url.Values, body any) (string, bool) {
	for _, p := range keyPrefixes {
		if rest, ok := strings.CutPrefix(path, p); ok {
			seg, _, _ := strings.Cut(rest, "/")
			key, err := url.PathUnescape(seg)
			return key, err == nil && key != ""
		}
	}
	if lr, ok := body.(LikeRequest); ok && path == "/v1/likes" {
		return lr.Item, lr.Item != ""
	}
	if path == "/v1/window" || path == "/v1/series" {
		one := ""
		for _, k := range q["key"] {
			if k == "" || k == "*" {
				continue
			}
			if one != "" && shard.Of(k) != shard.Of(one) {
				return "", false
			}
			one = k
		}
		return one, one != ""
	}
	return "", false
}

// target is where a request for key goes: a holder's URL, or BaseURL
// when the map names none that is up (or cannot be read).
func (c *Client) target(ctx context.Context, key string) string {
	r := c.router
	r.mu.Lock()
	stale := r.holders == nil && time.Since(r.read) >= mapRefresh
	r.mu.Unlock()
	if stale {
		c.readMap(ctx)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.holders == nil {
		return c.base
	}
	hs := r.holders[shard.Of(key)]
	if len(hs) == 0 {
		return c.base
	}
	return hs[r.next.Add(1)%uint64(len(hs))]
}

// readMap reads the region's map from BaseURL; on failure the client goes
// on sending to BaseURL until the next try.
func (c *Client) readMap(ctx context.Context) {
	r := c.router
	r.mu.Lock()
	if time.Since(r.read) < mapRefresh {
		r.mu.Unlock()
		return
	}
	r.read = time.Now()
	r.mu.Unlock()
	m, err := c.Shards(ctx)
	if err != nil {
		return
	}
	holders := make([][]string, shard.Count)
	for _, h := range m.Replicas {
		if h.URL == "" || h.State != "up" {
			continue
		}
		set, err := shard.ParseRanges(h.Shards)
		if err != nil {
			return
		}
		u := strings.TrimRight(h.URL, "/")
		for s := range shard.Count {
			if set.Has(s) {
				holders[s] = append(holders[s], u)
			}
		}
	}
	r.mu.Lock()
	r.holders = holders
	r.mu.Unlock()
}

// misrouted reports whether a request sent to a holder should go again
// to BaseURL, and marks the map for a new read: the holder could not be
// reached (nothing was sent), or refused a shard it no longer holds.
func (c *Client) misrouted(err error) bool {
	var dial *net.OpError
	var e *Error
	if !(errors.As(err, &dial) && dial.Op == "dial") && !(errors.As(err, &e) && e.Status == http.StatusMisdirectedRequest) {
		return false
	}
	r := c.router
	r.mu.Lock()
	r.holders = nil
	r.mu.Unlock()
	return true
}
