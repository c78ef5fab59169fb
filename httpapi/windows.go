package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
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

// errNoRange answers a window or series of no range.
func errNoRange() error {
	return newError(http.StatusBadRequest, frontdoor.CodeMissingField, "give last (e.g. last=60s) or from (and to)")
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
		return 0, 0, errNoRange()
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
	out, err := s.windowOf(w, r, kind, key)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// windowOf reads key's window (key "" the family's total) here, or at a
// holder of its shard (readsElsewhere, naming the holder on w), and
// renders it as the holder renders its own.
func (s *Server) windowOf(w http.ResponseWriter, r *http.Request, kind region.Kind, key string) (api.Window, error) {
	op, err := s.windowOp(r.URL.Query(), kind, key)
	if err != nil {
		return api.Window{}, err
	}
	ws, err := s.readWindows(w, r, key, op)
	if err != nil {
		return api.Window{}, err
	}
	if len(ws.Windows) != 1 || len(ws.Windows[0].Values) != 1 {
		return api.Window{}, fmt.Errorf("a window of %s read %d windows", quoteShort(key), len(ws.Windows))
	}
	win := &ws.Windows[0]
	out := api.Window{Kind: kind.String(), Key: key, Value: win.Sum.Value(), From: time.UnixMilli(win.FromMs).UTC(),
		To: time.UnixMilli(win.ToMs).UTC(), SlotWidth: fmtSpan(time.Duration(win.SlotWidthMs) * time.Millisecond),
		Unreconciled: int(win.Unreconciled), Replicas: replicasJSON(win.Sum), Regions: map[string]int64{}}
	for g, vs := range win.Regions {
		out.Regions[g] = vs[0]
	}
	moving := win.Unreconciled > 0 || win.StaleFor
	out.Approx, out.Final = moving, win.Closed && !moving
	if relErr := win.ApproxError; relErr > 0 {
		out.Approx, out.Mode = true, api.ModeApprox
		if key != "" {
			if len(win.Std) != 1 {
				return api.Window{}, fmt.Errorf("a window of approximate counter %s read without its error", quoteShort(key))
			}
			out.Error = approxError(relErr, win.Std[0])
		}
	}
	return out, nil
}

// windowOp is the OpWindow of key a query asks for, as windowRange reads
// it, but for last=: that is left to the replica reading the window (the
// holder, when the key is read elsewhere), which ranges it by the finest
// level of the key that covers it (region.Windows.Range).
func (s *Server) windowOp(q url.Values, kind region.Kind, key string) (tallyroute.Op, error) {
	last, from, to, err := rangeParams(q)
	if err != nil {
		return tallyroute.Op{}, err
	}
	if last != "" {
		d, err := parseSpan("last", last)
		if err != nil {
			return tallyroute.Op{}, err
		}
		return tallyroute.WindowLastOp(kind, key, d), nil
	}
	if from == "" {
		return tallyroute.Op{}, errNoRange()
	}
	fromMs, toMs, err := s.fromTo(from, to)
	if err != nil {
		return tallyroute.Op{}, err
	}
	return tallyroute.WindowOp(kind, key, fromMs, toMs), nil
}

// windowSource is what this replica reads windows and series from.
func (s *Server) windowSource() tallyroute.WindowSource {
	return tallyroute.WindowSource{Replica: s.rep, StaleFor: s.staleFor, Regions: s.regionOf,
		Stale: func() bool { return s.cfg.Replication != nil && s.cfg.Replication.Stale() }}
}

// readWindows answers op, a window or series of keys on name's shard,
// here, or at a holder of name's shard (readsElsewhere; the answer then
// names the holder on w): the request was parsed and checked here, and
// nothing of it but op leaves. name "" is the family's total, read here.
func (s *Server) readWindows(w http.ResponseWriter, r *http.Request, name string, op tallyroute.Op) (tallyroute.Windows, error) {
	if name == "" || !s.readsElsewhere(r, name) {
		ws, err := tallyroute.ReadWindows(s.windowSource(), &op)
		return ws, windowErr(err)
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	sh := shard.Of(name)
	ws, by, err := s.cfg.Shards.Windows(ctx, sh, op)
	if err != nil {
		return tallyroute.Windows{}, windowErr(s.holderError(w, sh, by, err))
	}
	w.Header().Set(ServedByHeader, by)
	return ws, nil
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
	groups := s.seriesGroups(r, keys)
	wins := make([]*tallyroute.Window, len(keys))
	stale, err := s.readSeries(w, r, keys, groups, tallyroute.SeriesOp(kind, nil, fromMs, toMs, step, byRegion), wins)
	if err != nil {
		return err
	}
	out := api.Series{Kind: kind.String(), Step: fmtSpan(step)}
	closed := true
	unreconciled := int64(0)
	anyApprox := false
	for i, key := range keys {
		win := wins[i]
		if i == 0 {
			out.From, out.To = time.UnixMilli(win.FromMs).UTC(), time.UnixMilli(win.ToMs).UTC()
			out.Times = make([]int64, len(win.Values))
			for j := range out.Times {
				out.Times[j] = win.FromMs + int64(j)*win.WidthMs
			}
		}
		closed = closed && win.Closed
		unreconciled += win.Unreconciled
		line := api.SeriesOfKey{Key: key, Values: win.Values}
		if byRegion {
			line.Regions = make(map[string][]int64, len(win.Regions))
			maps.Copy(line.Regions, win.Regions)
		}
		if relErr := win.ApproxError; relErr > 0 {
			anyApprox = true
			line.Mode = api.ModeApprox
			if key != "*" {
				if len(win.Std) != len(win.Values) {
					return fmt.Errorf("a series of approximate counter %s read without its error", quoteShort(key))
				}
				line.Error = &api.SeriesError{Relative: relErr, Std: make([]int64, len(win.Std)), Bound95: make([]int64, len(win.Std))}
				for j, std := range win.Std {
					pe := approxError(relErr, std)
					line.Error.Std[j], line.Error.Bound95[j] = pe.Std, pe.Bound95
				}
			}
		}
		out.Series = append(out.Series, line)
	}
	moving := unreconciled > 0 || stale
	out.Approx, out.Final = moving || anyApprox, closed && !moving
	writeJSON(w, http.StatusOK, out)
	return nil
}

// seriesGroup is the keys of a series read in one place: here (shard
// -1), or at a holder of shard sh.
type seriesGroup struct {
	sh  int
	idx []int // indexes of its keys in the series' keys
}

// seriesGroups splits a series' keys by where they are read: here (the
// keys of shards this replica holds or keeps, and the family's total
// "*"), or at a holder of each other shard, in the order of each group's
// first key. When every key is on one shard read elsewhere, the family's
// total is read there too: the holder answers it all.
func (s *Server) seriesGroups(r *http.Request, keys []string) []seriesGroup {
	var out []seriesGroup
	at := map[int]int{} // shard (-1: here) -> index in out
	for i, k := range keys {
		sh := -1
		if k != "*" && s.readsElsewhere(r, k) {
			sh = shard.Of(k)
		}
		g, ok := at[sh]
		if !ok {
			g = len(out)
			at[sh] = g
			out = append(out, seriesGroup{sh: sh})
		}
		out[g].idx = append(out[g].idx, i)
	}
	if len(out) == 2 {
		here, there := out[0], out[1]
		if here.sh >= 0 {
			here, there = there, here
		}
		if here.sh < 0 && !slices.ContainsFunc(here.idx, func(i int) bool { return keys[i] != "*" }) {
			there.idx = append(there.idx, here.idx...)
			slices.Sort(there.idx)
			return []seriesGroup{there}
		}
	}
	return out
}

// readSeries reads each group's keys of a series (seriesGroups) over the
// one range this replica computed, here or at a holder, all at once, and
// puts each key's window in wins by the key's index. stale: a replica
// read from has a peer unheard-from. A series read in one place names
// who read it on w; a series of several shards is this replica's.
func (s *Server) readSeries(w http.ResponseWriter, r *http.Request, keys []string, groups []seriesGroup,
	op tallyroute.Op, wins []*tallyroute.Window) (stale bool, err error) {
	got := make([]tallyroute.Windows, len(groups))
	errs := make([]error, len(groups))
	read := func(w http.ResponseWriter, g int) {
		grp := groups[g]
		names := make([]string, len(grp.idx))
		name := "" // the shard's: any of its keys; "": read here
		for j, i := range grp.idx {
			if keys[i] != "*" {
				names[j] = keys[i]
				if grp.sh >= 0 {
					name = names[j]
				}
			}
		}
		op := op
		op.List = names
		got[g], errs[g] = s.readWindows(w, r, name, op)
		if errs[g] == nil && len(got[g].Windows) != len(names) {
			errs[g] = fmt.Errorf("a part of the series: %d lines for %d keys", len(got[g].Windows), len(names))
		}
	}
	if len(groups) == 1 {
		read(w, 0)
	} else {
		var wg sync.WaitGroup
		for g := range groups {
			wg.Go(func() { read(NewRecorder(), g) })
		}
		wg.Wait()
	}
	for g, grp := range groups {
		if errs[g] != nil {
			return false, errs[g]
		}
		stale = stale || got[g].Stale
		for j, i := range grp.idx {
			wins[i] = &got[g].Windows[j]
		}
	}
	first := wins[groups[0].idx[0]]
	for _, grp := range groups[1:] {
		if p := wins[grp.idx[0]]; p.FromMs != first.FromMs || p.ToMs != first.ToMs || p.WidthMs != first.WidthMs {
			return false, fmt.Errorf("the parts of a series have different points: %d and %d", len(first.Values), len(p.Values))
		}
	}
	return stale, nil
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
