package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
	tallyroute "github.com/tally-dev/tally/route"
)

// Budget routes: bounded counters that are never overspent (region
// budgets.go). A spend the region cannot cover is a 409 whose code says
// why: budget_exhausted (nothing, or too little, left as seen here) or
// rights_elsewhere (enough left, but other regions hold the rights; this
// region asked them for some, so a retry shortly after usually succeeds).

type grantRequest struct {
	By             *int64  `json:"by"`
	IdempotencyKey *string `json:"idempotency_key"`
}

type spendRequest struct {
	By             *int64  `json:"by"`
	IdempotencyKey *string `json:"idempotency_key"`
}

type cashbackRequest struct {
	Budget         *string `json:"budget"`
	Merchant       *string `json:"merchant"`
	User           *string `json:"user"`
	Amount         *int64  `json:"amount"`
	IdempotencyKey *string `json:"idempotency_key"`
	// At (or Timestamp) is when the purchase happened by the client: the
	// user's credit is booked into the slots of that moment (eventTime).
	At        json.RawMessage `json:"at"`
	Timestamp json.RawMessage `json:"timestamp"`
}

// budgetBy checks a grant's, spend's or cashback's amount (def if absent).
func budgetBy(field string, v *int64, def int64) (int64, error) {
	if v == nil {
		if def == 0 {
			return 0, newError(http.StatusBadRequest, frontdoor.CodeMissingField, "%s is required", field)
		}
		return def, nil
	}
	if *v < 1 || *v > region.MaxBy {
		return 0, newError(http.StatusBadRequest, frontdoor.CodeBadBy, "%s %d is out of range; want 1 to %d", field, *v, int64(region.MaxBy))
	}
	return *v, nil
}

// POST /v1/budgets/{key}/grant {"by": n, "idempotency_key": "..."}: with
// a key (or the Idempotency-Key header), a retry in any region that has
// heard of the grant grants nothing and answers duplicate.
func (s *Server) grantBudget(w http.ResponseWriter, r *http.Request) error {
	key, err := pathID(r, "key")
	if err != nil {
		return err
	}
	var body grantRequest
	if err := s.decodeBody(w, r, &body); err != nil && !errors.Is(err, errEmptyBody) {
		return err
	}
	by, err := budgetBy("by", body.By, 0)
	if err != nil {
		return err
	}
	idem, err := idempotencyKey(r, body.IdempotencyKey)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	res, err := s.apply(ctx, w, r, region.Op{Kind: region.OpGrant, Item: key, By: by, IdemKey: idem})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.BudgetGrant{Key: key, Granted: by, Remaining: res.Value, Rights: res.Rights, Duplicate: res.Duplicate})
	return nil
}

// POST /v1/budgets/{key}/spend {"by": n, "idempotency_key": "..."}
func (s *Server) spendBudget(w http.ResponseWriter, r *http.Request) error {
	key, err := pathID(r, "key")
	if err != nil {
		return err
	}
	var body spendRequest
	if err := s.decodeBody(w, r, &body); err != nil && !errors.Is(err, errEmptyBody) {
		return err
	}
	by, err := budgetBy("by", body.By, 1)
	if err != nil {
		return err
	}
	idem, err := idempotencyKey(r, body.IdempotencyKey)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	res, err := s.apply(ctx, w, r, region.Op{Kind: region.OpSpend, Item: key, By: by, IdemKey: idem})
	if refusedBudget(w, key, res, err) {
		return nil
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.BudgetSpend{Key: key, Spent: by, Remaining: res.Value, Rights: res.Rights, Duplicate: res.Duplicate})
	return nil
}

// refusedBudget writes the 409 of a spend the region cannot cover, and
// reports whether err was one.
func refusedBudget(w http.ResponseWriter, key string, res region.Result, err error) bool {
	out := api.BudgetRefused{Key: key, Remaining: res.Value, Rights: res.Rights}
	switch {
	case errors.Is(err, region.ErrBudgetExhausted):
		out.Code = frontdoor.CodeBudgetExhausted
		out.Error = "budget exhausted: it has less left than the spend, as this region sees it; nothing was spent"
	case errors.Is(err, region.ErrRightsElsewhere):
		out.Code = frontdoor.CodeRightsElsewhere
		out.Error = "the budget has enough left, but other regions hold the rights to it; this region asked them " +
			"for some, so retry in a few milliseconds (or at another region); nothing was spent"
	default:
		return false
	}
	writeJSON(w, http.StatusConflict, out)
	return true
}

// GET /v1/budgets/{key}
func (s *Server) getBudget(w http.ResponseWriter, r *http.Request) error {
	key, err := pathID(r, "key")
	if err != nil {
		return err
	}
	rd, self, err := s.readBudget(w, r, key)
	if err != nil {
		return err
	}
	out := api.Budget{Key: key, Remaining: rd.Remaining, Granted: rd.Granted, Spent: rd.Spent, Rights: rd.Rights,
		LocalRights: rd.LocalRights, Unreconciled: rd.Unreconciled, Approx: rd.Unreconciled > 0}
	for id, n := range rd.Rights {
		if id != self && n > 0 {
			out.Approx = true
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// readBudget reads budget key here, or at a holder of its shard
// (readsElsewhere), and names the replica whose view it is.
func (s *Server) readBudget(w http.ResponseWriter, r *http.Request, key string) (region.BudgetRead, string, error) {
	if !s.readsElsewhere(r, key) {
		rd, err := s.rep.Budgets().Get(key)
		return rd, s.rep.ID(), err
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	res, err := s.readAt(ctx, w, key, tallyroute.Op{Kind: tallyroute.OpBudgetView, Key: key})
	if err != nil {
		return region.BudgetRead{}, "", err
	}
	d := res.Detail
	if d.Unreconciled < 0 || d.Unreconciled > math.MaxInt32 {
		return region.BudgetRead{}, "", fmt.Errorf("the holder answered %d unreconciled records", d.Unreconciled)
	}
	rd := region.BudgetRead{Remaining: res.Value, Granted: d.Granted, Spent: d.Spent, Rights: d.Rights, LocalRights: res.Rights,
		Unreconciled: int(d.Unreconciled)}
	if rd.Rights == nil {
		rd.Rights = map[string]int64{} // as a replica's own read has it
	}
	return rd, d.Origin, nil
}

// POST /v1/cashback {"budget","merchant","user","amount","idempotency_key"}
func (s *Server) postCashback(w http.ResponseWriter, r *http.Request) error {
	var body cashbackRequest
	if err := s.decodeBody(w, r, &body); err != nil {
		if errors.Is(err, errEmptyBody) {
			return newError(http.StatusBadRequest, frontdoor.CodeMissingField, "a cashback needs a body: budget, merchant, user, amount, idempotency_key")
		}
		return err
	}
	var missing []string
	for _, f := range []struct {
		name string
		v    *string
	}{{"budget", body.Budget}, {"merchant", body.Merchant}, {"user", body.User}} {
		if f.v == nil {
			missing = append(missing, f.name)
		} else if err := checkID(f.name, *f.v); err != nil {
			return err
		}
	}
	if len(missing) > 0 {
		return newError(http.StatusBadRequest, frontdoor.CodeMissingField, "%s required", strings.Join(missing, ", "))
	}
	amount, err := budgetBy("amount", body.Amount, 0)
	if err != nil {
		return err
	}
	idem, err := idempotencyKey(r, body.IdempotencyKey)
	if err != nil {
		return err
	}
	if idem == "" {
		return newError(http.StatusBadRequest, frontdoor.CodeMissingField, "idempotency_key (or the Idempotency-Key header) is required: it names the purchase")
	}
	if *body.Merchant == *body.User {
		return newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "merchant and user must be different balances")
	}
	if *body.Merchant == *body.Budget {
		return newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "merchant and budget must be different budgets")
	}
	at, err := eventTime(body.At, body.Timestamp)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	op := region.Op{Kind: region.OpCashback, Item: *body.Budget, Merchant: *body.Merchant,
		User: *body.User, By: amount, IdemKey: idem, At: at}
	var res region.Result
	if s.cfg.Purchases != nil && !s.holdsOp(&op) {
		// Keys of shards this replica does not hold all three of: a
		// holder of all three, or a cross-shard purchase (package
		// purchase).
		res, err = s.cfg.Purchases.Cashback(ctx, op)
	} else {
		res, err = s.rep.Apply(ctx, op)
	}
	refused := *body.Budget
	if res.Refused != "" {
		refused = res.Refused // the merchant's balance could not cover it
	}
	if refusedBudget(w, refused, res, err) {
		return nil
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.Cashback{Amount: amount, Duplicate: res.Duplicate,
		Budget:   api.Balance{Key: *body.Budget, Value: res.Value},
		Merchant: api.Balance{Key: *body.Merchant, Value: res.Merchant},
		User:     api.Balance{Key: *body.User, Value: res.UserValue}})
	return nil
}

type handoffRequest struct {
	To *string `json:"to"`
}

// PUT /v1/admin/budgets/handoff {"to": "<replica>"}: before this replica
// is retired, hand every budget right it holds to a peer, now and as more
// arrive (region handoff.go).
func (s *Server) putHandoff(w http.ResponseWriter, r *http.Request) error {
	var req handoffRequest
	if err := s.decodeRequired(w, r, &req, `{"to":"eu-1"}`); err != nil {
		return err
	}
	if req.To == nil {
		return newError(http.StatusBadRequest, frontdoor.CodeMissingField, `body needs "to": the replica to hand the budget rights to`)
	}
	to := *req.To
	if to == s.rep.ID() {
		return newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "cannot hand budget rights off to this replica itself")
	}
	if err := s.knownPeer(to); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	h, err := s.rep.Budgets().HandOffRights(ctx, to)
	if err != nil {
		return err
	}
	s.log.Warn("budget rights handed off by admin", "to", to, "budgets", h.Budgets, "moved", h.Moved, "held", h.Held)
	writeJSON(w, http.StatusOK, api.BudgetHandoff{To: h.To, Budgets: h.Budgets, Held: h.Held, Moved: h.Moved})
	return nil
}

// knownPeer checks that to is a replica this one replicates with: rights
// handed to an id nobody runs would be stranded for good.
func (s *Server) knownPeer(to string) error {
	if s.cfg.Replication == nil {
		return newError(http.StatusConflict, frontdoor.CodeUnknownReplica, "this replica has no peers to hand its budget rights to")
	}
	var ids []string
	for _, p := range s.cfg.Replication.Peers() {
		if p.Replica == to {
			return nil
		}
		ids = append(ids, p.Replica)
	}
	return newError(http.StatusConflict, frontdoor.CodeUnknownReplica, "%q is not a peer of this replica (peers: %s)", to, strings.Join(ids, ", "))
}

// GET /v1/admin/budgets/handoff
func (s *Server) getHandoff(w http.ResponseWriter, _ *http.Request) error {
	h, err := s.rep.Budgets().HandoffStatus()
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.BudgetHandoff{To: h.To, Budgets: h.Budgets, Held: h.Held})
	return nil
}

// DELETE /v1/admin/budgets/handoff: keep rights again.
func (s *Server) deleteHandoff(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	if err := s.rep.Budgets().CancelHandoff(ctx); err != nil {
		return err
	}
	s.log.Warn("budget rights handoff cancelled by admin")
	return s.getHandoff(w, r)
}
