package dashboard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/client"
)

// The chart and the trending list read the regions' window routes: the
// chart merges every region's GET /v1/series, the trending list is one
// region's GET /v1/trending with each item's split by region.

// SeriesLine is one region's line of the chart.
type SeriesLine struct {
	Region string `json:"region"`
	// Source is the region whose replica's view the line is: the region
	// itself, or (when it could not be read) the first region that could.
	Source string `json:"source"`
	// Values are the net changes booked by the region's replicas, one per
	// time; null where the source's view has no point at that time (its
	// read ended a step earlier than the newest one's).
	Values []*int64 `json:"values"`
}

// SeriesView answers GET /api/series: one line per region on one time
// grid, each region's line read from that region's own replica, which
// knows its own bookings first (and still does when a link is cut).
type SeriesView struct {
	At    time.Time `json:"at"`
	Kind  string    `json:"kind"`
	Key   string    `json:"key"`
	Step  string    `json:"step"`
	From  time.Time `json:"from"`
	To    time.Time `json:"to"`
	Times []int64   `json:"times"` // each point's start, unix ms
	// Total is the sum of the lines per point, null where a line is.
	Total []*int64     `json:"total"`
	Lines []SeriesLine `json:"lines"`
	// Approx: some line may still move: a source said approx, or a line
	// is another region's view of a region that could not be read.
	Approx bool `json:"approx"`
	// Final: every source said final and Approx is false.
	Final bool `json:"final"`
	// Errors are the regions that could not be read, by region.
	Errors map[string]string `json:"errors,omitempty"`
}

// seriesRead is one region's answer to GET /v1/series, or why there is
// none.
type seriesRead struct {
	s   api.Series
	err error
}

// GET /api/series?last=10m&step=10s[&kind=likes][&key=*]: every region's
// GET /v1/series...&by=region, read concurrently and merged by mergeSeries.
func (d *Dashboard) series(w http.ResponseWriter, r *http.Request) {
	kind := formDefault(r, "kind", "likes")
	if kind != "likes" && kind != "counters" {
		dashError(w, http.StatusBadRequest, "kind %q: want likes or counters", kind)
		return
	}
	key := formDefault(r, "key", "*")
	q := client.SeriesQuery{Kind: client.Kind(kind), Keys: []string{key}, SeriesOptions: client.SeriesOptions{
		Range: client.Range{Last: formDefault(r, "last", "10m")}, Step: formDefault(r, "step", "10s"), ByRegion: true}}
	reads := make([]seriesRead, len(d.cfg.Regions))
	var wg sync.WaitGroup
	for i := range d.cfg.Regions {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(r.Context(), dashReadTimeout)
			defer cancel()
			s, err := d.regions[i].api.Series(ctx, q)
			if err != nil {
				err = regionError(err)
			}
			reads[i].s, reads[i].err = s, err
		})
	}
	wg.Wait()
	out, err := mergeSeries(d.cfg.Regions, reads)
	if err != nil {
		dashError(w, readsStatus(err), "%s", strings.ReplaceAll(err.Error(), "\n", "; "))
		return
	}
	out.At = time.Now().UTC()
	out.Key = key
	dashJSON(w, http.StatusOK, out)
}

// mergeSeries merges the regions' reads (reads[i] is targets[i]'s) into
// one grid: the times of the read that reaches furthest. A region's line
// comes from its own read (its first replica's that succeeded: one line a
// region, however many replicas it has); if none did, from the first
// read that did (and the view is approx). Regions that only appear in some view (a
// replica of an unwatched region, or "unknown") come from the first view
// that has them. It fails if no read did, with the reads' errors joined.
func mergeSeries(targets []Target, reads []seriesRead) (SeriesView, error) {
	out := SeriesView{Times: []int64{}, Total: []*int64{}, Lines: []SeriesLine{}}
	grid := -1
	var errs []error
	fail := func(i int, err error) {
		reads[i].err = err
		if out.Errors == nil {
			out.Errors = map[string]string{}
		}
		out.Errors[targets[i].Region] = err.Error()
		errs = append(errs, fmt.Errorf("%s: %w", targets[i].Region, err))
	}
	for i := range reads {
		if reads[i].err == nil {
			reads[i].err = checkSeries(reads[i].s)
		}
		if err := reads[i].err; err != nil {
			fail(i, err)
			continue
		}
		if grid < 0 || lastTime(reads[i].s) > lastTime(reads[grid].s) {
			grid = i
		}
	}
	if grid < 0 {
		if len(errs) == 0 {
			return out, errors.New("no regions")
		}
		return out, errors.Join(errs...)
	}
	g := reads[grid].s
	out.Kind, out.Step, out.From, out.To = g.Kind, g.Step, g.From, g.To
	out.Times = g.Times
	for i := range reads {
		if reads[i].err == nil && reads[i].s.Step != g.Step {
			fail(i, fmt.Errorf("series: step %s, not %s as %s's", reads[i].s.Step, g.Step, targets[grid].Region))
		}
	}

	used := map[int]bool{}
	line := func(name string, src int) SeriesLine {
		used[src] = true
		s := reads[src].s
		at := make(map[int64]int, len(s.Times))
		for j, t := range s.Times {
			at[t] = j
		}
		vals := s.Series[0].Regions[name] // none: nothing booked there
		l := SeriesLine{Region: name, Source: targets[src].Region, Values: make([]*int64, len(out.Times))}
		for k, t := range out.Times {
			j, ok := at[t]
			if !ok {
				continue
			}
			v := int64(0)
			if vals != nil {
				v = vals[j]
			}
			l.Values[k] = &v
		}
		return l
	}
	firstRead := func(has func(api.Series) bool) int {
		for i := range reads {
			if reads[i].err == nil && has(reads[i].s) {
				return i
			}
		}
		return -1
	}
	// One line a region, however many of its replicas are watched (a
	// sharded region's every replica answers the whole region's series:
	// a line each would count it once a replica).
	named := map[string]bool{}
	for _, t := range targets {
		if named[t.Region] {
			continue
		}
		named[t.Region] = true
		src := -1
		for j, u := range targets {
			if u.Region == t.Region && reads[j].err == nil {
				src = j
				break
			}
		}
		if src < 0 {
			src = firstRead(func(api.Series) bool { return true })
			out.Approx = true
		}
		out.Lines = append(out.Lines, line(t.Region, src))
	}
	var extra []string
	for i := range reads {
		if reads[i].err != nil {
			continue
		}
		for name := range reads[i].s.Series[0].Regions {
			if !named[name] {
				named[name] = true
				extra = append(extra, name)
			}
		}
	}
	slices.Sort(extra)
	for _, name := range extra {
		out.Lines = append(out.Lines, line(name, firstRead(func(s api.Series) bool { return s.Series[0].Regions[name] != nil })))
	}

	out.Total = make([]*int64, len(out.Times))
	for k := range out.Times {
		sum, ok := int64(0), true
		for _, l := range out.Lines {
			if l.Values[k] == nil {
				ok = false
				break
			}
			sum += *l.Values[k]
		}
		if ok {
			out.Total[k] = &sum
		}
	}
	final := true
	for i := range used {
		out.Approx = out.Approx || reads[i].s.Approx
		final = final && reads[i].s.Final
	}
	out.Final = final && !out.Approx
	return out, nil
}

// checkSeries rejects an answer whose arrays do not line up.
func checkSeries(s api.Series) error {
	if len(s.Series) != 1 {
		return fmt.Errorf("series: %d keys, want 1", len(s.Series))
	}
	if len(s.Series[0].Values) != len(s.Times) {
		return fmt.Errorf("series: %d values for %d times", len(s.Series[0].Values), len(s.Times))
	}
	for name, vals := range s.Series[0].Regions {
		if len(vals) != len(s.Times) {
			return fmt.Errorf("series: region %s has %d values for %d times", name, len(vals), len(s.Times))
		}
	}
	return nil
}

func lastTime(s api.Series) int64 {
	if len(s.Times) == 0 {
		return 0
	}
	return s.Times[len(s.Times)-1]
}

// readsStatus is the status for reads that all failed: the status the
// regions that answered gave if they all refused the request itself with
// the same 4xx (a bad step: every region would), else 502.
func readsStatus(err error) int {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	status := 0
	for _, e := range errs {
		var st *statusError
		if !errors.As(e, &st) {
			continue // unreachable: says nothing about the request
		}
		if st.status < 400 || st.status >= 500 || status != 0 && st.status != status {
			return http.StatusBadGateway
		}
		status = st.status
	}
	if status == 0 {
		return http.StatusBadGateway
	}
	return status
}

// TrendingRow is one item of the trending list.
type TrendingRow struct {
	Item  string `json:"item"`
	Count int64  `json:"count"` // the trending route's exact net change
	// Regions is the item's net change over the same range by the region
	// that booked it (its window route, read just after); absent if that
	// read failed, with the reason in Error.
	Regions map[string]int64 `json:"regions,omitempty"`
	Error   string           `json:"error,omitempty"`
	// Meta is the item's event type (GET /v1/types), absent if none.
	Meta *api.TypeMeta `json:"meta,omitempty"`
}

// TrendingView answers GET /api/trending.
type TrendingView struct {
	At time.Time `json:"at"`
	// Source is the region whose replica answered: the asked region's
	// first, else the first region in order that answers.
	Source string        `json:"source"`
	Kind   string        `json:"kind"`
	Window string        `json:"window"`
	Region string        `json:"region,omitempty"` // ranks what this region booked; "": all
	From   *time.Time    `json:"from,omitempty"`
	To     *time.Time    `json:"to,omitempty"`
	Items  []TrendingRow `json:"items"`
	// Approx: the source or an item's split said approx. Final: the
	// source said final, and nothing is approx.
	Approx     bool `json:"approx"`
	Final      bool `json:"final"`
	Candidates int  `json:"candidates"`
	Capacity   int  `json:"capacity"`
	// Regions is the order of the split's columns: the watched regions,
	// then any other region a split names.
	Regions []string `json:"regions"`
	// Errors are the regions that were tried and failed before Source.
	Errors map[string]string `json:"errors,omitempty"`
}

// GET /api/trending?window=10m&n=10[&region=eu][&kind=likes|counters]:
// one region's GET /v1/trending, each item split by region through
// GET /v1/{kind}/{item}/window over the list's range.
func (d *Dashboard) trending(w http.ResponseWriter, r *http.Request) {
	kind := formDefault(r, "kind", "likes")
	if kind != "likes" && kind != "counters" {
		dashError(w, http.StatusBadRequest, "kind %q: want likes or counters", kind)
		return
	}
	zone := r.FormValue("region")
	order := slices.Clone(d.cfg.Regions)
	if zone != "" {
		i := slices.IndexFunc(order, func(t Target) bool { return t.Region == zone })
		if i < 0 {
			d.region(w, r) // answers 404, naming the regions
			return
		}
		// The region itself first: it knows its own bookings first.
		order = append(append([]Target{order[i]}, order[:i]...), order[i+1:]...)
	}
	n, ok := formInt(w, r, "n", 10, 1, math.MaxInt32)
	if !ok {
		return
	}
	q := client.TrendingQuery{Kind: client.Kind(kind), Window: formDefault(r, "window", "10m"), N: n, Region: zone, Meta: true}
	out := TrendingView{Kind: kind, Window: q.Window, Region: zone, Items: []TrendingRow{}}
	var tr api.Trending
	var src Target
	var srcAPI *client.Client
	for _, reg := range order {
		c := d.regions[slices.IndexFunc(d.cfg.Regions, func(t Target) bool { return t == reg })].api
		ctx, cancel := context.WithTimeout(r.Context(), dashReadTimeout)
		var err error
		tr, err = c.Trending(ctx, q)
		cancel()
		if err != nil {
			err = regionError(err)
		}
		var st *statusError
		if errors.As(err, &st) && st.status >= 400 && st.status < 500 {
			// Refused as asked (a bad window, n): another region would too.
			dashError(w, st.status, "%s: %v", reg.Region, err)
			return
		}
		if err != nil {
			if out.Errors == nil {
				out.Errors = map[string]string{}
			}
			out.Errors[reg.Region] = err.Error()
			continue
		}
		src, srcAPI = reg, c
		break
	}
	if src.URL == "" {
		var errs []string
		for _, reg := range order {
			errs = append(errs, reg.Region+": "+out.Errors[reg.Region])
		}
		dashError(w, http.StatusBadGateway, "no region answered: %s", strings.Join(errs, "; "))
		return
	}
	out.Source, out.From, out.To = src.Region, tr.From, tr.To
	out.Approx, out.Candidates, out.Capacity = tr.Approx, tr.Candidates, tr.Capacity
	out.Items = make([]TrendingRow, len(tr.Items))
	for i, it := range tr.Items {
		out.Items[i] = TrendingRow{Item: it.Item, Count: it.Count, Meta: it.Meta}
	}
	// The split: each item's window over the list's own range (none for
	// window=all, which has no range).
	if tr.From != nil && tr.To != nil {
		rng := client.Range{From: *tr.From, To: *tr.To}
		window := srcAPI.LikesWindow
		if kind == string(client.KindCounters) {
			window = srcAPI.CounterWindow
		}
		var (
			mu sync.Mutex // protects out.Approx
			wg sync.WaitGroup
		)
		for i := range out.Items {
			row := &out.Items[i]
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(r.Context(), dashReadTimeout)
				win, err := window(ctx, row.Item, rng)
				cancel()
				if err != nil {
					row.Error = regionError(err).Error()
					mu.Lock()
					out.Approx = true
					mu.Unlock()
					return
				}
				row.Regions = win.Regions
				if row.Regions == nil {
					row.Regions = map[string]int64{}
				}
				mu.Lock()
				out.Approx = out.Approx || win.Approx
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	out.Final = tr.Final && !out.Approx
	named := map[string]bool{}
	for _, t := range d.cfg.Regions {
		if !named[t.Region] { // a sharded region's replicas: one column
			named[t.Region] = true
			out.Regions = append(out.Regions, t.Region)
		}
	}
	var extra []string
	for _, row := range out.Items {
		for name := range row.Regions {
			if !named[name] {
				named[name] = true
				extra = append(extra, name)
			}
		}
	}
	slices.Sort(extra)
	out.Regions = append(out.Regions, extra...)
	out.At = time.Now().UTC()
	dashJSON(w, http.StatusOK, out)
}

// formDefault is the form value name, or def if it is empty.
func formDefault(r *http.Request, name, def string) string {
	if v := r.FormValue(name); v != "" {
		return v
	}
	return def
}
