package dashboard

import (
	"context"
	"errors"
	"math"
	"net/http"
	"time"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/client"
)

const (
	// dashMaxSpends bounds the spends of one budget action.
	dashMaxSpends = 1000
	// dashSpendRetries is how often one spend refused with
	// rights_elsewhere is retried (the refusal asked the peers for
	// rights), dashSpendBackoff apart, as a client would.
	dashSpendRetries = 5
	dashSpendBackoff = 5 * time.Millisecond
)

// budgetResponse answers POST /api/budget.
type budgetResponse struct {
	Region string `json:"region"`
	Key    string `json:"key"`
	Op     string `json:"op"`
	By     int64  `json:"by"`
	Sent   int    `json:"sent"`
	OK     int    `json:"ok"`
	// Refused counts the final 409s by code (budget_exhausted,
	// rights_elsewhere); Retries the rights_elsewhere answers retried.
	Refused map[string]int `json:"refused"`
	Retries int            `json:"retries"`
	Failed  int            `json:"failed"`
	Error   string         `json:"error,omitempty"` // the first failure
	// Remaining and Rights are the region's answer to the last request
	// that succeeded or was refused.
	Remaining int64 `json:"remaining"`
	Rights    int64 `json:"rights"`
	Ms        int64 `json:"ms"`
}

// POST /api/budget?region=us&key=gift-cards&op=grant|spend[&by=1][&n=1]:
// a grant of by, or n spends of by one after the other, at one region. A
// spend refused with rights_elsewhere is retried a few times a few ms
// apart, as a client would: the refusal asked the peers for rights.
func (d *Dashboard) budget(w http.ResponseWriter, r *http.Request) {
	i, reg, ok := d.region(w, r)
	if !ok {
		return
	}
	key, op := r.FormValue("key"), r.FormValue("op")
	if key == "" {
		dashError(w, http.StatusBadRequest, "want key=...")
		return
	}
	if op != "grant" && op != "spend" {
		dashError(w, http.StatusBadRequest, "op %q: want grant or spend", op)
		return
	}
	maxN := dashMaxSpends
	if op == "grant" {
		maxN = 1 // a grant is one
	}
	by, ok := formInt[int64](w, r, "by", 1, 1, math.MaxInt64)
	if !ok {
		return
	}
	n, ok := formInt(w, r, "n", 1, 1, maxN)
	if !ok {
		return
	}
	start := time.Now()
	out := budgetResponse{Region: reg.Region, Key: key, Op: op, By: by, Sent: n, Refused: map[string]int{}}
	c := d.regions[i].api
	for range n {
		for try := 0; ; try++ {
			ctx, cancel := context.WithTimeout(r.Context(), dashWriteTimeout)
			var remaining, rights int64
			var err error
			if op == "grant" {
				var g api.BudgetGrant
				g, err = c.Grant(ctx, key, by)
				remaining, rights = g.Remaining, g.Rights
			} else {
				var sp api.BudgetSpend
				sp, err = c.Spend(ctx, key, client.SpendRequest{By: by})
				remaining, rights = sp.Remaining, sp.Rights
			}
			cancel()
			var ce *client.Error
			refused := errors.As(err, &ce) && ce.Budget != nil
			switch {
			case err == nil:
				out.OK++
			case refused && ce.Code == client.CodeRightsElsewhere && try < dashSpendRetries:
				out.Retries++
				select {
				case <-time.After(dashSpendBackoff):
					continue
				case <-r.Context().Done():
					dashError(w, http.StatusServiceUnavailable, "cancelled")
					return
				}
			case refused:
				out.Refused[ce.Code]++
				remaining, rights = ce.Budget.Remaining, ce.Budget.Rights
			default:
				out.Failed++
				if out.Error == "" {
					out.Error = regionError(err).Error()
				}
			}
			if err == nil || refused {
				out.Remaining, out.Rights = remaining, rights
			}
			break
		}
	}
	out.Ms = time.Since(start).Milliseconds()
	st := http.StatusOK
	if out.Failed == n {
		st = http.StatusBadGateway
	}
	dashJSON(w, st, out)
}
