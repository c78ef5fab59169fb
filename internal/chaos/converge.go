package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tally-dev/tally/api"
	tallyclient "github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/internal/base/poll"
)

// pollRound is one round of reads of every key in every region; a region
// or key missing from reads could not be read.
type pollRound struct {
	at    time.Duration // since the final heal
	reads map[string]map[key]reading
}

// readAll reads every key in every region, the regions in parallel.
func readAll(ctx context.Context, procs []*proc, keys []key) map[string]map[key]reading {
	out := make(map[string]map[key]reading, len(procs))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(func() {
			m := make(map[key]reading, len(keys))
			for _, k := range keys {
				rd, err := p.client.read(ctx, k, 2*time.Second)
				if err != nil {
					continue
				}
				m[k] = rd
			}
			mu.Lock()
			out[p.view] = m
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// agreed reports whether every region read every key and all regions read
// the same values; clean whether also none said approx or unreconciled.
func agreed(reads map[string]map[key]reading, procs []*proc, keys []key) (same, clean bool) {
	clean = true
	for _, k := range keys {
		var first int64
		for i, p := range procs {
			rd, ok := reads[p.view][k]
			if !ok {
				return false, false
			}
			if i == 0 {
				first = rd.Value
			} else if rd.Value != first {
				return false, false
			}
			clean = clean && !rd.Approx && rd.Unreconciled == 0
		}
	}
	return true, clean
}

// unsettled says, for a message, which reads of a round said approx or
// unreconciled, or failed: the first few.
func unsettled(round pollRound, views []string, keys []key) string {
	var out []string
	for _, v := range views {
		for _, k := range keys {
			rd, ok := round.reads[v][k]
			switch {
			case !ok:
				out = append(out, v+" "+k.String()+" unread")
			case rd.Approx || rd.Unreconciled > 0:
				out = append(out, fmt.Sprintf("%s %s approx:%v unreconciled:%d", v, k, rd.Approx, rd.Unreconciled))
			}
		}
	}
	if len(out) == 0 {
		return "every read exact"
	}
	return fmt.Sprintf("%d reads not exact, e.g. %s", len(out), strings.Join(firstFew(out), "; "))
}

// sameValues reports whether region reads the same values in a and b.
func sameValues(a, b map[string]map[key]reading, region string, keys []key) bool {
	for _, k := range keys {
		x, ok1 := a[region][k]
		y, ok2 := b[region][k]
		if !ok1 || !ok2 || x.Value != y.Value {
			return false
		}
	}
	return true
}

// converge polls every key in every region until all regions have read the
// same values for stableFor, with at least one round in that window in
// which no read said approx, or until timeout. It returns every round, the
// round to check (the last clean round of the stable window, else the last
// round) and whether it converged.
func converge(ctx context.Context, procs []*proc, keys []key, healed time.Time, stableFor, timeout time.Duration) ([]pollRound, pollRound, bool) {
	deadline := time.Now().Add(timeout)
	var rounds []pollRound
	var stableSince time.Time
	var clean *pollRound
	for {
		reads := readAll(ctx, procs, keys)
		round := pollRound{at: time.Since(healed), reads: reads}
		rounds = append(rounds, round)
		same, isClean := agreed(reads, procs, keys)
		if same && len(rounds) > 1 && !sameValues(rounds[len(rounds)-2].reads, reads, procs[0].view, keys) {
			same = false // agreeing, but still moving
		}
		switch {
		case !same:
			stableSince, clean = time.Time{}, nil
		case stableSince.IsZero():
			stableSince = time.Now()
			fallthrough
		default:
			if isClean {
				c := round
				clean = &c
			}
		}
		if same && clean != nil && time.Since(stableSince) >= stableFor {
			return rounds, *clean, true
		}
		if time.Now().After(deadline) || !poll.Sleep(ctx, 100*time.Millisecond) {
			if clean != nil {
				return rounds, *clean, false
			}
			return rounds, round, false
		}
	}
}

// convergenceTimes returns, for each key with a model value, how long
// after the heal every region read that value and kept reading it to the
// end of polling, in ms (-1: not by the end).
func convergenceTimes(rounds []pollRound, procs []*proc, wants map[key]int64) map[key]float64 {
	out := make(map[key]float64, len(wants))
	for k, want := range wants {
		lastBad := -1
		for i, r := range rounds {
			for _, p := range procs {
				if rd, ok := r.reads[p.view][k]; !ok || rd.Value != want {
					lastBad = i
					break
				}
			}
		}
		switch {
		case len(rounds) == 0 || lastBad == len(rounds)-1:
			out[k] = -1
		default:
			out[k] = float64(rounds[lastBad+1].at.Microseconds()) / 1000
		}
	}
	return out
}

// readRecords reads, in every region, the record of every user that acted
// on an item, with a few requests in flight.
func readRecords(ctx context.Context, procs []*proc, users []userKey) map[userKey]map[string]bool {
	type job struct {
		uk userKey
		p  *proc
	}
	jobs := make(chan job)
	out := make(map[userKey]map[string]bool, len(users))
	for _, uk := range users {
		out[uk] = map[string]bool{}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for j := range jobs {
				liked, err := j.p.client.liked(ctx, j.uk.Item, j.uk.User, 2*time.Second)
				if err != nil {
					continue
				}
				mu.Lock()
				out[j.uk][j.p.view] = liked
				mu.Unlock()
			}
		})
	}
	for _, uk := range users {
		for _, p := range procs {
			jobs <- job{uk, p}
		}
	}
	close(jobs)
	wg.Wait()
	return out
}

// readLikers lists, in every region, the likers of every item: what the
// like lists say, to check against the records.
func readLikers(ctx context.Context, procs []*proc, items []string) map[string]map[string][]string {
	out := make(map[string]map[string][]string, len(items))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, item := range items {
		byRegion := map[string][]string{} // the goroutines touch only this, under mu
		out[item] = byRegion
		for _, p := range procs {
			wg.Go(func() {
				users, err := p.client.likers(ctx, item, 5*time.Second)
				if err != nil {
					return // absent: the check reports it
				}
				mu.Lock()
				byRegion[p.view] = users
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	return out
}

// perRegion calls read in every region at once, with a timeout, and
// returns what each answered; a region whose read failed is absent.
func perRegion[T any](ctx context.Context, procs []*proc, timeout time.Duration, read func(context.Context, *proc) (T, error)) map[string]*T {
	out := map[string]*T{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			v, err := read(ctx, p)
			if err != nil {
				return // absent: the check reports it
			}
			mu.Lock()
			out[p.view] = &v
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// readAudits runs every region's audit of its event log.
func readAudits(ctx context.Context, procs []*proc) map[string]*api.Audit {
	return perRegion(ctx, procs, 30*time.Second, func(ctx context.Context, p *proc) (api.Audit, error) {
		return p.client.api.Audit(ctx, tallyclient.AuditQuery{})
	})
}

// historySample is at most how many pairs' histories a run reads.
const historySample = 40

// readHistories reads, in every region, the like history of up to
// historySample of the pairs users touched.
func readHistories(ctx context.Context, procs []*proc, users []userKey) map[userKey]map[string]*api.History {
	out := map[userKey]map[string]*api.History{}
	step := max(1, len(users)/historySample)
	for i := 0; i < len(users); i += step {
		uk := users[i]
		out[uk] = perRegion(ctx, procs, 5*time.Second, func(ctx context.Context, p *proc) (api.History, error) {
			return p.client.api.History(ctx, uk.Item, uk.User, 0)
		})
	}
	return out
}
