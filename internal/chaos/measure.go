package chaos

import (
	"math"
	"sort"
	"strings"
)

// Stats summarizes durations, in milliseconds.
type Stats struct {
	N     int     `json:"n"`
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

// statsOf returns nearest-rank percentiles of ms.
func statsOf(ms []float64) Stats {
	if len(ms) == 0 {
		return Stats{}
	}
	s := append([]float64(nil), ms...)
	sort.Float64s(s)
	rank := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return s[max(i, 0)]
	}
	return Stats{N: len(s), P50Ms: rank(0.50), P99Ms: rank(0.99), MaxMs: s[len(s)-1]}
}

// Availability is the share of writes acknowledged at the first attempt,
// among those sent to a region whose process was up and accepting writes
// (connection refused and 503 not_ready are left out: the region was down
// or recovering, which is not what a partition should cause). Budget
// operations are left out too: a refused spend is a right answer, and one
// a region cannot cover during a cut is the point of a budget; and so are
// other 4xx refusals, such as a blocked user's like (403 user_blocked):
// the region answered, and rightly.
type Availability struct {
	Attempted int     `json:"attempted"`
	Acked     int     `json:"acked"`
	Ratio     float64 `json:"ratio"`
}

func availability(ops []Op, during func(*Op) bool) Availability {
	var a Availability
	for i := range ops {
		o := &ops[i]
		if !during(o) || o.Kind.budgetOp() || o.Kind == OpHandoff || o.Reason == "refused" || o.Reason == "not_ready" ||
			o.Outcome == OutcomeFailed && strings.HasPrefix(o.Reason, "http 4") {
			continue
		}
		a.Attempted++
		if o.Outcome == OutcomeOK && (o.Attempts == 1 || o.FirstAcked) {
			a.Acked++
		}
	}
	if a.Attempted > 0 {
		a.Ratio = float64(a.Acked) / float64(a.Attempted)
	}
	return a
}

// latencies returns the latency of writes acknowledged at the first
// attempt, in ms.
func latencies(ops []Op, during func(*Op) bool) Stats {
	var ms []float64
	for i := range ops {
		o := &ops[i]
		// Only single attempts: an increment's span includes its failover
		// retry, sent after it was acknowledged.
		if during(o) && !o.Kind.budgetOp() && o.Kind != OpHandoff && o.Outcome == OutcomeOK && o.Attempts == 1 {
			ms = append(ms, float64((o.End-o.Start).Microseconds())/1000)
		}
	}
	return statsOf(ms)
}

// OpCounts counts the operations of a run.
type OpCounts struct {
	Total             int `json:"total"`
	Likes             int `json:"likes"`
	Unlikes           int `json:"unlikes"`
	Toggles           int `json:"toggles"`
	LatePairs         int `json:"late_pairs"`
	Increments        int `json:"increments"`
	Pairs             int `json:"pairs"`
	OK                int `json:"ok"`
	Failed            int `json:"failed"`
	FailedRefused     int `json:"failed_refused"`
	FailedNotReady    int `json:"failed_not_ready"`
	TimedOut          int `json:"timed_out"` // first attempt indeterminate
	LikesRetried      int `json:"likes_retried"`
	ResolvedDuplicate int `json:"resolved_duplicate"`
	ResolvedApplied   int `json:"resolved_applied"`
	Unresolved        int `json:"unresolved"`
	// RetriedElsewhere: increments the client sent again to another
	// region; RetryDuplicate of them were answered duplicate:true there.
	RetriedElsewhere int `json:"retried_elsewhere"`
	RetryDuplicate   int `json:"retry_duplicate"`
	// Stamped: operations sent with the client's event time (Op.At);
	// FailedBadTime: failed because a replica refused that time.
	Stamped       int `json:"stamped"`
	FailedBadTime int `json:"failed_bad_time"`
	// Uniques are unique adds, UniqueIDs the ids they sent (repeats
	// included, each side of a pair counted), UniquePairs the adds sent
	// to two regions at once (Pairs are the likes' concurrent pairs).
	// LikesRetried counts unique adds retried until acknowledged too.
	Uniques     int `json:"uniques"`
	UniqueIDs   int `json:"unique_ids"`
	UniquePairs int `json:"unique_pairs"`
	// Grants, Spends and Cashbacks are the budget operations, counted
	// apart from the others: BudgetDone were acknowledged, BudgetRefused
	// answered 409 (BudgetExhausted budget_exhausted, RightsElsewhere
	// rights_elsewhere, after its retries), BudgetMaybe never answered by
	// any region they were sent to; BudgetRetriedElsewhere keyed ones were
	// sent again to another region.
	Grants                 int `json:"grants"`
	Spends                 int `json:"spends"`
	Cashbacks              int `json:"cashbacks"`
	BudgetDone             int `json:"budget_done"`
	BudgetRefused          int `json:"budget_refused"`
	BudgetExhausted        int `json:"budget_exhausted"`
	RightsElsewhere        int `json:"rights_elsewhere"`
	BudgetMaybe            int `json:"budget_maybe"`
	BudgetRetriedElsewhere int `json:"budget_retried_elsewhere"`
	// Handoffs are the handoffs of a region's rights that were turned on
	// (HandedOff rights moved by them in all).
	Handoffs  int   `json:"handoffs"`
	HandedOff int64 `json:"handed_off"`
}

// countBudgetOp counts a budget operation.
func (c *OpCounts) countBudgetOp(o *Op) {
	switch o.Kind {
	case OpGrant:
		c.Grants++
	case OpSpend:
		c.Spends++
	case OpCashback:
		c.Cashbacks++
	}
	if o.Retry != "" {
		c.BudgetRetriedElsewhere++
	}
	switch o.Outcome {
	case OutcomeOK:
		c.BudgetDone++
	case OutcomeRefused:
		c.BudgetRefused++
		if o.Reason == "budget_exhausted" {
			c.BudgetExhausted++
		} else {
			c.RightsElsewhere++
		}
	case OutcomeTimeout:
		c.BudgetMaybe++
	}
}

func countOps(ops []Op) OpCounts {
	var c OpCounts
	pairs, uniquePairs := map[int64]bool{}, map[int64]bool{}
	for i := range ops {
		o := &ops[i]
		c.Total++
		if o.Kind.budgetOp() {
			c.countBudgetOp(o)
			continue
		}
		if o.Kind == OpHandoff {
			if o.Outcome == OutcomeOK {
				c.Handoffs++
				c.HandedOff += o.Value
			}
			continue
		}
		switch o.Kind {
		case OpLike:
			c.Likes++
		case OpUnlike:
			c.Unlikes++
		case OpToggle:
			c.Toggles++
		case OpIncr:
			c.Increments++
		case OpUnique:
			c.Uniques++
			c.UniqueIDs += len(o.IDs)
		}
		switch {
		case o.Pair != 0 && o.Kind == OpUnique:
			uniquePairs[o.Pair] = true
		case o.Pair != 0:
			pairs[o.Pair] = true
		}
		if o.At != 0 {
			c.Stamped++
		}
		if o.Late && o.lag > 0 { // the second of a late pair
			c.LatePairs++
		}
		attempts := o.Attempts
		if o.Retry != "" {
			attempts-- // the failover retry is not a retry of a lost answer
			c.RetriedElsewhere++
			if o.RetryDuplicate {
				c.RetryDuplicate++
			}
		}
		switch {
		case o.Outcome == OutcomeFailed:
			c.Failed++
			switch o.Reason {
			case "refused":
				c.FailedRefused++
			case "not_ready":
				c.FailedNotReady++
			case "http 400 bad_time", "event rejected: bad_time":
				c.FailedBadTime++
			}
		case attempts > 1 || o.Outcome == OutcomeTimeout:
			c.TimedOut++
		}
		switch {
		case o.Outcome == OutcomeOK:
			c.OK++
			if attempts > 1 {
				c.LikesRetried++
			}
		case o.Resolved == ResolvedDuplicate:
			c.ResolvedDuplicate++
		case o.Resolved == ResolvedApplied:
			c.ResolvedApplied++
		case o.Outcome == OutcomeTimeout:
			c.Unresolved++
		}
	}
	c.Pairs, c.UniquePairs = len(pairs), len(uniquePairs)
	return c
}
