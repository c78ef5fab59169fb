package bench

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// budgetReporter writes `tallyd bench budget` results: a table on stdout
// and, with --csv, a row per level to a file, in the columns that
// scripts/bench-budget.sh also writes for PostgreSQL.
type budgetReporter struct {
	cfg    budgetBenchConfig
	target string
	out    io.Writer
	file   *os.File // --csv, nil without
	csv    *csv.Writer
}

// newBudgetReporter creates cfg.CSV, if set, before anything runs.
func newBudgetReporter(cfg budgetBenchConfig, target string, out io.Writer) (*budgetReporter, error) {
	r := &budgetReporter{cfg: cfg, target: target, out: out}
	if cfg.CSV != "" {
		f, err := os.Create(cfg.CSV)
		if err != nil {
			return nil, fmt.Errorf("bench budget: --csv: %w", err)
		}
		r.file, r.csv = f, csv.NewWriter(f)
	}
	return r, nil
}

// budgetCSVHeader names the csv columns.
var budgetCSVHeader = []string{"system", "flavor", "clients", "spends_per_s", "p50_ms", "p99_ms", "overspend", "refused"}

// Fixed widths, since each row prints as soon as its level ends.
const budgetTableRow = "%7v %9v %9v %8v %8v %8v %9v %9v %6v %12v %9v\n"

// begin says what is measured and starts the table and the csv.
func (r *budgetReporter) begin() error {
	cfg := r.cfg
	mode := fmt.Sprintf("for %s per level", cfg.Duration)
	if cfg.Exhaust {
		mode = fmt.Sprintf("until every client is told budget_exhausted (at most %s per level)", cfg.Duration)
	}
	fmt.Fprintf(r.out, "bench budget: POST /v1/budgets/{key}/spend {\"by\":1} in a loop per client, %s\n", mode)
	fmt.Fprintf(r.out, "  a new budget of %d per level, granted at the first URL; rights_elsewhere retried after %s\n", cfg.Budget, cfg.Backoff)
	fmt.Fprintf(r.out, "  %s\n\n", r.target)
	if _, err := fmt.Fprintf(r.out, budgetTableRow, "clients", "spent", "spends/s", "p50", "p99", "max",
		"exhausted", "elsewhere", "errors", "remaining", "overspend"); err != nil {
		return err
	}
	if r.csv == nil {
		return nil
	}
	return r.writeCSV(budgetCSVHeader)
}

func (r *budgetReporter) writeCSV(row []string) error {
	if err := r.csv.Write(row); err != nil {
		return fmt.Errorf("bench budget: csv: %w", err)
	}
	r.csv.Flush()
	if err := r.csv.Error(); err != nil {
		return fmt.Errorf("bench budget: csv: %w", err)
	}
	return nil
}

// level reports one finished level.
func (r *budgetReporter) level(res *budgetLevelResult) error {
	h := &res.Latency
	if _, err := fmt.Fprintf(r.out, budgetTableRow, res.Clients, res.Spent, fmt.Sprintf("%.0f", res.SpendsPerSec()),
		ms(h.Quantile(0.50)), ms(h.Quantile(0.99)), ms(h.Max()), res.Exhausted, res.Elsewhere, res.Errors+res.OtherRefused,
		res.End.Remaining, res.Overspend()); err != nil {
		return err
	}
	if r.csv == nil {
		return nil
	}
	return r.writeCSV(budgetCSVRow(r.cfg.System, r.cfg.flavor(), res))
}

// budgetCSVRow is res as a csv row: latencies in milliseconds, rounded
// up to the histogram's bucket (within 1.6%).
func budgetCSVRow(system, flavor string, res *budgetLevelResult) []string {
	msf := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64)
	}
	return []string{system, flavor, strconv.Itoa(res.Clients), strconv.FormatFloat(res.SpendsPerSec(), 'f', 1, 64),
		msf(res.Latency.Quantile(0.50)), msf(res.Latency.Quantile(0.99)),
		strconv.FormatInt(res.Overspend(), 10), strconv.FormatInt(res.Refused(), 10)}
}

// end explains what the rows do not show: failures, how long agreement
// took, and for --exhaust whether every unit was spent exactly once.
func (r *budgetReporter) end(results []*budgetLevelResult) error {
	fmt.Fprintln(r.out)
	for _, res := range results {
		fmt.Fprintf(r.out, "%d clients: budget %s; %d spent and acknowledged, the budget says %d (granted %d, remaining %d); regions agreed %s after the last spend\n",
			res.Clients, res.Key, res.Spent, res.End.used()-res.Start.used(), res.End.Granted, res.End.Remaining, ms(res.Settled))
		if res.Errors > 0 || res.OtherRefused > 0 {
			fmt.Fprintf(r.out, "  %d requests failed or were refused otherwise; their spends may or may not have happened, so overspend is not exact; first: %s\n",
				res.Errors+res.OtherRefused, res.FirstError)
		}
		if res.Duplicates > 0 {
			fmt.Fprintf(r.out, "  %d answers said duplicate, though no idempotency key was sent\n", res.Duplicates)
		}
		if res.Abandoned > 0 {
			fmt.Fprintf(r.out, "  %d spends were still being retried after rights_elsewhere when the level ended\n", res.Abandoned)
		}
		switch {
		case r.cfg.Exhaust && res.ClientsExhausted < res.Clients:
			fmt.Fprintf(r.out, "  only %d of %d clients were told budget_exhausted within %s\n", res.ClientsExhausted, res.Clients, r.cfg.Duration)
		case r.cfg.Exhaust && res.Spent == r.cfg.Budget && res.End.Remaining == 0:
			fmt.Fprintf(r.out, "  exhausted: exactly the %d granted were spent\n", r.cfg.Budget)
		case r.cfg.Exhaust:
			fmt.Fprintf(r.out, "  exhausted, but %d spends succeeded of %d granted\n", res.Spent, r.cfg.Budget)
		case res.Exhausted > 0:
			fmt.Fprintf(r.out, "  the budget ran out before the level's end: give a larger --budget\n")
		}
	}
	return nil
}

// close closes the csv file.
func (r *budgetReporter) close() error {
	if r.file == nil {
		return nil
	}
	err := r.file.Close()
	r.file = nil
	if err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("bench budget: csv: %w", err)
	}
	return nil
}
