package httpapi

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
	tallyroute "github.com/tally-dev/tally/route"
	"github.com/tally-dev/tally/shard"
)

// maxLast bounds last= and the span of from/to.
const maxLast = 10 * 366 * 24 * time.Hour

// parseSpan reads a duration: Go syntax ("90s", "1h30m") or whole days
// ("7d").
func parseSpan(field, s string) (time.Duration, error) {
	var d time.Duration
	var err error
	if n, ok := strings.CutSuffix(s, "d"); ok && n != "" && !strings.ContainsAny(n, "hms") {
		var days int64
		days, err = strconv.ParseInt(n, 10, 64)
		if err == nil && (days < 0 || days > 10*366) {
			err = errors.New("out of range")
		}
		d = time.Duration(days) * 24 * time.Hour
	} else {
		d, err = time.ParseDuration(s)
	}
	if err != nil || d <= 0 || d > maxLast {
		return 0, newError(http.StatusBadRequest, frontdoor.CodeBadTime, "%s %s is not a duration in (0, %v] such as 60s, 10m, 24h or 7d", field, quoteShort(s), maxLast)
	}
	return d, nil
}

// parseTime reads a point in time: RFC 3339, or unix milliseconds.
func parseTime(field, s string) (int64, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		if ms <= 0 || ms >= 1<<47 {
			return 0, newError(http.StatusBadRequest, frontdoor.CodeBadTime, "%s %d is out of range", field, ms)
		}
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.UnixMilli() <= 0 || t.UnixMilli() >= 1<<47 {
		return 0, newError(http.StatusBadRequest, frontdoor.CodeBadTime, "%s %s is not an RFC 3339 time or unix milliseconds", field, quoteShort(s))
	}
	return t.UnixMilli(), nil
}

// eventTime reads a client-given event time from a body: at most one of
// "at" and "timestamp", each an RFC 3339 string or a number of unix
// milliseconds (a number below 10^11 is unix seconds). Zero: none given.
func eventTime(at, timestamp json.RawMessage) (int64, error) {
	field, raw := "at", at
	switch {
	case at != nil && timestamp != nil:
		return 0, newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "give at or timestamp, not both")
	case timestamp != nil:
		field, raw = "timestamp", timestamp
	case at == nil:
		return 0, nil
	}
	return parseEventTime(field, raw)
}

func parseEventTime(field string, raw []byte) (int64, error) {
	if string(raw) == "null" {
		return 0, nil
	}
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, newError(http.StatusBadRequest, frontdoor.CodeBadTime, "%s is not a JSON string", field)
		}
		return eventTimeString(field, []byte(s))
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return 0, newError(http.StatusBadRequest, frontdoor.CodeBadTime, "%s must be an RFC 3339 string or a whole number of unix milliseconds", field)
	}
	return eventTimeNumber(field, n)
}

// eventTimeString reads an RFC 3339 event time.
func eventTimeString(field string, s []byte) (int64, error) {
	t, err := time.Parse(time.RFC3339Nano, string(s))
	if err != nil || t.UnixMilli() <= 0 || t.UnixMilli() >= 1<<47 {
		return 0, newError(http.StatusBadRequest, frontdoor.CodeBadTime, "%s %s is not an RFC 3339 time", field, quoteShort(string(s)))
	}
	return t.UnixMilli(), nil
}

// eventTimeNumber reads unix milliseconds, or unix seconds below 10^11.
func eventTimeNumber(field string, n int64) (int64, error) {
	if n <= 0 || n >= 1<<47 {
		return 0, newError(http.StatusBadRequest, frontdoor.CodeBadTime, "%s %d is out of range; want unix milliseconds (or seconds)", field, n)
	}
	if n < 1e11 {
		n *= 1000
	}
	return n, nil
}

// one returns the single value of a query parameter ("" if absent).
func one(q url.Values, name string) (string, error) {
	switch v := q[name]; len(v) {
	case 0:
		return "", nil
	case 1:
		return v[0], nil
	}
	return "", newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "give %s once", name)
}

// byRegionParam reads by=: absent, or "region" (split per region).
func byRegionParam(q url.Values) (bool, error) {
	by, err := one(q, "by")
	if err != nil {
		return false, err
	}
	if by != "" && by != "region" {
		return false, newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "by %s: only by=region", quoteShort(by))
	}
	return by == "region", nil
}

// rangeParams reads last=, from= and to=, each at most once, and refuses
// last together with from or to.
func rangeParams(q url.Values) (last, from, to string, err error) {
	if last, err = one(q, "last"); err != nil {
		return "", "", "", err
	}
	if from, err = one(q, "from"); err != nil {
		return "", "", "", err
	}
	if to, err = one(q, "to"); err != nil {
		return "", "", "", err
	}
	if last != "" && (from != "" || to != "") {
		return "", "", "", newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "give last, or from (and to), not both")
	}
	return last, from, to, nil
}

// fromTo reads from= and to= (to defaults to now) as bounds in unix ms.
func (s *Server) fromTo(from, to string) (fromMs, toMs int64, err error) {
	if fromMs, err = parseTime("from", from); err != nil {
		return 0, 0, err
	}
	toMs = s.rep.Now().UnixMilli()
	if to != "" {
		if toMs, err = parseTime("to", to); err != nil {
			return 0, 0, err
		}
	}
	if toMs <= fromMs || time.Duration(toMs-fromMs)*time.Millisecond > maxLast {
		return 0, 0, newError(http.StatusBadRequest, frontdoor.CodeBadTime, "to must be after from, by at most %v", maxLast)
	}
	return fromMs, toMs, nil
}

// windowRange reads last= or from=&to= (to defaults to now). With a step,
// last= is the latest whole steps, the current one included.
func (s *Server) windowRange(q url.Values, kind region.Kind, key string, step time.Duration) (fromMs, toMs int64, err error) {
	last, from, to, err := rangeParams(q)
	if err != nil {
		return 0, 0, err
	}
	switch {
	case last != "":
		d, err := parseSpan("last", last)
		if err != nil {
			return 0, 0, err
		}
		if step > 0 {
			st := step.Milliseconds()
			toMs = crdt.SlotStart(s.rep.Now().UnixMilli(), st/1000)*1000 + st
			return toMs - (d.Milliseconds()+st-1)/st*st, toMs, nil
		}
		fromMs, toMs, err := s.rep.Windows().Range(kind, key, d)
		return fromMs, toMs, windowErr(err)
	case from == "":
		return 0, 0, newError(http.StatusBadRequest, frontdoor.CodeMissingField, "give last (e.g. last=60s) or from (and to)")
	}
	return s.fromTo(from, to)
}

// regionOf maps replica ids to regions: this replica's, and its peers' as
// they announced them.
func (s *Server) regionOf() map[string]string {
	m := map[string]string{s.rep.ID(): s.rep.Region()}
	if s.cfg.Replication != nil {
		for _, p := range s.cfg.Replication.Peers() {
			if p.Region != "" {
				m[p.Replica] = p.Region
			}
		}
	}
	return m
}

func regionName(m map[string]string, replica string) string {
	if r, ok := m[replica]; ok {
		return r
	}
	return "unknown"
}

// windowKey reads the family and key of GET /v1/window.
func windowKey(q url.Values) (region.Kind, string, error) {
	kindName, err := one(q, "kind")
	if err != nil {
		return 0, "", err
	}
	kind, err := parseKind(kindName)
	if err != nil {
		return 0, "", err
	}
	key, err := one(q, "key")
	if err != nil {
		return 0, "", err
	}
	if key == "*" {
		key = ""
	}
	if key != "" {
		if err := checkID("key", key); err != nil {
			return 0, "", err
		}
	}
	return kind, key, nil
}

func parseKind(s string) (region.Kind, error) {
	switch s {
	case "likes", "":
		return region.KindLikes, nil
	case "counters":
		return region.KindCounters, nil
	}
	return 0, newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "kind %s is not likes or counters", quoteShort(s))
}

// GET /v1/counters/{key}/window, /v1/likes/{item}/window
func (s *Server) getKeyWindow(kind region.Kind, name string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		key, err := pathID(r, name)
		if err != nil {
			return err
		}
		if n := s.cfg.Hot.Parts(key); n > 0 && kind == region.KindLikes {
			return s.getHotWindow(w, r, key, n) // hot.go
		}
		return s.window(w, r, kind, key)
	}
}

// GET /v1/window?kind=likes|counters[&key=K]&last=60s: key absent or "*"
// is the family's total.
func (s *Server) getWindow(w http.ResponseWriter, r *http.Request) error {
	kind, key, err := windowKey(r.URL.Query())
	if err != nil {
		return err
	}
	if n := s.cfg.Hot.Parts(key); n > 0 && kind == region.KindLikes {
		return s.getHotWindow(w, r, key, n) // hot.go
	}
	return s.window(w, r, kind, key)
}

func (s *Server) window(w http.ResponseWriter, r *http.Request, kind region.Kind, key string) error {
	fromMs, toMs, err := s.windowRange(r.URL.Query(), kind, key, 0)
	if err != nil {
		return err
	}
	win, err := s.rep.Windows().Of(kind, key, fromMs, toMs)
	if err != nil {
		return windowErr(err)
	}
	sum := win.Sum()
	regions := s.regionOf()
	out := api.Window{Kind: kind.String(), Key: key, Value: sum.Value(), From: win.From.UTC(), To: win.To.UTC(),
		SlotWidth: fmtSpan(win.SlotWidth), Unreconciled: win.Unreconciled, Replicas: replicasJSON(sum.Vector),
		Regions: map[string]int64{}}
	for _, e := range sum.Vector {
		out.Regions[regionName(regions, e.Replica)] += e.Value()
	}
	moving := win.Unreconciled > 0 || s.staleFor(key)
	out.Approx, out.Final = moving, win.Closed && !moving
	if relErr := s.approxError(kind, key); relErr > 0 {
		out.Approx, out.Mode = true, api.ModeApprox
		if key != "" {
			counter, err := s.rep.Counters().Get(key)
			if err != nil {
				return err
			}
			out.Error = approxError(relErr, region.WindowStd(relErr, counter.Vector, sum.Vector))
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// approxError is the relative error target of a counter key's reads, 0
// for an exact counter and for likes. The counters' total ("") has the
// largest target of any rule: it adds up every counter.
func (s *Server) approxError(kind region.Kind, key string) float64 {
	if kind != region.KindCounters {
		return 0
	}
	return s.rep.Counters().ApproxError(key)
}

// fmtSpan writes a whole number of seconds compactly: "1s", "10m", "1h",
// "7d", "90s".
func fmtSpan(d time.Duration) string {
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}} {
		if d >= u.unit && d%u.unit == 0 {
			return strconv.FormatInt(int64(d/u.unit), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(d/time.Second), 10) + "s"
}

func windowErr(err error) error {
	if errors.Is(err, region.ErrNoWindow) {
		return newError(http.StatusNotFound, frontdoor.CodeNoWindow, "%s", strings.TrimPrefix(err.Error(), "region: "))
	}
	return err
}

// GET /v1/counters/{key}/series, /v1/likes/{item}/series
func (s *Server) getKeySeries(kind region.Kind, name string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		key, err := pathID(r, name)
		if err != nil {
			return err
		}
		if n := s.cfg.Hot.Parts(key); n > 0 && kind == region.KindLikes {
			return s.getHotSeries(w, r, key, n) // hot.go
		}
		return s.series(w, r, kind, []string{key})
	}
}

// maxSeriesKeys bounds the keys of one series call.
const maxSeriesKeys = 100

// GET /v1/series?kind=likes|counters&key=a&key=b&last=1h&step=1m[&by=region]
func (s *Server) getSeries(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	kindName, err := one(q, "kind")
	if err != nil {
		return err
	}
	kind, err := parseKind(kindName)
	if err != nil {
		return err
	}
	keys := q["key"]
	if len(keys) == 0 {
		keys = []string{"*"}
	}
	if len(keys) > maxSeriesKeys {
		return newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "%d keys, at most %d per call", len(keys), maxSeriesKeys)
	}
	for _, k := range keys {
		if k != "*" {
			if err := checkID("key", k); err != nil {
				return err
			}
		}
		if n := s.cfg.Hot.Parts(k); n > 0 && kind == region.KindLikes {
			if len(keys) > 1 {
				return newError(http.StatusBadRequest, frontdoor.CodeBadRequest,
					"item %s is split into parts (hot): ask for its series alone", quoteShort(k))
			}
			return s.getHotSeries(w, r, k, n) // hot.go
		}
	}
	return s.series(w, r, kind, keys)
}

func (s *Server) series(w http.ResponseWriter, r *http.Request, kind region.Kind, keys []string) error {
	q := r.URL.Query()
	stepStr, err := one(q, "step")
	if err != nil {
		return err
	}
	byRegion, err := byRegionParam(q)
	if err != nil {
		return err
	}
	first := keys[0]
	if first == "*" {
		first = ""
	}
	step := time.Minute
	if stepStr != "" {
		if step, err = parseSpan("step", stepStr); err != nil {
			return err
		}
	}
	if step < time.Second || step%time.Second != 0 {
		return newError(http.StatusBadRequest, frontdoor.CodeBadTime, "step %s must be whole seconds", quoteShort(stepStr))
	}
	fromMs, toMs, err := s.windowRange(q, kind, first, step)
	if err != nil {
		return err
	}
	if s.sharded(r) && !forwarded(r) && slices.ContainsFunc(keys, func(k string) bool { return k != "*" && !s.holds(k) }) {
		return s.seriesSpread(w, r, keys, fromMs, toMs) // keys of several shards
	}
	regions := s.regionOf()
	out := api.Series{Kind: kind.String(), Step: fmtSpan(step)}
	closed := true
	unreconciled := 0
	anyApprox := false
	for i, key := range keys {
		k := key
		if k == "*" {
			k = ""
		}
		win, err := s.rep.Windows().Series(kind, k, fromMs, toMs, step)
		if err != nil {
			return windowErr(err)
		}
		if i == 0 {
			out.From, out.To = win.From.UTC(), win.To.UTC()
			out.Times = make([]int64, len(win.Points))
			for j, p := range win.Points {
				out.Times[j] = p.Start.UnixMilli()
			}
		}
		closed = closed && win.Closed
		unreconciled += win.Unreconciled
		line := api.SeriesOfKey{Key: key, Values: make([]int64, len(win.Points))}
		if byRegion {
			line.Regions = map[string][]int64{}
		}
		for j, p := range win.Points {
			line.Values[j] = p.Value()
			if !byRegion {
				continue
			}
			for _, e := range p.Vector {
				name := regionName(regions, e.Replica)
				vals, ok := line.Regions[name]
				if !ok {
					vals = make([]int64, len(win.Points))
					line.Regions[name] = vals
				}
				vals[j] += e.Value()
			}
		}
		if relErr := s.approxError(kind, k); relErr > 0 {
			anyApprox = true
			line.Mode = api.ModeApprox
			if k != "" {
				if line.Error, err = s.seriesError(relErr, k, win.Points); err != nil {
					return err
				}
			}
		}
		out.Series = append(out.Series, line)
	}
	moving := unreconciled > 0 || s.cfg.Replication != nil && s.cfg.Replication.Stale()
	out.Approx, out.Final = moving || anyApprox, closed && !moving
	writeJSON(w, http.StatusOK, out)
	return nil
}

// seriesSpread is a series of keys on several shards, not all held here:
// each shard's keys asked of a holder (those held here, and the family's
// total, read here), all over the one range this replica computed, and
// the lines put back in the keys' order.
func (s *Server) seriesSpread(w http.ResponseWriter, r *http.Request, keys []string, fromMs, toMs int64) error {
	byShard := map[int][]int{} // shard (-1: read here) -> indexes of its keys
	for i, k := range keys {
		sh := -1
		if k != "*" && !s.holds(k) {
			sh = shard.Of(k)
		}
		byShard[sh] = append(byShard[sh], i)
	}
	type part struct {
		idx []int
		out api.Series
		err error
	}
	parts := make([]*part, 0, len(byShard))
	var wg sync.WaitGroup
	for sh, idx := range byShard {
		p := &part{idx: idx}
		parts = append(parts, p)
		q := r.URL.Query()
		q.Del("last")
		q.Del("key")
		q.Set("from", strconv.FormatInt(fromMs, 10))
		q.Set("to", strconv.FormatInt(toMs, 10))
		for _, i := range idx {
			q.Add("key", keys[i])
		}
		pr := r.Clone(r.Context())
		pr.URL.RawQuery = q.Encode()
		pr.RequestURI = ""
		wg.Go(func() {
			rec := NewRecorder()
			if sh < 0 {
				pr = pr.WithContext(WithForwarded(pr.Context())) // read here, not spread again
				s.ServeHTTP(rec, pr)
			} else if err := s.cfg.Shards.Forward(rec, pr, nil, sh); err != nil {
				p.err = forwardError(sh, err)
				return
			}
			if rec.Status() != http.StatusOK {
				var e api.Error
				if json.Unmarshal(rec.Body(), &e) != nil || e.Code == "" {
					e = api.Error{Code: frontdoor.CodeInternal, Error: fmt.Sprintf("a part of the series answered http %d", rec.Status())}
				}
				p.err = &apiError{Status: rec.Status(), Code: e.Code, Msg: e.Error}
				return
			}
			if err := json.Unmarshal(rec.Body(), &p.out); err != nil || len(p.out.Series) != len(p.idx) {
				p.err = fmt.Errorf("a part of the series: %d lines for %d keys (%v)", len(p.out.Series), len(p.idx), err)
			}
		})
	}
	wg.Wait()
	out := api.Series{Series: make([]api.SeriesOfKey, len(keys)), Final: true}
	for n, p := range parts {
		if p.err != nil {
			return p.err
		}
		if n == 0 {
			out.Kind, out.From, out.To, out.Step, out.Times = p.out.Kind, p.out.From, p.out.To, p.out.Step, p.out.Times
		} else if !slices.Equal(out.Times, p.out.Times) {
			return fmt.Errorf("the parts of a series have different points: %d and %d", len(out.Times), len(p.out.Times))
		}
		out.Approx = out.Approx || p.out.Approx
		out.Final = out.Final && p.out.Final
		for k, i := range p.idx {
			out.Series[i] = p.out.Series[k]
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// seriesError bounds each point of an approximate counter's series.
func (s *Server) seriesError(relErr float64, key string, points []region.Point) (*api.SeriesError, error) {
	counter, err := s.rep.Counters().Get(key)
	if err != nil {
		return nil, err
	}
	e := &api.SeriesError{Relative: relErr, Std: make([]int64, len(points)), Bound95: make([]int64, len(points))}
	for j, p := range points {
		pe := approxError(relErr, region.WindowStd(relErr, counter.Vector, p.Vector))
		e.Std[j], e.Bound95[j] = pe.Std, pe.Bound95
	}
	return e, nil
}

// GET /v1/trending?window=10m&n=10[&region=eu][&kind=likes|counters][&prefix=p]
// window=all ranks all-time counts; window=day is 24h.
func (s *Server) getTrending(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	get := func(name string) string { v, _ := one(q, name); return v }
	for _, name := range []string{"window", "n", "region", "kind", "prefix"} {
		if _, err := one(q, name); err != nil {
			return err
		}
	}
	meta, err := withMeta(q)
	if err != nil {
		return err
	}
	kind, err := parseKind(get("kind"))
	if err != nil {
		return err
	}
	window := get("window")
	if window == "" {
		window = "10m"
	}
	var last time.Duration
	switch window {
	case "all":
	case "day":
		last = 24 * time.Hour
	default:
		if last, err = parseSpan("window", window); err != nil {
			return err
		}
	}
	n := 10
	if v := get("n"); v != "" {
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > region.MaxTrendingN {
			return newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "n %s is not in 1..%d", quoteShort(v), region.MaxTrendingN)
		}
	}
	prefix := get("prefix")
	if prefix != "" && !crdt.ValidID(prefix) {
		return newError(http.StatusBadRequest, frontdoor.CodeBadID, "prefix must be %s", frontdoor.IDRule)
	}
	zone := get("region")
	tr, items, anyApprox, err := s.trending(kind, prefix, last, n, zone, meta)
	if err != nil {
		return err
	}
	out := api.Trending{Kind: kind.String(), Window: window, Region: zone, Prefix: prefix, Items: items,
		Candidates: tr.Candidates, Capacity: tr.Capacity}
	if !tr.AllTime {
		from, to := tr.From.UTC(), tr.To.UTC()
		out.From, out.To = &from, &to
	}
	if s.sharded(r) {
		// Each replica ranks the whole keys of its shards exactly, so a
		// key in the region's top n is in the top n of every replica
		// holding it. A split item's parts rank apart: each replica
		// sends those of its n split items of the largest sums, so the
		// sums here are exact unless a replica had more (then approx).
		replies, covered := s.ask(r.Context(), tallyroute.Question{Asked: tallyroute.AskTrending, Family: byte(kind),
			Key: prefix, Zone: zone, N: int64(n), SpanMs: last.Milliseconds()})
		var candidates int
		var approx bool
		out.Items, candidates, approx = s.trendingItems(replies, out.Items, meta)
		out.Candidates += candidates
		anyApprox = anyApprox || approx
		missing := shard.Count - covered.Len()
		out.Items = topItems(out.Items, n)
		out.Partial, out.MissingShards = missing > 0, missing
	} else if !gathered(r) {
		out.Items = topItems(out.Items, n) // the parts of a split item as the item
	}
	moving := s.cfg.Replication != nil && s.cfg.Replication.Stale()
	out.Approx, out.Final = moving || anyApprox || out.Partial, !tr.AllTime && tr.Closed && !moving && !out.Partial
	writeJSON(w, http.StatusOK, out)
	return nil
}

// trending ranks this replica's keys of family kind starting with
// prefix over the last `last` (0: all time), counting only the replicas
// of region zone ("": all; an unknown one is refused), and returns its
// top n keys unmerged, each approx if it is an approximate counter
// (with meta: its type's metadata), and whether any is, or its list of
// split items was cut.
func (s *Server) trending(kind region.Kind, prefix string, last time.Duration, n int, zone string,
	meta bool) (region.Trending, []api.TrendingItem, bool, error) {
	var only func(string) bool
	if zone != "" {
		regions := s.regionOf()
		known := false
		for _, g := range regions {
			known = known || g == zone
		}
		if !known {
			return region.Trending{}, nil, false, newError(http.StatusBadRequest, frontdoor.CodeUnknownZone,
				"no replica of region %s is known here", quoteShort(zone))
		}
		only = func(replica string) bool { return regions[replica] == zone }
	}
	tr, err := s.rep.Windows().Trending(kind, prefix, last, n, only)
	if err != nil {
		return region.Trending{}, nil, false, windowErr(err)
	}
	items := []api.TrendingItem{}
	anyApprox := tr.PartsCut
	for _, it := range tr.Items {
		approx := s.approxError(kind, it.Key) > 0
		anyApprox = anyApprox || approx
		ti := api.TrendingItem{Item: it.Key, Count: it.Count, Approx: approx}
		if meta {
			ti.Meta = s.typeMeta(it.Key)
		}
		items = append(items, ti)
	}
	return tr, items, anyApprox, nil
}

// topItems is the n items of the largest counts, each once (two holders
// of a key answer it alike; the larger is the later view), by count
// then item. The parts of a split item (crdt.PartName) are summed into
// the item: trending names items, never parts.
func topItems(items []api.TrendingItem, n int) []api.TrendingItem {
	best := map[string]api.TrendingItem{}
	for _, it := range items {
		if b, ok := best[it.Item]; !ok || it.Count > b.Count {
			best[it.Item] = it
		}
	}
	for name, it := range best {
		if item := crdt.ItemOf(name); item != name {
			delete(best, name)
			sum := best[item] // a split item's own vector holds nothing
			sum.Item, sum.Count, sum.Approx = item, sum.Count+it.Count, sum.Approx || it.Approx
			best[item] = sum
		}
	}
	out := make([]api.TrendingItem, 0, len(best))
	for _, it := range best {
		out = append(out, it)
	}
	slices.SortFunc(out, func(a, b api.TrendingItem) int {
		if a.Count != b.Count {
			return cmp.Compare(b.Count, a.Count)
		}
		return strings.Compare(a.Item, b.Item)
	})
	return out[:min(n, len(out))]
}

// eventTimeAPI narrows an event time's error to *apiError.
func eventTimeAPI(ms int64, err error) (int64, *apiError) {
	if err == nil {
		return ms, nil
	}
	var ae *apiError
	if errors.As(err, &ae) {
		return 0, ae
	}
	return 0, newError(http.StatusBadRequest, frontdoor.CodeBadTime, "%v", err)
}
