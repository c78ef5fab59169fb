package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/tally-dev/tally/api"
)

// sampler checks no-rollback: it reads every key in every region
// periodically, and a replica's own entry of a vector (the one only it
// writes) must never be seen to decrease, not even across kill -9 and
// restarts. A region whose data dir was wiped is not sampled until it is
// ready again: until then it holds writes and says its reads are approx,
// and its first sample after that must be at least its last one before.
//
// It also reads every region's view of every budget: none may show
// remaining below 0 (or spent above granted), and the region's own
// rights (local_rights) must never be below 0.
type sampler struct {
	d        *deployment
	keys     []key
	budgets  []string
	interval time.Duration
	start    time.Time

	mu         sync.Mutex // protects the fields below
	last       map[string]map[key]sample
	samples    int
	budgetSeen int // budget views sampled
	violations []Violation
}

type sample struct {
	own PN
	at  time.Duration
}

func newSampler(d *deployment, keys []key, budgets []string, interval time.Duration, start time.Time) *sampler {
	return &sampler{d: d, keys: keys, budgets: budgets, interval: interval, start: start, last: map[string]map[key]sample{}}
}

// run samples every region until ctx ends.
func (s *sampler) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, p := range s.d.procs {
		wg.Go(func() { s.region(ctx, p) })
	}
	wg.Wait()
}

func (s *sampler) region(ctx context.Context, p *proc) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	own := p.replica
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ok, epoch := p.sampleState()
		if !ok {
			continue
		}
		at := time.Since(s.start)
		got := make(map[key]PN, len(s.keys))
		for _, k := range s.keys {
			rd, err := p.client.read(ctx, k, time.Second)
			if err != nil || rd.Partial {
				continue // a partial read of a split item lacks the entries of the parts left out
			}
			got[k] = rd.Replicas[own]
		}
		views := make(map[string]api.Budget, len(s.budgets))
		for _, b := range s.budgets {
			v, err := p.client.readBudget(ctx, b, time.Second)
			if err != nil {
				continue
			}
			views[b] = v
		}
		// A sample taken while the process was killed, or restarted, is
		// not trusted either way.
		if ok2, epoch2 := p.sampleState(); !ok2 || epoch2 != epoch {
			continue
		}
		s.record(p.view, own, at, got)
		s.recordBudgets(p.view, at, views)
	}
}

// recordBudgets checks one region's views of the budgets.
func (s *sampler) recordBudgets(region string, at time.Duration, views map[string]api.Budget) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range slices.Sorted(maps.Keys(views)) {
		s.budgetSeen++
		if v := budgetViolation(views[k]); v != "" {
			s.violations = append(s.violations, Violation{Kind: KindBudgets, Region: region, Key: budgetName(k),
				Detail: fmt.Sprintf("the view at %.1fs: %s (rights %v)", at.Seconds(), v, views[k].Rights)})
		}
	}
}

func (s *sampler) record(region, own string, at time.Duration, got map[key]PN) {
	s.mu.Lock()
	defer s.mu.Unlock()
	last := s.last[region]
	if last == nil {
		last = map[key]sample{}
		s.last[region] = last
	}
	for k, e := range got {
		s.samples++
		if prev, ok := last[k]; ok && (e.P < prev.own.P || e.N < prev.own.N) {
			s.violations = append(s.violations, Violation{Kind: KindRollback, Region: region, Key: k.String(),
				Detail: fmt.Sprintf("%s's own entry went from {p:%d n:%d} at %.1fs to {p:%d n:%d} at %.1fs",
					own, prev.own.P, prev.own.N, prev.at.Seconds(), e.P, e.N, at.Seconds())})
		}
		last[k] = sample{own: e, at: at}
	}
}

// result returns how many entries and budget views were sampled and the
// violations seen.
func (s *sampler) result() (samples, budgets int, vs []Violation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples, s.budgetSeen, append([]Violation(nil), s.violations...)
}
