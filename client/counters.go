package client

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/tally-dev/tally/api"
)

// Counters, event batches, unique counts and budgets.

// IncrOptions are an increment's optional parts.
type IncrOptions struct {
	// IdempotencyKey, if not "", makes retries of the increment count
	// once.
	IdempotencyKey string
	// At is when the increment happened by the client.
	At EventTime
}

// Incr adds by to a counter (negative subtracts).
func (c *Client) Incr(ctx context.Context, key string, by int64, opts IncrOptions) (api.Incr, error) {
	body := struct {
		By   int64     `json:"by"`
		Idem string    `json:"idempotency_key,omitempty"`
		At   EventTime `json:"at,omitzero"`
	}{by, opts.IdempotencyKey, opts.At}
	var out api.Incr
	return out, c.do(ctx, http.MethodPost, "/v1/counters/"+esc(key)+"/incr", nil, body, &out)
}

// Counter reads a counter.
func (c *Client) Counter(ctx context.Context, key string) (api.Counter, error) {
	var out api.Counter
	return out, c.do(ctx, http.MethodGet, "/v1/counters/"+esc(key), nil, nil, &out)
}

// The types of Event.
const (
	EventLike   = "like"
	EventUnlike = "unlike"
	EventIncr   = "incr"
	EventUnique = "unique"
	EventGrant  = "grant"
	EventSpend  = "spend"
)

// Event is one event of a batch (Events). Likes, unlikes and toggles
// name Item and User (a toggle: an optional IdempotencyKey, no At);
// increments, grants and spends Key and By; a unique event Key and ID. By 0 is left out: 1 for an increment and a spend (a grant needs
// one).
type Event struct {
	Type           string    `json:"type"`
	Item           string    `json:"item,omitempty"`
	User           string    `json:"user,omitempty"`
	Key            string    `json:"key,omitempty"`
	ID             string    `json:"id,omitempty"`
	By             int64     `json:"by,omitempty"`
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
	At             EventTime `json:"at,omitzero"`
}

// Events posts a batch of events (POST /v1/events): each is applied or
// rejected on its own, with its own result in the answer, in order.
func (c *Client) Events(ctx context.Context, events []Event) (api.EventsResult, error) {
	var out api.EventsResult
	return out, c.do(ctx, http.MethodPost, "/v1/events", nil, events, &out)
}

// UniqueIDs are ids added to a key's unique count: IDs, or one ID (sent
// as "id" rather than a list of one), seen at At.
type UniqueIDs struct {
	IDs []string  `json:"ids,omitempty"`
	ID  string    `json:"id,omitempty"`
	At  EventTime `json:"at,omitzero"`
}

// AddUniques adds ids to key's unique count.
func (c *Client) AddUniques(ctx context.Context, key string, ids UniqueIDs) (api.UniquesAdded, error) {
	var out api.UniquesAdded
	return out, c.do(ctx, http.MethodPost, "/v1/uniques/"+esc(key), nil, ids, &out)
}

// UniquesQuery narrows a unique count: over all time (the zero Range) or
// a window, and split per region.
type UniquesQuery struct {
	Range
	ByRegion bool
}

func (u UniquesQuery) query() url.Values {
	q := u.Range.query()
	if u.ByRegion {
		q.Set("by", "region")
	}
	return q
}

// Uniques estimates the distinct ids added to key.
func (c *Client) Uniques(ctx context.Context, key string, uq UniquesQuery) (api.Uniques, error) {
	var out api.Uniques
	return out, c.do(ctx, http.MethodGet, "/v1/uniques/"+esc(key), uq.query(), nil, &out)
}

// UniquesUnion estimates the distinct ids added to any of keys.
func (c *Client) UniquesUnion(ctx context.Context, keys []string, uq UniquesQuery) (api.Uniques, error) {
	q := uq.query()
	q.Set("keys", strings.Join(keys, ","))
	var out api.Uniques
	return out, c.do(ctx, http.MethodGet, "/v1/uniques", q, nil, &out)
}

// Grant raises a budget by by.
func (c *Client) Grant(ctx context.Context, key string, by int64) (api.BudgetGrant, error) {
	body := struct {
		By int64 `json:"by"`
	}{by}
	var out api.BudgetGrant
	return out, c.do(ctx, http.MethodPost, "/v1/budgets/"+esc(key)+"/grant", nil, body, &out)
}

// SpendRequest is a spend of a budget: By (0: 1), counted once per
// IdempotencyKey if it is not "".
type SpendRequest struct {
	By             int64  `json:"by,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// Spend spends from a budget. A spend the region cannot cover is an
// *Error whose Budget is set (409 budget_exhausted or rights_elsewhere):
// nothing was spent.
func (c *Client) Spend(ctx context.Context, key string, req SpendRequest) (api.BudgetSpend, error) {
	var out api.BudgetSpend
	return out, c.do(ctx, http.MethodPost, "/v1/budgets/"+esc(key)+"/spend", nil, req, &out)
}

// Budget reads a budget.
func (c *Client) Budget(ctx context.Context, key string) (api.Budget, error) {
	var out api.Budget
	return out, c.do(ctx, http.MethodGet, "/v1/budgets/"+esc(key), nil, nil, &out)
}

// CashbackRequest is one purchase's cashback: Amount is spent from the
// Budget and from the Merchant's balance (a budget too, never overdrawn)
// and added to the User's counter, once per IdempotencyKey (required: it
// names the purchase).
type CashbackRequest struct {
	Budget         string `json:"budget"`
	Merchant       string `json:"merchant"`
	User           string `json:"user"`
	Amount         int64  `json:"amount"`
	IdempotencyKey string `json:"idempotency_key"`
	// At is when the purchase happened by the client (zero: now, by the
	// region's clock): the user's credit is booked at that moment.
	At EventTime `json:"at,omitzero"`
}

// Cashback pays one purchase's cashback. One the budget or the merchant's
// balance cannot cover is refused as a Spend is; the error's Budget.Key
// names which.
func (c *Client) Cashback(ctx context.Context, req CashbackRequest) (api.Cashback, error) {
	var out api.Cashback
	return out, c.do(ctx, http.MethodPost, "/v1/cashback", nil, req, &out)
}
