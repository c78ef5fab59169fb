// Package client is a typed Go client of tally's HTTP API: one Client per
// replica, answers as the types of package api, and every non-2xx answer
// as an *Error carrying the HTTP status and tally's error code. tally's
// own tools (the chaos harness, the bench tools, the dashboard) use it, and
// so can an application.
package client

import (
	"bufio"
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
	// request (a write or admin token).
	Token string
	// HTTP is the client requests go through. Default: one with keep-alive
	// connections, up to 64 idle to the replica.
	HTTP *http.Client
	// MaxAnswerBytes bounds an answer the client reads. Default 16 MiB.
	MaxAnswerBytes int64
}

// Client talks to one replica. It is safe for concurrent use.
type Client struct {
	cfg  Config
	base string
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
	return &Client{cfg: cfg, base: strings.TrimRight(cfg.BaseURL, "/")}, nil
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

func esc(s string) string { return url.PathEscape(s) }

// Like likes item for user (idempotent).
func (c *Client) Like(ctx context.Context, item, user string) (api.Like, error) {
	var out api.Like
	return out, c.do(ctx, http.MethodPut, "/v1/likes/"+esc(item)+"/"+esc(user), nil, &out)
}

// Unlike unlikes item for user (idempotent).
func (c *Client) Unlike(ctx context.Context, item, user string) (api.Like, error) {
	var out api.Like
	return out, c.do(ctx, http.MethodDelete, "/v1/likes/"+esc(item)+"/"+esc(user), nil, &out)
}

// Likes reads an item's like count.
func (c *Client) Likes(ctx context.Context, item string) (api.Likes, error) {
	var out api.Likes
	return out, c.do(ctx, http.MethodGet, "/v1/likes/"+esc(item), nil, &out)
}

// Liked reads whether user likes item in this replica's view.
func (c *Client) Liked(ctx context.Context, item, user string) (api.Liked, error) {
	var out api.Liked
	return out, c.do(ctx, http.MethodGet, "/v1/likes/"+esc(item)+"/"+esc(user), nil, &out)
}

// Likers reads one page of the users who like item, in id order: up to
// limit (0: the server's default) after the user id after ("" from the
// first). The answer's Next is the after of the next page, "" on the last.
func (c *Client) Likers(ctx context.Context, item, after string, limit int) (api.Likers, error) {
	q := url.Values{}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	path := "/v1/likers/" + esc(item)
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out api.Likers
	return out, c.do(ctx, http.MethodGet, path, nil, &out)
}

// History reads every like and unlike of (item, user), from every replica
// the asked one reaches.
func (c *Client) History(ctx context.Context, item, user string) (api.History, error) {
	var out api.History
	return out, c.do(ctx, http.MethodGet, "/v1/likes/"+esc(item)+"/"+esc(user)+"/history", nil, &out)
}

// Audit asks the replica to recompute its own entries from its event log
// and compare them with its stored ones (an admin route).
func (c *Client) Audit(ctx context.Context) (api.Audit, error) {
	var out api.Audit
	return out, c.do(ctx, http.MethodGet, "/v1/audit", nil, &out)
}

// Block blocks (blocked) or unblocks user (an admin route): a blocked
// user's likes stop counting in every region, and their likes and
// unlikes are refused with 403 user_blocked.
func (c *Client) Block(ctx context.Context, user string, blocked bool) (api.Block, error) {
	method := http.MethodPut
	if !blocked {
		method = http.MethodDelete
	}
	var out api.Block
	return out, c.do(ctx, method, "/v1/blocks/"+esc(user), nil, &out)
}

// BlockOf reads user's block flag as the replica sees it (an admin route).
func (c *Client) BlockOf(ctx context.Context, user string) (api.Block, error) {
	var out api.Block
	return out, c.do(ctx, http.MethodGet, "/v1/blocks/"+esc(user), nil, &out)
}

// Incr adds by to a counter; idem, if not "", is its idempotency key.
func (c *Client) Incr(ctx context.Context, key string, by int64, idem string) (api.Incr, error) {
	body := struct {
		By   int64  `json:"by"`
		Idem string `json:"idempotency_key,omitempty"`
	}{by, idem}
	var out api.Incr
	return out, c.do(ctx, http.MethodPost, "/v1/counters/"+esc(key)+"/incr", body, &out)
}

// Counter reads a counter.
func (c *Client) Counter(ctx context.Context, key string) (api.Counter, error) {
	var out api.Counter
	return out, c.do(ctx, http.MethodGet, "/v1/counters/"+esc(key), nil, &out)
}

// Events posts a batch: body is a JSON array or NDJSON of events.
func (c *Client) Events(ctx context.Context, body []byte) (api.EventsResult, error) {
	var out api.EventsResult
	return out, c.do(ctx, http.MethodPost, "/v1/events", rawBody(body), &out)
}

// Status reads GET /v1/status.
func (c *Client) Status(ctx context.Context) (api.Status, error) {
	var out api.Status
	return out, c.do(ctx, http.MethodGet, "/v1/status", nil, &out)
}

// Convergence reads GET /v1/convergence.
func (c *Client) Convergence(ctx context.Context) (api.Convergence, error) {
	var out api.Convergence
	return out, c.do(ctx, http.MethodGet, "/v1/convergence", nil, &out)
}

// Ready returns nil when the replica acknowledges writes (GET /readyz).
func (c *Client) Ready(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/readyz", nil, nil)
}

// Milestones reads GET /v1/milestones; limit > 0 asks for the newest limit.
func (c *Client) Milestones(ctx context.Context, limit int) (api.Milestones, error) {
	path := "/v1/milestones"
	if limit > 0 {
		path += "?limit=" + strconv.Itoa(limit)
	}
	var out api.Milestones
	return out, c.do(ctx, http.MethodGet, path, nil, &out)
}

// Links reads a local deployment's inter-region links.
func (c *Client) Links(ctx context.Context) (api.Links, error) {
	var out api.Links
	return out, c.do(ctx, http.MethodGet, "/v1/admin/links", nil, &out)
}

// SetLink cuts (up false) or heals the link between regions a and b of a
// local deployment.
func (c *Client) SetLink(ctx context.Context, a, b string, up bool) (api.Link, error) {
	body := struct {
		Up bool `json:"up"`
	}{up}
	var out api.Link
	return out, c.do(ctx, http.MethodPut, "/v1/admin/links/"+esc(a)+"/"+esc(b), body, &out)
}

// Metric reads one series' value from GET /metrics: name is the series
// as the text format prints it, with its labels if it has any, e.g.
// `tally_milestones_lost_total{sequence="likes"}`.
func (c *Client) Metric(ctx context.Context, name string) (float64, error) {
	resp, err := c.send(ctx, http.MethodGet, "/metrics", nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, c.answerError(resp, http.MethodGet, "/metrics")
	}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, c.cfg.MaxAnswerBytes))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("GET /metrics at %s: %w", c.base, err)
	}
	return 0, fmt.Errorf("GET /metrics at %s: no %s", c.base, name)
}

// rawBody is a request body sent as it is (NDJSON is not one JSON value).
type rawBody []byte

// do sends one request with body (JSON-encoded unless nil or a rawBody)
// and decodes a 2xx answer into out (unless nil).
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if raw, ok := body.(rawBody); ok {
		rd = bytes.NewReader(raw)
	} else if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("%s %s: encode body: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	resp, err := c.send(ctx, method, path, rd)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return c.answerError(resp, method, path)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.cfg.MaxAnswerBytes))
	if err != nil {
		return fmt.Errorf("%s %s at %s: read answer: %w", method, path, c.base, err)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s at %s: decode answer: %w", method, path, c.base, err)
	}
	return nil
}

func (c *Client) send(ctx context.Context, method, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	}
	resp, err := c.cfg.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s at %s: %w", method, path, c.base, err)
	}
	return resp, nil
}

// answerError reads a non-2xx answer into an *Error.
func (c *Client) answerError(resp *http.Response, method, path string) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &Error{Method: method, Path: path, Status: resp.StatusCode}
	var body api.Error
	if json.Unmarshal(data, &body) == nil && body.Code != "" {
		e.Code, e.Message = body.Code, body.Error
	} else {
		e.Message = string(data[:min(len(data), 200)])
	}
	return e
}
