// The budget routes' shapes: grants, spends, refusals, balances, handoffs
// and cashbacks.

package api

// BudgetGrant answers POST /v1/budgets/{key}/grant.
type BudgetGrant struct {
	Key     string `json:"key"`
	Granted int64  `json:"granted"`
	// Remaining is the budget's remaining as this region sees it; Rights
	// is how much of it this region may spend without asking.
	Remaining int64 `json:"remaining"`
	Rights    int64 `json:"rights"`
	// Duplicate: the grant's idempotency key was applied before (here or
	// in a region this one has heard from); nothing was granted now.
	Duplicate bool `json:"duplicate"`
}

// BudgetSpend answers POST /v1/budgets/{key}/spend when the spend is done
// (or was done before: Duplicate).
type BudgetSpend struct {
	Key       string `json:"key"`
	Spent     int64  `json:"spent"`
	Remaining int64  `json:"remaining"`
	Rights    int64  `json:"rights"`
	Duplicate bool   `json:"duplicate"`
}

// BudgetRefused is the 409 body of a spend or cashback the region cannot
// cover: Code is budget_exhausted or rights_elsewhere, Key the budget that
// fell short (of a cashback: its budget or its merchant's balance).
type BudgetRefused struct {
	Error     string `json:"error"`
	Code      string `json:"code"`
	Key       string `json:"key"`
	Remaining int64  `json:"remaining"`
	Rights    int64  `json:"rights"`
}

// Budget answers GET /v1/budgets/{key}.
type Budget struct {
	Key       string `json:"key"`
	Remaining int64  `json:"remaining"`
	Granted   int64  `json:"granted"`
	Spent     int64  `json:"spent"`
	// Rights: what each replica holds, by replica id, as this region
	// knows it (exact for its own: LocalRights).
	Rights      map[string]int64 `json:"rights"`
	LocalRights int64            `json:"local_rights"`
	// Approx: other regions hold rights and may be spending them, so the
	// remaining may be lower there now (never below zero anywhere).
	Approx bool `json:"approx"`
	// Unreconciled: keyed spends applied in more than one region whose
	// refunds are still on their way (Spent may still fall).
	Unreconciled int `json:"unreconciled,omitempty"`
}

// BudgetHandoff answers the /v1/admin/budgets/handoff routes: the replica
// this one hands its budget rights to ("" when no handoff is on), and the
// rights it still holds, in how many budgets.
type BudgetHandoff struct {
	To      string `json:"to"`
	Budgets int    `json:"budgets"`
	Held    int64  `json:"held"`
	// Moved: the rights moved since this handoff began (PUT only): by the
	// request's pass and by the commits that raced it.
	Moved int64 `json:"moved"`
}

// Balance is one key's value in a cashback answer.
type Balance struct {
	Key   string `json:"key"`
	Value int64  `json:"value"`
}

// Cashback answers POST /v1/cashback.
type Cashback struct {
	Amount    int64 `json:"amount"`
	Duplicate bool  `json:"duplicate"`
	// Budget's and Merchant's values are their remaining as seen here
	// (the merchant's balance is a budget); User's is its counter's value.
	Budget   Balance `json:"budget"`
	Merchant Balance `json:"merchant"`
	User     Balance `json:"user"`
}
