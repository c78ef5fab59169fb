package chaos

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
	"syscall"
	"time"

	"github.com/tally-dev/tally/milestone"
)

// client talks to one region's HTTP API. Each region has its own
// connection pool so that the pool of a killed process can be dropped.
type client struct {
	region string
	base   string // http://127.0.0.1:port
	http   *http.Client
}

func newClient(region, addr string, conns int) *client {
	tr := &http.Transport{
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return &client{region: region, base: "http://" + addr, http: &http.Client{Transport: tr}}
}

// dropConns closes idle connections (after the process was killed).
func (c *client) dropConns() { c.http.CloseIdleConnections() }

func (c *client) close() { c.http.CloseIdleConnections() }

// answer is the result of one write attempt.
type answer struct {
	outcome Outcome
	reason  string
	body    map[string]any
}

// classify maps a request's error or status to an outcome. Only what
// certainly did not reach the replica's writer counts as failed: a refused
// connection (the process is down), 503 not_ready (writes are held while
// it recovers) and 4xx. Everything else, lost connections, client timeouts
// and other 5xx (including the server's own 503 timeout), may have been
// applied.
func classify(err error, status int, code string) (Outcome, string) {
	switch {
	case err != nil && errors.Is(err, syscall.ECONNREFUSED):
		return OutcomeFailed, "refused"
	case err != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)):
		return OutcomeTimeout, "client timeout"
	case err != nil:
		return OutcomeTimeout, "connection: " + err.Error()
	case status >= 200 && status < 300:
		return OutcomeOK, ""
	case status == http.StatusServiceUnavailable && code == "not_ready":
		return OutcomeFailed, "not_ready"
	case status >= 400 && status < 500:
		return OutcomeFailed, fmt.Sprintf("http %d %s", status, code)
	default:
		return OutcomeTimeout, fmt.Sprintf("http %d %s", status, code)
	}
}

// do sends one request and decodes a JSON object answer.
func (c *client) do(ctx context.Context, method, path string, body any, timeout time.Duration) (int, map[string]any, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, err
	}
	var m map[string]any
	if len(data) > 0 {
		if err := json.Unmarshal(data, &m); err != nil {
			return resp.StatusCode, nil, fmt.Errorf("decode %s %s answer: %w", method, path, err)
		}
	}
	return resp.StatusCode, m, nil
}

func (c *client) write(ctx context.Context, method, path string, body any, timeout time.Duration) answer {
	status, m, err := c.do(ctx, method, path, body, timeout)
	code, _ := m["code"].(string)
	out, reason := classify(err, status, code)
	return answer{outcome: out, reason: reason, body: m}
}

func esc(s string) string { return url.PathEscape(s) }

// like sends a like (liked) or an unlike.
func (c *client) like(ctx context.Context, item, user string, liked bool, timeout time.Duration) answer {
	method := http.MethodPut
	if !liked {
		method = http.MethodDelete
	}
	return c.write(ctx, method, "/v1/likes/"+esc(item)+"/"+esc(user), nil, timeout)
}

// incr sends an increment with an idempotency key.
func (c *client) incr(ctx context.Context, key string, by int64, idem string, timeout time.Duration) answer {
	return c.write(ctx, http.MethodPost, "/v1/counters/"+esc(key)+"/incr",
		map[string]any{"by": by, "idempotency_key": idem}, timeout)
}

// PN is one replica's entry of a vector as the API shows it.
type PN struct {
	P uint64 `json:"p"`
	N uint64 `json:"n"`
}

// reading is a read of a counter or an item's like count.
type reading struct {
	Value        int64         `json:"value"`
	Approx       bool          `json:"approx"`
	Unreconciled int           `json:"unreconciled,omitempty"`
	Replicas     map[string]PN `json:"replicas"`
}

// key is a counter or an item: what the checker reads.
type key struct {
	Likes bool   // an item's like count, else a counter
	ID    string // the item or counter key
}

func (k key) String() string {
	if k.Likes {
		return "likes/" + k.ID
	}
	return "counter/" + k.ID
}

// read reads a key.
func (c *client) read(ctx context.Context, k key, timeout time.Duration) (reading, error) {
	var out struct {
		Count        *int64        `json:"count"`
		Value        *int64        `json:"value"`
		Approx       bool          `json:"approx"`
		Unreconciled int           `json:"unreconciled"`
		Replicas     map[string]PN `json:"replicas"`
	}
	path := "/v1/counters/" + esc(k.ID)
	if k.Likes {
		path = "/v1/likes/" + esc(k.ID)
	}
	if err := c.getJSON(ctx, path, &out, timeout); err != nil {
		return reading{}, err
	}
	r := reading{Approx: out.Approx, Unreconciled: out.Unreconciled, Replicas: out.Replicas}
	switch {
	case k.Likes && out.Count != nil:
		r.Value = *out.Count
	case !k.Likes && out.Value != nil:
		r.Value = *out.Value
	default:
		return reading{}, fmt.Errorf("read %s at %s: no value in the answer", k, c.region)
	}
	return r, nil
}

// liked reads whether user likes item in this region's view.
func (c *client) liked(ctx context.Context, item, user string, timeout time.Duration) (bool, error) {
	var out struct {
		Liked *bool `json:"liked"`
	}
	if err := c.getJSON(ctx, "/v1/likes/"+esc(item)+"/"+esc(user), &out, timeout); err != nil {
		return false, err
	}
	if out.Liked == nil {
		return false, fmt.Errorf("read %s/%s at %s: no liked in the answer", item, user, c.region)
	}
	return *out.Liked, nil
}

// ready reports whether the region answers /readyz with 200.
func (c *client) ready(ctx context.Context) bool {
	status, _, err := c.do(ctx, http.MethodGet, "/readyz", nil, time.Second)
	return err == nil && status == http.StatusOK
}

// converged reports the region's /v1/convergence verdict: every peer in
// sync at the last digest comparison and none stale.
func (c *client) converged(ctx context.Context) (bool, error) {
	var out struct {
		Converged bool `json:"converged"`
	}
	err := c.getJSON(ctx, "/v1/convergence", &out, time.Second)
	return out.Converged, err
}

func (c *client) getJSON(ctx context.Context, path string, dst any, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s at %s: %w", path, c.region, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("GET %s at %s: %w", path, c.region, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s at %s: http %d: %.200s", path, c.region, resp.StatusCode, data)
	}
	if err := json.Unmarshal(data, dst); err != nil {
		return fmt.Errorf("GET %s at %s: %w", path, c.region, err)
	}
	return nil
}

// numberingStatus is the numbering part of GET /v1/status.
type numberingStatus struct {
	Numbered   uint64 `json:"numbered"`
	Unnumbered int    `json:"unnumbered"`
	Lease      struct {
		Leases []struct {
			Epoch uint64 `json:"epoch"`
			Start uint64 `json:"start"`
			End   uint64 `json:"end"`
			Next  uint64 `json:"next"`
		} `json:"leases"`
		Waiting bool   `json:"waiting_for_lease"`
		KVError string `json:"kv_error"`
	} `json:"lease"`
}

// numbering reads the region's like numbering from /v1/status.
func (c *client) numbering(ctx context.Context) (numberingStatus, error) {
	var out struct {
		Numbering *numberingStatus `json:"numbering"`
	}
	if err := c.getJSON(ctx, "/v1/status", &out, 2*time.Second); err != nil {
		return numberingStatus{}, err
	}
	if out.Numbering == nil {
		return numberingStatus{}, fmt.Errorf("GET /v1/status at %s: no numbering (is --milestones set?)", c.region)
	}
	return *out.Numbering, nil
}

// milestones reads the region's GET /v1/milestones: every milestone it
// knows of, and whether it has read the whole milestone stream.
func (c *client) milestones(ctx context.Context) ([]milestone.Event, bool, error) {
	var out struct {
		Milestones []milestone.Event `json:"milestones"`
		Synced     bool              `json:"synced"`
	}
	err := c.getJSON(ctx, "/v1/milestones", &out, 2*time.Second)
	return out.Milestones, out.Synced, err
}

// lostClaims reads tally_milestones_lost_total from the region's /metrics:
// how many of this process's claim intents found their number claimed by
// another like.
func (c *client) lostClaims(ctx context.Context) (float64, error) {
	return c.metric(ctx, "tally_milestones_lost_total")
}

// metric reads one unlabelled metric from the region's /metrics.
func (c *client) metric(ctx context.Context, name string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("GET /metrics at %s: %w", c.region, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics at %s: http %d", c.region, resp.StatusCode)
	}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("GET /metrics at %s: %w", c.region, err)
	}
	return 0, fmt.Errorf("GET /metrics at %s: no %s", c.region, name)
}
