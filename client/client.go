// Package client is a typed Go client of tally's HTTP API: one Client per
// replica, one method per route, requests as the option types of this
// package, answers as the types of package api, and every non-2xx answer
// as an *Error carrying the HTTP status and tally's stable error code.
// tally's own tools (the chaos harness, the bench tools, the dashboard)
// reach tally through it, and so can an application.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tally-dev/tally/api"
)

// Config configures a Client.
type Config struct {
	// BaseURL is the replica's HTTP address, e.g. "http://127.0.0.1:8081".
	// Required.
	BaseURL string
	// Token, if set, is sent as "Authorization: Bearer <token>" on every
	// request (a read, write or admin token).
	Token string
	// HTTP is the client requests go through. Default: one with keep-alive
	// connections, up to 64 idle to the replica.
	HTTP *http.Client
	// MaxAnswerBytes bounds an answer the client reads. Default 16 MiB.
	MaxAnswerBytes int64
	// Route sends each request for a key straight to a replica of
	// BaseURL's region that holds the key's shard, as the region's map
	// (GET /v1/shards) says, instead of to BaseURL, which would forward
	// it (route.go). For a sharded region; unsharded, every request goes
	// to BaseURL anyway.
	Route bool
}

// Client talks to one replica. It is safe for concurrent use.
type Client struct {
	cfg    Config
	base   string
	router *router // nil unless Config.Route
}

// New returns a Client for cfg.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q: want http(s)://host:port", cfg.BaseURL)
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Transport: &http.Transport{
			MaxIdleConns:        64,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     30 * time.Second,
			DisableCompression:  true,
		}}
	}
	if cfg.MaxAnswerBytes <= 0 {
		cfg.MaxAnswerBytes = 16 << 20
	}
	c := &Client{cfg: cfg, base: strings.TrimRight(cfg.BaseURL, "/")}
	if cfg.Route {
		c.router = &router{}
	}
	return c, nil
}

// BaseURL is the replica's address the client was built with.
func (c *Client) BaseURL() string { return c.base }

// CloseIdleConnections drops the pooled connections (after the replica's
// process was killed, say).
func (c *Client) CloseIdleConnections() { c.cfg.HTTP.CloseIdleConnections() }

// Error is a non-2xx answer.
type Error struct {
	Method, Path string
	// Status is the HTTP status.
	Status int
	// Code is tally's stable error code ("not_ready", "bad_id", ...), or
	// "" when the answer was not a tally error body.
	Code string
	// Message is the error's text for humans, or the start of the body.
	Message string
	// Budget is the body of a spend or cashback the region could not
	// cover (409 budget_exhausted or rights_elsewhere): the budget's
	// remaining and this region's rights as it saw them. Nil otherwise.
	Budget *api.BudgetRefused
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s %s: http %d %s: %s", e.Method, e.Path, e.Status, e.Code, e.Message)
}

// StatusCode returns err's HTTP status if it is an *Error, else 0.
func StatusCode(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// Code returns err's tally error code if it is an *Error, else "".
func Code(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// The error codes of a budget the region cannot cover (Error.Budget).
const (
	CodeBudgetExhausted = "budget_exhausted"
	CodeRightsElsewhere = "rights_elsewhere"
)

// esc escapes one path segment. Every route's path is written as string
// literals and esc calls, so that the route coverage test can read the
// route templates from the source.
func esc(s string) string { return url.PathEscape(s) }

// do sends one request: path with the query q (nil: none) and body
// (JSON-encoded unless nil or a rawBody), and decodes a 2xx answer into
// out (unless nil; a *[]byte gets the answer's bytes as they are).
// With Config.Route, a request for a key goes to a holder of its shard.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body, out any) error {
	var b []byte
	if nd, ok := body.(ndjson); ok { // sent as it is
		return c.send(ctx, c.base, method, path, q, nd, "application/x-ndjson", out)
	}
	ct := ""
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return fmt.Errorf("%s %s: encode body: %w", method, path, err)
		}
		ct = "application/json"
	}
	if c.router != nil {
		if key, ok := keyOf(path, q, body); ok {
			if at := c.target(ctx, key); at != c.base {
				err := c.send(ctx, at, method, path, q, b, ct, out)
				if err == nil || !c.misrouted(err) {
					return err
				}
			}
		}
	}
	return c.send(ctx, c.base, method, path, q, b, ct, out)
}

// send is do's request to one replica, at base, with body b of Content-Type
// ct ("": no body).
func (c *Client) send(ctx context.Context, base, method, path string, q url.Values, b []byte, ct string, out any) error {
	var rd io.Reader
	if ct != "" {
		rd = bytes.NewReader(b)
	}
	target := path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, base+target, rd)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", ct)
	}
	if c.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	}
	if d, ok := ctx.Deadline(); ok {
		// The server drops a write it reaches after we stop waiting.
		req.Header.Set(api.TimeoutHeader, strconv.FormatInt(max(time.Until(d).Milliseconds(), 1), 10))
	}
	resp, err := c.cfg.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s at %s: %w", method, path, base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return answerError(resp, method, path)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.cfg.MaxAnswerBytes))
	if err != nil {
		return fmt.Errorf("%s %s at %s: read answer: %w", method, path, base, err)
	}
	switch o := out.(type) {
	case nil:
		return nil
	case *[]byte:
		*o = data
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s at %s: decode answer: %w", method, path, base, err)
	}
	return nil
}

// answerError reads a non-2xx answer into an *Error.
func answerError(resp *http.Response, method, path string) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &Error{Method: method, Path: path, Status: resp.StatusCode}
	var body api.BudgetRefused // an api.Error, with a budget's fields on a refusal
	if json.Unmarshal(data, &body) == nil && body.Code != "" {
		e.Code, e.Message = body.Code, body.Error
		if resp.StatusCode == http.StatusConflict && (body.Code == CodeBudgetExhausted || body.Code == CodeRightsElsewhere) {
			e.Budget = &body
		}
	} else {
		e.Message = string(data[:min(len(data), 200)])
	}
	return e
}
