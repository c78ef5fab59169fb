package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"syscall"
	"time"

	"github.com/tally-dev/tally/api"
	tallyclient "github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/milestone"
)

// client talks to one region's HTTP API through tally's client, with a
// timeout per call. Each region has its own connection pool so that the
// pool of a killed process can be dropped.
type client struct {
	region string
	api    *tallyclient.Client
}

func newClient(region, addr string, conns int) *client {
	tr := &http.Transport{
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	c, err := tallyclient.New(tallyclient.Config{BaseURL: "http://" + addr, HTTP: &http.Client{Transport: tr}})
	if err != nil {
		panic(fmt.Sprintf("chaos: client of %s: %v", addr, err)) // addr is ours: host:port
	}
	return &client{region: region, api: c}
}

// dropConns closes idle connections (after the process was killed).
func (c *client) dropConns() { c.api.CloseIdleConnections() }

func (c *client) close() { c.api.CloseIdleConnections() }

// answer is the result of one write attempt.
type answer struct {
	outcome Outcome
	reason  string
	// value is the like count or counter value the write answered.
	value int64
	// duplicate: an increment's idempotency key had been applied before.
	duplicate bool
	// approx: an increment of an approximate counter, which counted
	// counted (when not a duplicate).
	approx  bool
	counted int64
	// atMerchant: a cashback refused because its merchant could not
	// cover it (the 409 names the merchant).
	atMerchant bool
	// badTime: refused because the client's event time is out of the
	// replica's accepted range (400 bad_time).
	badTime bool
	// blocked: a like or unlike refused because the user is blocked (403
	// user_blocked).
	blocked bool
	// liked: the state a toggle answered (duplicate: its key had been
	// applied, and liked is the state that application decided).
	liked bool
}

// classify maps a request's error to an outcome. Only what certainly did
// not reach the replica's writer counts as failed: a refused connection
// (the process is down), 503 not_ready (writes are held while it recovers)
// and 4xx. Everything else, lost connections, client timeouts and other
// 5xx (including the server's own 503 timeout), may have been applied.
func classify(err error) (Outcome, string) {
	status, code := tallyclient.StatusCode(err), tallyclient.Code(err)
	switch {
	case err == nil:
		return OutcomeOK, ""
	case errors.Is(err, syscall.ECONNREFUSED):
		return OutcomeFailed, "refused"
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return OutcomeTimeout, "client timeout"
	case status == 0:
		return OutcomeTimeout, "connection: " + err.Error()
	case status == http.StatusServiceUnavailable && code == "not_ready":
		return OutcomeFailed, "not_ready"
	case status >= 400 && status < 500:
		return OutcomeFailed, fmt.Sprintf("http %d %s", status, code)
	default:
		return OutcomeTimeout, fmt.Sprintf("http %d %s", status, code)
	}
}

// like sends a like (liked) or an unlike.
func (c *client) like(ctx context.Context, item, user string, liked bool, timeout time.Duration) answer {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	send := c.api.Like
	if !liked {
		send = c.api.Unlike
	}
	l, err := send(ctx, item, user)
	a := answerOf(err)
	a.value = l.Count
	return a
}

// toggle flips user's like of item under idempotency key idem.
func (c *client) toggle(ctx context.Context, item, user, idem string, timeout time.Duration) answer {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	l, err := c.api.Toggle(ctx, item, user, idem)
	a := answerOf(err)
	a.value, a.liked, a.duplicate = l.Count, l.Liked, l.Duplicate
	return a
}

// PN is one replica's entry of a vector as the API shows it.
type PN = api.PN

// reading is a read of a counter or an item's like count.
type reading struct {
	Value        int64         `json:"value"`
	Approx       bool          `json:"approx"`
	Unreconciled int           `json:"unreconciled,omitempty"`
	Replicas     map[string]PN `json:"replicas"`
	// Partial: a split item's read left out parts whose holders did not
	// answer in time; its vector is short of their entries.
	Partial bool `json:"partial,omitempty"`
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
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if k.Likes {
		r, err := c.api.Likes(ctx, k.ID)
		if err != nil {
			return reading{}, fmt.Errorf("read %s at %s: %w", k, c.region, err)
		}
		return reading{Value: r.Count, Approx: r.Approx, Unreconciled: r.Unreconciled, Replicas: r.Replicas, Partial: r.Partial}, nil
	}
	r, err := c.api.Counter(ctx, k.ID)
	if err != nil {
		return reading{}, fmt.Errorf("read %s at %s: %w", k, c.region, err)
	}
	return reading{Value: r.Value, Approx: r.Approx, Unreconciled: r.Unreconciled, Replicas: r.Replicas}, nil
}

// liked reads whether user likes item in this region's view.
func (c *client) liked(ctx context.Context, item, user string, timeout time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r, err := c.api.Liked(ctx, item, user)
	if err != nil {
		return false, fmt.Errorf("read %s/%s at %s: %w", item, user, c.region, err)
	}
	return r.Liked, nil
}

// likers lists every user who likes item in this region's view, page by
// page.
func (c *client) likers(ctx context.Context, item string, timeout time.Duration) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var out []string
	after := ""
	for {
		page, err := c.api.Likers(ctx, item, tallyclient.Page{After: after, Limit: 1000})
		if err != nil {
			return nil, fmt.Errorf("list likers of %s at %s: %w", item, c.region, err)
		}
		for _, u := range page.Users {
			out = append(out, u.ID)
		}
		if page.Next == "" {
			return out, nil
		}
		after = page.Next
	}
}

// ready reports whether the region answers /readyz with 200.
func (c *client) ready(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return c.api.Ready(ctx) == nil
}

// converged reports the region's /v1/convergence verdict: every peer in
// sync at the last digest comparison and none stale.
func (c *client) converged(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	cv, err := c.api.Convergence(ctx)
	return cv.Converged, err
}

// numberingStatus is one sequence of the numbering part of GET
// /v1/status.
type numberingStatus struct {
	Name       string `json:"name"`
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
	// ClaimsPending: milestone claims the region has still to make.
	ClaimsPending int `json:"claims_pending"`
}

// numbering reads the region's numbering of the likes sequence from
// /v1/status.
func (c *client) numbering(ctx context.Context) (numberingStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := c.api.Status(ctx)
	if err != nil {
		return numberingStatus{}, err
	}
	if st.Numbering == nil {
		return numberingStatus{}, fmt.Errorf("GET /v1/status at %s: no numbering (is --milestones set?)", c.region)
	}
	// Numbering is the numbering's own status shape: re-decode it.
	raw, err := json.Marshal(st.Numbering)
	if err != nil {
		return numberingStatus{}, err
	}
	var seqs []numberingStatus
	if err := json.Unmarshal(raw, &seqs); err != nil {
		return numberingStatus{}, fmt.Errorf("GET /v1/status at %s: numbering: %w", c.region, err)
	}
	for _, s := range seqs {
		if s.Name == "likes" {
			return s, nil
		}
	}
	return numberingStatus{}, fmt.Errorf("GET /v1/status at %s: no likes sequence (is --milestones set?)", c.region)
}

// milestones reads the region's GET /v1/milestones: every milestone it
// knows of, and whether it has read the whole milestone stream.
func (c *client) milestones(ctx context.Context) ([]milestone.Event, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ms, err := c.api.Milestones(ctx, 0)
	return ms.Milestones, ms.Synced, err
}

// lostClaims reads tally_milestones_lost_total of the likes sequence from
// the region's /metrics: how many of this process's claim intents found
// their number claimed by another like.
func (c *client) lostClaims(ctx context.Context) (float64, error) {
	return c.metric(ctx, `tally_milestones_lost_total{sequence="likes"}`)
}

// metric reads one unlabelled metric from the region's /metrics.
func (c *client) metric(ctx context.Context, name string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return c.api.Metric(ctx, name)
}
