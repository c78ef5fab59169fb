package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tally-dev/tally/api"
)

// Health, status, replication, milestones, metrics and the admin routes.

// Health reads GET /healthz: nil error while the replica serves, an
// *Error (503 storage_failed, replica_id_conflict) once it stopped.
func (c *Client) Health(ctx context.Context) (api.Health, error) {
	var out api.Health
	return out, c.do(ctx, http.MethodGet, "/healthz", nil, nil, &out)
}

// Ready returns nil when the replica acknowledges writes (GET /readyz).
func (c *Client) Ready(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/readyz", nil, nil, nil)
}

// Status reads GET /v1/status.
func (c *Client) Status(ctx context.Context) (api.Status, error) {
	var out api.Status
	return out, c.do(ctx, http.MethodGet, "/v1/status", nil, nil, &out)
}

// Convergence reads GET /v1/convergence.
func (c *Client) Convergence(ctx context.Context) (api.Convergence, error) {
	var out api.Convergence
	return out, c.do(ctx, http.MethodGet, "/v1/convergence", nil, nil, &out)
}

// Shards reads GET /v1/shards: the region's shard map as the replica
// answers it, with each replica's state and address, from which a caller
// can send each key straight to a holder (as Config.Route does).
// shard.FromAPI reads it into a checked shard.Map.
func (c *Client) Shards(ctx context.Context) (api.ShardMap, error) {
	var out api.ShardMap
	return out, c.do(ctx, http.MethodGet, "/v1/shards", nil, nil, &out)
}

// Milestones reads GET /v1/milestones; limit > 0 asks for the newest limit.
func (c *Client) Milestones(ctx context.Context, limit int) (api.Milestones, error) {
	var q url.Values
	if limit > 0 {
		q = url.Values{"limit": {strconv.Itoa(limit)}}
	}
	var out api.Milestones
	return out, c.do(ctx, http.MethodGet, "/v1/milestones", q, nil, &out)
}

// Sequence reads GET /v1/sequences/{name}: the milestone allocator's state
// of a numbered sequence, read from its KV now. Package api has no type
// of that state yet, so the answer is its JSON as the replica wrote it.
func (c *Client) Sequence(ctx context.Context, name string) (json.RawMessage, error) {
	var out []byte
	if err := c.do(ctx, http.MethodGet, "/v1/sequences/"+esc(name), nil, nil, &out); err != nil {
		return nil, err
	}
	if !json.Valid(out) {
		return nil, fmt.Errorf("GET /v1/sequences/%s at %s: the answer is not JSON", name, c.base)
	}
	return out, nil
}

// AuditQuery narrows an audit to one vector: Kind (likes, counters or
// budgets) and Key. The zero AuditQuery audits every vector.
type AuditQuery struct {
	Kind Kind
	Key  string
}

// Audit asks the replica to recompute its own entries from its event log
// and compare them with its stored ones (an admin route).
func (c *Client) Audit(ctx context.Context, aq AuditQuery) (api.Audit, error) {
	q := url.Values{}
	if aq.Kind != "" {
		q.Set("kind", string(aq.Kind))
	}
	if aq.Key != "" {
		q.Set("key", aq.Key)
	}
	var out api.Audit
	return out, c.do(ctx, http.MethodGet, "/v1/audit", q, nil, &out)
}

// Links reads a local deployment's inter-region links (an admin route).
func (c *Client) Links(ctx context.Context) (api.Links, error) {
	var out api.Links
	return out, c.do(ctx, http.MethodGet, "/v1/admin/links", nil, nil, &out)
}

// SetLink cuts (up false) or heals the link between regions a and b of a
// local deployment (an admin route).
func (c *Client) SetLink(ctx context.Context, a, b string, up bool) (api.Link, error) {
	body := struct {
		Up bool `json:"up"`
	}{up}
	var out api.Link
	return out, c.do(ctx, http.MethodPut, "/v1/admin/links/"+esc(a)+"/"+esc(b), nil, body, &out)
}

// HandOff hands every budget right the replica holds to the peer replica
// to, now and as more arrive, before the replica is retired (an admin
// route).
func (c *Client) HandOff(ctx context.Context, to string) (api.BudgetHandoff, error) {
	body := struct {
		To string `json:"to"`
	}{to}
	var out api.BudgetHandoff
	return out, c.do(ctx, http.MethodPut, "/v1/admin/budgets/handoff", nil, body, &out)
}

// Handoff reads the replica's budget handoff (To "" when none is on) and
// the rights it still holds (an admin route).
func (c *Client) Handoff(ctx context.Context) (api.BudgetHandoff, error) {
	var out api.BudgetHandoff
	return out, c.do(ctx, http.MethodGet, "/v1/admin/budgets/handoff", nil, nil, &out)
}

// CancelHandoff ends the replica's budget handoff: it keeps rights again
// (an admin route).
func (c *Client) CancelHandoff(ctx context.Context) (api.BudgetHandoff, error) {
	var out api.BudgetHandoff
	return out, c.do(ctx, http.MethodDelete, "/v1/admin/budgets/handoff", nil, nil, &out)
}

// SetClockOffset sets how far a chaos build's replica's wall clock is
// from its host's (an admin route that only a chaos build serves; others
// answer 404).
func (c *Client) SetClockOffset(ctx context.Context, offset time.Duration) error {
	body := struct {
		OffsetMs int64 `json:"offset_ms"`
	}{offset.Milliseconds()}
	return c.do(ctx, http.MethodPut, "/v1/admin/chaos/clock", nil, body, nil)
}

// OpenAPI reads GET /v1/openapi.json: the API's OpenAPI 3.1 document, as
// the replica serves it.
func (c *Client) OpenAPI(ctx context.Context) ([]byte, error) {
	var doc []byte
	return doc, c.do(ctx, http.MethodGet, "/v1/openapi.json", nil, nil, &doc)
}

// Metrics reads GET /metrics: every sample, by its series as the text
// format prints it, with its labels if it has any, e.g.
// `tally_milestones_lost_total{sequence="likes"}`.
func (c *Client) Metrics(ctx context.Context) (map[string]float64, error) {
	var text []byte
	if err := c.do(ctx, http.MethodGet, "/metrics", nil, nil, &text); err != nil {
		return nil, err
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("GET /metrics at %s: a line without a value: %.80q", c.base, line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("GET /metrics at %s: %.80q: %w", c.base, line, err)
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("GET /metrics at %s: %w", c.base, err)
	}
	return out, nil
}

// Metric reads one series' value from GET /metrics (as Metrics names it).
func (c *Client) Metric(ctx context.Context, name string) (float64, error) {
	all, err := c.Metrics(ctx)
	if err != nil {
		return 0, err
	}
	v, ok := all[name]
	if !ok {
		return 0, fmt.Errorf("GET /metrics at %s: no %s", c.base, name)
	}
	return v, nil
}

// Replicas lists a local deployment's replicas and their states (an
// admin route).
func (c *Client) Replicas(ctx context.Context) (api.Replicas, error) {
	var out api.Replicas
	return out, c.do(ctx, http.MethodGet, "/v1/admin/replicas", nil, nil, &out)
}

// SetReplicaUp stops (up false) or starts again (up true) a replica of a
// local deployment, on its data and address (an admin route). The change
// is asynchronous: the answer is the state it left the replica in, and
// Replicas follows it.
func (c *Client) SetReplicaUp(ctx context.Context, replica string, up bool) (api.ReplicaState, error) {
	body := struct {
		Up bool `json:"up"`
	}{up}
	var out api.ReplicaState
	return out, c.do(ctx, http.MethodPut, "/v1/admin/replicas/"+esc(replica), nil, body, &out)
}

// MoveShards begins moving region's shards in a local deployment (an
// admin route): to copies holders each (0: as now), the drain replicas
// serving no keyed shard afterwards. It returns once the move has begun;
// Shards shows its progress.
func (c *Client) MoveShards(ctx context.Context, region string, copies int, drain []string) (api.ShardMove, error) {
	body := struct {
		Copies int      `json:"copies,omitempty"`
		Drain  []string `json:"drain,omitempty"`
	}{copies, drain}
	var out api.ShardMove
	return out, c.do(ctx, http.MethodPut, "/v1/admin/shards/"+esc(region), nil, body, &out)
}

// AddReplica starts a new replica in region of a local deployment (an
// admin route) and begins spreading the region's shards over it, at most
// maxMove shard copies at a time (0: no bound). It returns once the move
// has begun, naming the new replica (Added); Shards shows its progress.
func (c *Client) AddReplica(ctx context.Context, region string, maxMove int) (api.ShardMove, error) {
	body := struct {
		Add     int `json:"add"`
		MaxMove int `json:"max_move,omitempty"`
	}{1, maxMove}
	var out api.ShardMove
	return out, c.do(ctx, http.MethodPut, "/v1/admin/shards/"+esc(region), nil, body, &out)
}

// Backup has the replica write a checkpoint of its store into dir, a new
// directory on the replica's machine, ready to restore (an admin route).
func (c *Client) Backup(ctx context.Context, dir string) (api.Backup, error) {
	body := struct {
		Dir string `json:"dir"`
	}{dir}
	var out api.Backup
	return out, c.do(ctx, http.MethodPost, "/v1/admin/backup", nil, body, &out)
}

// ndjson is a request body of JSON lines, sent as it is.
type ndjson []byte

// Import backfills events (an admin route, POST /v1/admin/import): lines
// is the NDJSON of Events, each line booked at its own time however old.
// A second import of the same lines changes nothing (see the route's
// documentation for the identity of an increment without an idempotency
// key, and ImportKey in package httpapi). The answer has one result per
// line.
func (c *Client) Import(ctx context.Context, lines []byte) (api.EventsResult, error) {
	var out api.EventsResult
	return out, c.do(ctx, http.MethodPost, "/v1/admin/import", nil, ndjson(lines), &out)
}
