// What a `tallyd bench events` mix measured (rates and the replica's
// costs) and the table of approximate counters' costs.

package bench

import (
	"fmt"
	"io"
	"time"
)

// eventsMixResult is one mix's outcome.
type eventsMixResult struct {
	Mix string
	// Approx: the run was on the approximate keys (--approx).
	Approx bool
	// Events is how many events were applied (acknowledged, durable);
	// loadResult's Counted how many changed a count: every incr, likes
	// with "changed":true.
	Events int64
	loadResult
	// Cost is what the run cost the in-process replica, and Value how
	// much its counters moved (with --approx; zero otherwise).
	Cost  benchCost
	Value int64
	// Total is the sum of the run's counters after it (with --approx):
	// what an approximate counter's error bound is relative to.
	Total int64
}

// Label names the run in the tables: the mix, and "~" for the
// approximate keys.
func (r *eventsMixResult) Label() string {
	if r.Approx {
		return r.Mix + "~"
	}
	return r.Mix
}

// benchCost is what the in-process replica wrote: commits (each one WAL
// fsync), WAL bytes, own entries handed to replication, and approximate
// increments written and skipped.
type benchCost struct {
	Commits, WALBytes         uint64
	Entries, Written, Skipped float64
}

// add folds another segment of the same mix and keys into r.
func (r *eventsMixResult) add(o *eventsMixResult) {
	r.Events += o.Events
	r.Requests += o.Requests
	r.Errors += o.Errors
	r.Units += o.Units
	r.Counted += o.Counted
	if r.FirstError == "" {
		r.FirstError = o.FirstError
	}
	r.Elapsed += o.Elapsed
	r.Latency.Merge(&o.Latency)
	r.Cost = benchCost{Commits: r.Cost.Commits + o.Cost.Commits, WALBytes: r.Cost.WALBytes + o.Cost.WALBytes,
		Entries: r.Cost.Entries + o.Cost.Entries, Written: r.Cost.Written + o.Cost.Written, Skipped: r.Cost.Skipped + o.Cost.Skipped}
	r.Value += o.Value
	r.Total = o.Total // the later segment's
}

func (c benchCost) sub(o benchCost) benchCost {
	return benchCost{Commits: c.Commits - o.Commits, WALBytes: c.WALBytes - o.WALBytes,
		Entries: c.Entries - o.Entries, Written: c.Written - o.Written, Skipped: c.Skipped - o.Skipped}
}

// EventsPerSec is the rate of applied events.
func (r *eventsMixResult) EventsPerSec() float64 { return perSec(r.Events, r.Elapsed) }

// CountedPerSec is the rate of counted events.
func (r *eventsMixResult) CountedPerSec() float64 { return perSec(r.Counted, r.Elapsed) }

func perSec(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// printApproxCosts prints, for each run, what it cost the replica and how
// far its counters ended from the increments sent (counted), relative to
// what was sent ("error") and to the counters' total ("of total", what an
// approximate counter's bound is relative to).
func printApproxCosts(out io.Writer, cfg eventsBenchConfig, results []*eventsMixResult) {
	fmt.Fprintf(out, "\nwhat each cost the replica (mix~: the same mix on keys under %q, approximate at %v):\n", approxPrefix, cfg.Approx)
	const row = "%5v %12v %9v %11v %10v %10v %9v %12v %12v %9v %9v\n"
	fmt.Fprintf(out, row, "mix", "events/s", "commits", "WAL bytes", "WAL B/ev", "entries", "skipped", "sent", "value", "error", "of total")
	for _, r := range results {
		if r.Mix == "like" {
			continue
		}
		skipped := "-"
		if r.Approx && r.Cost.Written+r.Cost.Skipped > 0 {
			skipped = fmt.Sprintf("%.1f%%", 100*r.Cost.Skipped/(r.Cost.Written+r.Cost.Skipped))
		}
		walPerEvent, errPct, totalPct := 0.0, "-", "-"
		if r.Events > 0 {
			walPerEvent = float64(r.Cost.WALBytes) / float64(r.Events)
		}
		if r.Counted > 0 {
			errPct = fmt.Sprintf("%+.3f%%", 100*float64(r.Value-r.Counted)/float64(r.Counted))
		}
		if r.Total > 0 {
			totalPct = fmt.Sprintf("%+.3f%%", 100*float64(r.Value-r.Counted)/float64(r.Total))
		}
		fmt.Fprintf(out, row, r.Label(), fmt.Sprintf("%.0f", r.EventsPerSec()), r.Cost.Commits, r.Cost.WALBytes,
			fmt.Sprintf("%.2f", walPerEvent), fmt.Sprintf("%.0f", r.Cost.Entries), skipped, r.Counted, r.Value, errPct, totalPct)
	}
}
