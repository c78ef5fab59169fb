package chaos

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"strings"
	"time"

	"github.com/tally-dev/tally/internal/base/poll"
)

// Approximate counters. The regions run with an approx rule on the prefix
// apx- (error approxError), and a share of the increments go to the
// counters apx-0, apx-1, ...: Config.ApproxCounters of them, beside the
// Counters exact ones. An increment of such a counter counts a multiple of
// the counter's step, decided by a coin at the replica that applies it,
// and its answer says what it counted ("counted"; a batched one that
// counted nothing says nothing). A keyed increment's record keeps that
// decision: a retry is a duplicate of it, and of two regions that both
// applied the key during a cut, the record's winner keeps its own count
// and the other's is taken back.
//
// So the model does not know the value, but it knows what the answers
// said. For each applied increment, the candidates are the counts its
// non-duplicate answers reported, and, if an attempt's answer was lost
// (it may have applied, unseen), any count between 0 and |by| plus the
// largest step the counter could have reached, with by's sign. After the
// final heal every region must read the same value, approx:true, between
// the sums of the smallest and the largest candidates: with no lost
// answer and no key applied twice, exactly the sum of what the answers
// said. Nothing an increment was told it counted may be lost or counted
// twice, as for exact counters. The estimate must also be within
// approxSigmas of its bound on the standard deviation (error times the
// magnitude of the increments, doubled for the applications reconciled
// away) of the true sum of the applied increments, and the counter must
// have counted in steps above 1 for the run to say it checked anything
// approximate (Checked.ApproxMaxStep).

// approxPrefix is the prefix of the approximate counters' keys, and
// approxError the relative standard error of their rule.
const (
	approxPrefix = "apx-"
	approxError  = 0.1
)

// approxSigmas is how many standard deviations from the true sum an
// estimate may be. The bound on the deviation is itself loose (the step
// rounds down to a power of two), so a correct replica is several times
// further inside it.
const approxSigmas = 6

// approxCheckTimeout bounds the wait for every region to read the same
// value of every approximate counter after the final heal, and
// approxStableFor is how long the answers must stay the same.
const (
	approxCheckTimeout = 20 * time.Second
	approxStableFor    = time.Second
)

// approxID names the i-th approximate counter (from 0).
func approxID(i int) string { return fmt.Sprintf("%s%d", approxPrefix, i) }

// isApprox reports whether counter id is one of the approximate counters.
func isApprox(id string) bool { return strings.HasPrefix(id, approxPrefix) }

// approxIDs are the approximate counters of cfg.
func approxIDs(cfg Config) []string {
	ids := make([]string, cfg.ApproxCounters)
	for i := range ids {
		ids[i] = approxID(i)
	}
	return ids
}

// approxArg is the regions' --approx rule.
func approxArg() string { return fmt.Sprintf("%s=%g", approxPrefix, approxError) }

// approxKey is what the model knows of one approximate counter.
type approxKey struct {
	// Lo and Hi bound the value: the sums of each applied increment's
	// smallest and largest candidate count.
	Lo, Hi int64
	// Want is the true sum of the applied increments, and Magnitude the
	// sum of their sizes, doubled for each that may have applied twice.
	Want, Magnitude int64
	// Increments counts the applied increments, Unseen those with an
	// answer lost (whose count is known only within bounds).
	Increments, Unseen int
	// MaxStep is the largest count one answer reported.
	MaxStep int64
	// Uncertain: an increment timed out and was never resolved.
	Uncertain bool
}

// approxStepBound is the largest step a counter of the given increments
// could have counted with: the largest power of two at most
// 2·approxError²·C, where C, the magnitude of the counter's vector, is at
// most twice the increments' magnitude (a count overshoots its increment
// by less than a step, and a key applied twice is taken back once) plus
// slack for the first steps.
func approxStepBound(magnitude int64) int64 {
	x := 2 * approxError * approxError * float64(4*magnitude+64)
	if x < 2 {
		return 1
	}
	return 1 << (bits.Len64(uint64(x)) - 1)
}

// buildApproxModel reads the approximate counters' increments.
func buildApproxModel(ops []Op) map[string]*approxKey {
	m := map[string]*approxKey{}
	for i := range ops {
		o := &ops[i]
		if o.Kind != OpIncr || !isApprox(o.Key) {
			continue
		}
		k := m[o.Key]
		if k == nil {
			k = &approxKey{}
			m[o.Key] = k
		}
		if !o.applied() {
			k.Uncertain = k.Uncertain || o.Outcome == OutcomeTimeout
			continue
		}
		size := abs64(o.By)
		k.Want += o.By
		k.Magnitude += size
		if len(o.Counted) > 1 || o.CountUnseen {
			k.Magnitude += size // a second application, reconciled away
		}
		k.Increments++
		for _, c := range o.Counted {
			k.MaxStep = max(k.MaxStep, abs64(c))
		}
	}
	// The candidates of an unseen count need the step bound, so a second
	// pass once the magnitudes are known.
	for i := range ops {
		o := &ops[i]
		if o.Kind != OpIncr || !isApprox(o.Key) || !o.applied() {
			continue
		}
		k := m[o.Key]
		cands := o.Counted
		if o.CountUnseen || len(cands) == 0 {
			reach := abs64(o.By) + approxStepBound(k.Magnitude)
			if o.By < 0 {
				reach = -reach
			}
			cands = append(cands[:len(cands):len(cands)], 0, reach)
			k.Unseen++
		}
		lo, hi := cands[0], cands[0]
		for _, c := range cands[1:] {
			lo, hi = min(lo, c), max(hi, c)
		}
		k.Lo += lo
		k.Hi += hi
	}
	return m
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// approxChecked counts what checkApprox compared.
type approxChecked struct {
	Keys, Reads, Increments, Unseen int
	// MaxStep is the largest count one increment's answer reported: above
	// 1, the counters were counting approximately.
	MaxStep int64
}

// approxState is every region's read of every approximate counter.
type approxState struct {
	Regions []string
	Reads   map[string]map[string]reading // region, counter
	Errs    []Violation
}

func readApproxState(ctx context.Context, procs []*proc, ids []string) approxState {
	st := approxState{Reads: map[string]map[string]reading{}}
	reads := perRegion(ctx, procs, 10*time.Second, func(ctx context.Context, p *proc) (map[string]reading, error) {
		out := map[string]reading{}
		for _, id := range ids {
			rd, err := p.client.read(ctx, key{ID: id}, 5*time.Second)
			if err != nil {
				return nil, err
			}
			out[id] = rd
		}
		return out, nil
	})
	for _, p := range procs {
		st.Regions = append(st.Regions, p.view)
		if rs, ok := reads[p.view]; ok {
			st.Reads[p.view] = *rs
		} else {
			st.Errs = append(st.Errs, Violation{Kind: KindApproxCounter, Region: p.view, Detail: "the approximate counters could not be read"})
		}
	}
	return st
}

// same reports whether every region read every counter, all alike with
// nothing unreconciled, and as in prev.
func (st approxState) same(prev approxState, ids []string) bool {
	if len(st.Errs) > 0 || len(st.Regions) == 0 {
		return false
	}
	ref := st.Reads[st.Regions[0]]
	for _, r := range st.Regions {
		for _, id := range ids {
			rd := st.Reads[r][id]
			if rd.Unreconciled > 0 || rd.Value != ref[id].Value || rd.Value != prev.Reads[r][id].Value {
				return false
			}
		}
	}
	return true
}

// checkApprox compares every region's approximate counters with the model.
func checkApprox(m map[string]*approxKey, st approxState, ids []string) ([]Violation, approxChecked) {
	vs := append([]Violation(nil), st.Errs...)
	var n approxChecked
	for _, id := range ids {
		k := m[id]
		if k == nil {
			k = &approxKey{}
		}
		n.Keys++
		n.Increments += k.Increments
		n.Unseen += k.Unseen
		n.MaxStep = max(n.MaxStep, k.MaxStep)
		name := key{ID: id}.String()
		var first *reading
		for _, r := range st.Regions {
			rd, ok := st.Reads[r][id]
			if !ok {
				continue // Errs says why
			}
			n.Reads++
			if first == nil {
				first = &rd
			} else if rd.Value != first.Value {
				vs = append(vs, Violation{Kind: KindDisagreement, Region: r, Key: name,
					Detail: fmt.Sprintf("reads %d, %s reads %d", rd.Value, st.Regions[0], first.Value)})
			}
			if rd.Unreconciled > 0 {
				vs = append(vs, Violation{Kind: KindApprox, Region: r, Key: name,
					Detail: fmt.Sprintf("the final read says unreconciled:%d", rd.Unreconciled)})
			}
			if !rd.Approx && k.Increments > 0 {
				vs = append(vs, Violation{Kind: KindApproxCounter, Region: r, Key: name,
					Detail: "the final read of a counter under an approx rule says approx:false"})
			}
			if k.Uncertain {
				continue
			}
			if rd.Value < k.Lo || rd.Value > k.Hi {
				what := fmt.Sprintf("between %d and %d", k.Lo, k.Hi)
				if k.Lo == k.Hi {
					what = fmt.Sprint(k.Lo)
				}
				vs = append(vs, Violation{Kind: KindValueMismatch, Region: r, Key: name,
					Detail: fmt.Sprintf("reads %d, but its %d increments were told they counted %s (%d answers lost)", rd.Value, k.Increments, what, k.Unseen)})
			}
			if bound := approxSigmas * approxError * float64(k.Magnitude); math.Abs(float64(rd.Value-k.Want)) > bound {
				vs = append(vs, Violation{Kind: KindApproxCounter, Region: r, Key: name,
					Detail: fmt.Sprintf("reads %d for a true sum of %d: off by more than %d standard deviations (%.0f)", rd.Value, k.Want, approxSigmas, bound)})
			}
		}
	}
	return vs, n
}

// checkApproxUntil waits, up to approxCheckTimeout, for every region to
// read every approximate counter alike for approxStableFor, and checks
// the last reads.
func checkApproxUntil(ctx context.Context, procs []*proc, ops []Op, ids []string) ([]Violation, approxChecked) {
	if len(ids) == 0 {
		return nil, approxChecked{}
	}
	m := buildApproxModel(ops)
	start := time.Now()
	var prev approxState
	for {
		st := readApproxState(ctx, procs, ids)
		if st.same(prev, ids) || time.Since(start) >= approxCheckTimeout || !poll.Sleep(ctx, approxStableFor) {
			return checkApprox(m, st, ids)
		}
		prev = st
	}
}
