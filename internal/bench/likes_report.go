package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"
)

// likesReporter writes `tallyd bench likes` results in one of three
// formats. The table is for people; csv and json are for scripts such as
// scripts/bench-peers.sh, so they keep stdout to the data alone and send
// the description to stderr.
type likesReporter struct {
	cfg    likesBenchConfig
	target string
	out    io.Writer // the results
	info   io.Writer // the description: out for the table, stderr otherwise
	csv    *csv.Writer
}

func newLikesReporter(cfg likesBenchConfig, target string, out, logOut io.Writer) *likesReporter {
	r := &likesReporter{cfg: cfg, target: target, out: out, info: out}
	if cfg.Format != "table" {
		r.info = logOut
	}
	if cfg.Format == "csv" {
		r.csv = csv.NewWriter(out)
	}
	return r
}

// Fixed widths, since each row prints as soon as its level ends.
const likesTableRow = "%11v %9v %7v %9v %8v %9v %9v %9v %9v\n"

// likesCSVHeader names the csv columns; likesLevelReport has the same
// fields under the same names for json.
var likesCSVHeader = []string{"concurrency", "requests", "errors", "counted", "seconds",
	"ok_per_sec", "p50_ms", "p99_ms", "p999_ms", "max_ms", "mean_ms"}

// begin says what is measured and starts the table or the csv header.
func (r *likesReporter) begin() error {
	cfg := r.cfg
	what := fmt.Sprintf("item %q", cfg.Item)
	if cfg.Items > 1 {
		dist := fmt.Sprintf("Zipf s=%g", cfg.Zipf)
		if cfg.Zipf == 0 {
			dist = "uniform"
		}
		what = fmt.Sprintf("%d items %s-0..%s-%d (%s)", cfg.Items, cfg.Item, cfg.Item, cfg.Items-1, dist)
	}
	who := "{new user}"
	if cfg.Users > 0 {
		who = fmt.Sprintf("{one of %d users}", cfg.Users)
	}
	req := "PUT /v1/likes/{item}/" + who
	if cfg.Read {
		req = "GET /v1/likes/{item} (each item liked once first)"
	}
	fmt.Fprintf(r.info, "bench likes: %s on %s\n  %s, %s per level\n\n", req, what, r.target, cfg.Duration)
	switch cfg.Format {
	case "table":
		_, err := fmt.Fprintf(r.out, likesTableRow, "concurrency", "requests", "errors", "counted", "ok/s", "p50", "p99", "p999", "max")
		return err
	case "csv":
		if err := r.csv.Write(likesCSVHeader); err != nil {
			return fmt.Errorf("bench likes: csv: %w", err)
		}
		r.csv.Flush()
		return r.csv.Error()
	}
	return nil
}

// level reports one finished level (json waits for the end).
func (r *likesReporter) level(res *likesLevelResult) error {
	switch r.cfg.Format {
	case "table":
		h := &res.Latency
		_, err := fmt.Fprintf(r.out, likesTableRow, res.Concurrency, res.Requests, res.Errors, res.Counted,
			fmt.Sprintf("%.0f", res.OKPerSec()), ms(h.Quantile(0.50)), ms(h.Quantile(0.99)), ms(h.Quantile(0.999)), ms(h.Max()))
		return err
	case "csv":
		l := newLikesLevelReport(res)
		f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
		i := func(v int64) string { return strconv.FormatInt(v, 10) }
		if err := r.csv.Write([]string{strconv.Itoa(l.Concurrency), i(l.Requests), i(l.Errors), i(l.Counted),
			f(l.Seconds), f(l.OKPerSec), f(l.P50Ms), f(l.P99Ms), f(l.P999Ms), f(l.MaxMs), f(l.MeanMs)}); err != nil {
			return fmt.Errorf("bench likes: csv: %w", err)
		}
		r.csv.Flush()
		return r.csv.Error()
	}
	return nil
}

// end writes the json document, and the errors seen, where people read.
func (r *likesReporter) end(results []*likesLevelResult) error {
	for _, res := range results {
		if res.Errors > 0 {
			fmt.Fprintf(r.info, "concurrency %d: %d errors; first: %s\n", res.Concurrency, res.Errors, res.FirstError)
		}
	}
	if r.cfg.Format != "json" {
		return nil
	}
	doc := likesReport{
		Target: r.target, Item: r.cfg.Item, Items: r.cfg.Items, Users: r.cfg.Users,
		DurationSeconds: r.cfg.Duration.Seconds(), Levels: []likesLevelReport{},
	}
	if r.cfg.Items > 1 {
		doc.Zipf = r.cfg.Zipf
	}
	for _, res := range results {
		doc.Levels = append(doc.Levels, newLikesLevelReport(res))
	}
	enc := json.NewEncoder(r.out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("bench likes: json: %w", err)
	}
	return nil
}

// likesReport is the json output.
type likesReport struct {
	Target          string             `json:"target"`
	Item            string             `json:"item"`
	Items           int                `json:"items"`
	Zipf            float64            `json:"zipf,omitempty"`
	Users           int64              `json:"users"` // 0: a new user per like
	DurationSeconds float64            `json:"duration_seconds"`
	Levels          []likesLevelReport `json:"levels"`
}

// likesLevelReport is one level in json and csv. Latencies are of the
// successful requests, in milliseconds, rounded up to the histogram's
// bucket (within 1.6%).
type likesLevelReport struct {
	Concurrency int     `json:"concurrency"`
	Requests    int64   `json:"requests"`
	Errors      int64   `json:"errors"`
	Counted     int64   `json:"counted"`
	Seconds     float64 `json:"seconds"`
	OKPerSec    float64 `json:"ok_per_sec"`
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`
	P999Ms      float64 `json:"p999_ms"`
	MaxMs       float64 `json:"max_ms"`
	MeanMs      float64 `json:"mean_ms"`
	FirstError  string  `json:"first_error,omitempty"`
}

func newLikesLevelReport(res *likesLevelResult) likesLevelReport {
	h := &res.Latency
	msf := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return likesLevelReport{
		Concurrency: res.Concurrency, Requests: res.Requests, Errors: res.Errors, Counted: res.Counted,
		Seconds: res.Elapsed.Seconds(), OKPerSec: res.OKPerSec(),
		P50Ms: msf(h.Quantile(0.50)), P99Ms: msf(h.Quantile(0.99)), P999Ms: msf(h.Quantile(0.999)),
		MaxMs: msf(h.Max()), MeanMs: msf(h.Mean()), FirstError: res.FirstError,
	}
}
