package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tally-dev/tally/api"
	tallyclient "github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/internal/base/poll"
)

// Time windows. The workload stamps every increment, and half the likes
// and unlikes, with the client's own time of the event (Op.At), so the
// model knows the 1 s slot of every acknowledged increment. After the
// final heal, every region's series of every counter at each level (1 s,
// 1 min, 1 h) must equal the model slot by slot; for likes, whose
// slots depend on which of concurrent actions won, every region must
// read the same slots, summing to the model's count. Trending over a
// window holding the whole run must list the model's top counters and
// items with their exact counts.

// windowLevels is the regions' --windows: the levels the checker reads.
const windowLevels = "1s:3h,1m:15d,1h:3y"

// seriesLevel is a level of slots and how the checker reads it: at
// step width, from at least minBack before now (so that no finer level,
// whose slots are kept for less, answers), over at most maxSpan.
type seriesLevel struct {
	name    string
	width   time.Duration
	minBack time.Duration
	maxSpan time.Duration // 0: any
}

var seriesLevels = []seriesLevel{
	// Within the 1 s slots' 3 h, and at most 10,000 points.
	{name: "1s", width: time.Second, maxSpan: 2*time.Hour + 30*time.Minute},
	// Past the 1 s slots' retention: the 1 min slots answer.
	{name: "1m", width: time.Minute, minBack: 4 * time.Hour},
	// Past the 1 min slots' 15 days: the 1 h slots answer.
	{name: "1h", width: time.Hour, minBack: 16 * 24 * time.Hour},
}

// windowMargin is how far before the run's start the reads begin: no
// event of the run is older than its start minus the largest lag, a late
// pair's second action's (lateLag).
const windowMargin = max(maxLag, lateLag) + 5*time.Second

// Trending is read over trendingWindow (minute slots), which holds the
// whole run if it is shorter than trendingSpan, with n = trendingN.
const (
	trendingWindow = "2h"
	trendingSpan   = 2*time.Hour - 3*time.Minute
	trendingN      = 10
)

// totalKey names a family's total in series reads ("*").
const totalKey = "*"

// atOf is an event time as a body sends it: both forms the API
// takes, RFC 3339 and unix ms, half each (by the parity of the time, so
// that every attempt of an increment sends the same bytes). Zero: none.
func atOf(at int64) tallyclient.EventTime {
	switch {
	case at == 0:
		return tallyclient.EventTime{}
	case at%2 == 0:
		return tallyclient.At(time.UnixMilli(at))
	}
	return tallyclient.AtUnixMilli(at)
}

// answerOf turns a write's error into an answer.
func answerOf(err error) answer {
	out, reason := classify(err)
	code := tallyclient.Code(err)
	return answer{outcome: out, reason: reason, badTime: code == "bad_time", blocked: code == "user_blocked"}
}

// incrAt sends an increment with an idempotency key and the event time at
// (0: none), to its counter's route or, with events, as a one-event batch
// (POST /v1/events), whose rejected event is a failed answer.
func (c *client) incrAt(ctx context.Context, key string, by int64, idem string, at int64, events bool, timeout time.Duration) answer {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if events {
		ev := tallyclient.Event{Type: tallyclient.EventIncr, Key: key, By: by, IdempotencyKey: idem, At: atOf(at)}
		r, a, ok := c.oneEvent(ctx, ev)
		switch {
		case !ok:
			return a
		case !r.OK:
			return answer{outcome: OutcomeFailed, reason: "event rejected: " + r.Code, badTime: r.Code == "bad_time"}
		}
		return answer{outcome: OutcomeOK, value: r.Value, duplicate: r.Duplicate, approx: r.Approx, counted: deref(r.Counted)}
	}
	r, err := c.api.Incr(ctx, key, by, tallyclient.IncrOptions{IdempotencyKey: idem, At: atOf(at)})
	if err != nil {
		return answerOf(err)
	}
	return answer{outcome: OutcomeOK, value: r.Value, duplicate: r.Duplicate, approx: r.Approx, counted: deref(r.Counted)}
}

// oneEvent sends ev as a one-event batch (POST /v1/events) and returns its
// result; ok is false, with the answer to give, if there is none.
func (c *client) oneEvent(ctx context.Context, ev tallyclient.Event) (r api.EventResult, a answer, ok bool) {
	res, err := c.api.Events(ctx, []tallyclient.Event{ev})
	switch {
	case err != nil:
		return r, answerOf(err), false
	case len(res.Results) != 1:
		return r, answer{outcome: OutcomeTimeout, reason: fmt.Sprintf("events: %d results for 1 event", len(res.Results))}, false
	}
	return res.Results[0], answer{}, true
}

// deref is *p, 0 if p is nil: a batched increment of an approximate
// counter that counted nothing says nothing.
func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// likeAt sends a like (liked) or an unlike with the event time at by the
// body routes (POST /v1/likes, DELETE /v1/likes/{item}), or, at zero,
// with none by the path routes (like).
func (c *client) likeAt(ctx context.Context, item, user string, liked bool, at int64, timeout time.Duration) answer {
	if at == 0 {
		return c.like(ctx, item, user, liked, timeout)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req := tallyclient.LikeRequest{Item: item, User: user, At: atOf(at)}
	send := c.api.LikeAt
	if !liked {
		send = c.api.UnlikeAt
	}
	l, err := send(ctx, req)
	if err != nil {
		return answerOf(err)
	}
	return answer{outcome: OutcomeOK, value: l.Count}
}

// series reads GET /v1/series of keys of a family over [fromMs, toMs);
// one key's through its own route (GET /v1/counters/{key}/series or
// /v1/likes/{item}/series), which a sharded replica forwards to a holder.
// The family's total (totalKey) is on the shard every replica holds.
func (c *client) series(ctx context.Context, family string, keys []string, fromMs, toMs int64, step string) (api.Series, error) {
	if len(keys) == 1 && keys[0] != totalKey {
		o := tallyclient.SeriesOptions{Range: tallyclient.Range{From: time.UnixMilli(fromMs), To: time.UnixMilli(toMs)}, Step: step}
		if family == string(tallyclient.KindLikes) {
			return c.api.LikesSeries(ctx, keys[0], o)
		}
		return c.api.CounterSeries(ctx, keys[0], o)
	}
	return c.api.Series(ctx, tallyclient.SeriesQuery{Kind: tallyclient.Kind(family), Keys: keys, SeriesOptions: tallyclient.SeriesOptions{
		Range: tallyclient.Range{From: time.UnixMilli(fromMs), To: time.UnixMilli(toMs)}, Step: step}})
}

// trending reads GET /v1/trending of a family.
func (c *client) trending(ctx context.Context, family, prefix, window string, n int) (api.Trending, error) {
	return c.api.Trending(ctx, tallyclient.TrendingQuery{Kind: tallyclient.Kind(family), Prefix: prefix, Window: window, N: n})
}

// family is the API's name of a key's family.
func family(likes bool) string {
	if likes {
		return string(tallyclient.KindLikes)
	}
	return string(tallyclient.KindCounters)
}

// seriesRead is what one region's series of one level say.
type seriesRead struct {
	// From and To bound the slots read, in unix seconds: [From, To).
	From, To int64
	// Values are per key (ID totalKey: the family's total), per slot
	// start (unix seconds), the non-zero values.
	Values map[key]map[int64]int64
}

// windowState is what the regions' time windows say after the final heal.
type windowState struct {
	Regions []string
	// Series are per level (seriesLevel.name), per region, the series of
	// every key; a region missing could not be read (Errs says why).
	Series map[string]map[string]*seriesRead
	// Trending are per family, per region, the trending lists over
	// trendingWindow, when that window holds the whole run (else nil).
	Trending map[string]map[string]*api.Trending
	// Errs are the reads that failed.
	Errs []Violation
	// SpanFrom and SpanTo bound every booking of the run, in unix ms.
	SpanFrom, SpanTo int64
	// PerKey: the series were read one key at a time, through each key's
	// own route, which a sharded replica forwards to a holder (a read of
	// keys of several shards is refused there).
	PerKey bool
}

// windowKeys are the keys whose windows the checker reads: every key, and
// each family's total.
func windowKeys(keys []key) []key {
	return append(slices.Clone(keys), key{ID: totalKey}, key{Likes: true, ID: totalKey})
}

// readWindows reads, in every region, the series of every key at every
// level over the run (spanFrom on), and, if the run is short enough, the
// trending lists. The series run to lead past the harness's clock: the
// regions' clocks may be that far ahead (forgedClockLead), and a like
// without a client's time is booked by its stamp. perKey reads each key's
// series alone (windowState.PerKey).
func readWindows(ctx context.Context, procs []*proc, keys []key, spanFrom time.Time, lead time.Duration, perKey bool) windowState {
	now := time.Now()
	ws := windowState{Series: map[string]map[string]*seriesRead{}, SpanFrom: spanFrom.UnixMilli(), SpanTo: now.UnixMilli(), PerKey: perKey}
	for _, p := range procs {
		ws.Regions = append(ws.Regions, p.view)
	}
	type ranged struct {
		seriesLevel
		from, to int64
	}
	var levels []ranged
	for _, l := range seriesLevels {
		from := spanFrom
		if back := now.Add(-l.minBack); l.minBack > 0 && back.Before(from) {
			from = back
		}
		if l.maxSpan > 0 && now.Sub(from) > l.maxSpan {
			from = now.Add(-l.maxSpan)
		}
		levels = append(levels, ranged{l, from.UnixMilli(), now.Add(l.width + time.Second + lead).UnixMilli()})
	}
	byFamily := map[bool][]string{}
	for _, k := range windowKeys(keys) {
		byFamily[k.Likes] = append(byFamily[k.Likes], k.ID)
	}
	type regionReads struct {
		series   map[string]*seriesRead
		trending map[string]*api.Trending
		errs     []Violation
	}
	trend := now.Sub(spanFrom) <= trendingSpan
	reads := perRegion(ctx, procs, 30*time.Second, func(ctx context.Context, p *proc) (regionReads, error) {
		rr := regionReads{series: map[string]*seriesRead{}, trending: map[string]*api.Trending{}}
		fail := func(what string, err error) {
			rr.errs = append(rr.errs, Violation{Kind: KindWindow, Region: p.view, Detail: what + " could not be read: " + err.Error()})
		}
	levels:
		for _, l := range levels {
			sr := &seriesRead{Values: map[key]map[int64]int64{}}
			for _, likes := range []bool{false, true} {
				ids := byFamily[likes]
				for len(ids) > 0 {
					chunk := ids[:min(len(ids), 100)] // the most keys of one read
					if perKey {
						chunk = ids[:1]
					}
					ids = ids[len(chunk):]
					s, err := p.client.series(ctx, family(likes), chunk, l.from, l.to, l.name)
					if err != nil {
						fail("the "+l.name+" series of "+family(likes), err)
						continue levels
					}
					sr.From, sr.To = s.From.Unix(), s.To.Unix()
					for _, line := range s.Series {
						vals := map[int64]int64{}
						for i, v := range line.Values {
							if v != 0 && i < len(s.Times) {
								vals[s.Times[i]/1000] = v
							}
						}
						sr.Values[key{Likes: likes, ID: line.Key}] = vals
					}
				}
			}
			rr.series[l.name] = sr
		}
		if trend {
			for _, likes := range []bool{false, true} {
				prefix := "ctr-"
				if likes {
					prefix = "item-"
				}
				t, err := p.client.trending(ctx, family(likes), prefix, trendingWindow, trendingN)
				if err != nil {
					fail("trending of "+family(likes), err)
					continue
				}
				rr.trending[family(likes)] = &t
			}
		}
		return rr, nil
	})
	if trend {
		ws.Trending = map[string]map[string]*api.Trending{"counters": {}, "likes": {}}
	}
	for _, l := range seriesLevels {
		ws.Series[l.name] = map[string]*seriesRead{}
	}
	for _, r := range ws.Regions {
		rr, ok := reads[r]
		if !ok {
			ws.Errs = append(ws.Errs, Violation{Kind: KindWindow, Region: r, Detail: "the time windows could not be read"})
			continue
		}
		ws.Errs = append(ws.Errs, rr.errs...)
		for name, sr := range rr.series {
			ws.Series[name][r] = sr
		}
		for fam, t := range rr.trending {
			ws.Trending[fam][r] = t
		}
	}
	return ws
}

// windowBooking is where the model books one applied increment: By, into
// the slot of one of Ats (unix ms). One time, unless a resolution after
// the event time had grown too old leaves two possible (workload.resolve).
type windowBooking struct {
	By  int64
	Ats []int64
}

// windowModel is what the counters' slots must hold: per counter
// key (and totalKey, the family's total), the bookings of its applied
// increments. An Uncertain counter has an increment whose outcome is
// unknown or that was sent without an event time: its slots are only
// compared between regions.
type windowModel struct {
	Bookings  map[string][]windowBooking
	Uncertain map[string]bool
}

// buildWindowModel books every applied increment at its event time. Every
// attempt of an increment carries the same one, and a reconciliation
// that takes back a second application of its key is booked at the
// winning application's, the same, so each counts once in its slot.
func buildWindowModel(ops []Op) windowModel {
	m := windowModel{Bookings: map[string][]windowBooking{}, Uncertain: map[string]bool{}}
	for i := range ops {
		o := &ops[i]
		if o.Kind == OpCashback {
			// The user's credit is a counter's, booked at the
			// purchase's time (every attempt carries it; the refund of
			// a second application is booked at the winner's, the
			// same). The users' counters are in the family's total.
			switch {
			case o.Outcome == OutcomeOK && o.At != 0:
				m.Bookings[totalKey] = append(m.Bookings[totalKey], windowBooking{By: o.By, Ats: []int64{o.At}})
			case o.Outcome == OutcomeOK || o.Outcome == OutcomeTimeout:
				m.Uncertain[totalKey] = true
			}
			continue
		}
		if o.Kind != OpIncr {
			continue
		}
		switch {
		case isApprox(o.Key):
			// What it counted is known only within bounds (approx.go):
			// its slots are compared between regions, and each
			// region's, added to the model's, make the total's.
			m.Uncertain[o.Key] = true
		case o.applied() && o.At != 0:
			b := windowBooking{By: o.By, Ats: []int64{o.At}}
			if o.Resolved == ResolvedApplied && o.ResolveAt != 0 {
				// The resend was applied at ResolveAt. Had the failover
				// retry also been applied, unknown to the resent-to
				// region, the key's winner takes one back at its own
				// time: either may remain.
				b.Ats = []int64{o.ResolveAt}
				if o.RetryOutcome == OutcomeTimeout {
					b.Ats = append(b.Ats, o.At)
				}
			}
			m.Bookings[o.Key] = append(m.Bookings[o.Key], b)
			m.Bookings[totalKey] = append(m.Bookings[totalKey], b)
		case o.applied() || o.Outcome == OutcomeTimeout:
			m.Uncertain[o.Key], m.Uncertain[totalKey] = true, true
		}
	}
	return m
}

// cashbackCredits is what the acknowledged cashbacks credited the users'
// counters, and whether that is certain: no cashback went unanswered.
func cashbackCredits(ops []Op) (int64, bool) {
	var sum int64
	certain := true
	for i := range ops {
		switch o := &ops[i]; {
		case o.Kind != OpCashback:
		case o.Outcome == OutcomeOK:
			sum += o.By
		case o.Outcome == OutcomeTimeout:
			certain = false
		}
	}
	return sum, certain
}

// slotGroups joins slots (unix seconds) that the model cannot tell
// apart: each group's sum is exact, not its split. A slot in no group
// stands alone.
type slotGroups map[int64]int64

func (g slotGroups) find(b int64) int64 {
	for {
		p, ok := g[b]
		if !ok || p == b {
			return b
		}
		b = p
	}
}

func (g slotGroups) union(a, b int64) {
	if ra, rb := g.find(a), g.find(b); ra != rb {
		g[ra] = rb
	}
}

// expect is the model's slots of width seconds: the net change per
// slot start, and the groups of slots an increment may be in either
// of (its By is counted in the first).
func expect(bs []windowBooking, width int64) (map[int64]int64, slotGroups) {
	want, g := map[int64]int64{}, slotGroups{}
	for _, b := range bs {
		first := crdt.SlotStart(b.Ats[0], width)
		want[first] += b.By
		for _, at := range b.Ats[1:] {
			g.union(first, crdt.SlotStart(at, width))
		}
	}
	return want, g
}

// slotDiffs compares got with want slot by slot, each group of g as
// one, among the slots in [from, to). It returns how many slots (or
// groups) hold a value, and a description of each that differs.
func slotDiffs(got, want map[int64]int64, g slotGroups, from, to int64, wantName string) (int, []string) {
	members := map[int64][]int64{}
	gotSum, wantSum := map[int64]int64{}, map[int64]int64{}
	add := func(b int64) int64 {
		r := g.find(b)
		if !slices.Contains(members[r], b) {
			members[r] = append(members[r], b)
		}
		return r
	}
	for b, v := range got {
		gotSum[add(b)] += v
	}
	for b, v := range want {
		wantSum[add(b)] += v
	}
	for b := range g {
		add(b)
	}
	held := 0
	var diffs []string
	for _, r := range slices.Sorted(maps.Keys(members)) {
		ms := members[r]
		slices.Sort(ms)
		if ms[0] < from || ms[len(ms)-1] >= to {
			continue // not read: the run outlasts the level's reads
		}
		if gotSum[r] != 0 || wantSum[r] != 0 {
			held++
		}
		if gotSum[r] == wantSum[r] {
			continue
		}
		var when []string
		for _, b := range ms {
			when = append(when, time.Unix(b, 0).UTC().Format("15:04:05"))
		}
		verb := "reads"
		if len(ms) > 1 {
			verb = "together read"
		}
		diffs = append(diffs, fmt.Sprintf("%s %s %d, %s %d", strings.Join(when, "+"), verb, gotSum[r], wantName, wantSum[r]))
	}
	return held, diffs
}

// windowChecked counts what checkWindows compared.
type windowChecked struct {
	Slots    int // slot values (non-zero) compared, all levels and regions
	Trending int // trending lists compared
}

// checkWindows compares the regions' time windows with the model and with
// each other. wants are the model's final values (check); a key absent is
// uncertain.
func checkWindows(ops []Op, keys []key, wants map[key]int64, ws windowState) ([]Violation, windowChecked) {
	m := buildWindowModel(ops)
	vs := slices.Clone(ws.Errs)
	var n windowChecked
	all := windowKeys(keys)
	// The model's count of each family's total, if every key is certain.
	totals := map[key]int64{}
	for _, likes := range []bool{false, true} {
		var sum int64
		certain := true
		if !likes { // the users' cashback credits are counters too
			sum, certain = cashbackCredits(ops)
		}
		for _, k := range keys {
			if k.Likes != likes || isApprox(k.ID) {
				continue
			}
			w, ok := wants[k]
			sum += w
			certain = certain && ok
		}
		if certain {
			totals[key{Likes: likes, ID: totalKey}] = sum
		}
	}
	wants = maps.Clone(wants)
	if wants == nil {
		wants = map[key]int64{}
	}
	maps.Copy(wants, totals)
	for _, l := range seriesLevels {
		width := int64(l.width / time.Second)
		reads := ws.Series[l.name]
		for _, k := range all {
			exact := !k.Likes && !m.Uncertain[k.ID]
			var want map[int64]int64
			var g slotGroups
			if exact {
				want, g = expect(m.Bookings[k.ID], width)
			}
			var first string // the first region read, which the others must equal
			for _, r := range ws.Regions {
				sr, ok := reads[r]
				if !ok {
					continue // Errs says why
				}
				got := sr.Values[k]
				if exact {
					want := want
					if k.ID == totalKey {
						want = plusApprox(want, sr, keys)
					}
					held, diffs := slotDiffs(got, want, g, sr.From, sr.To, "model")
					n.Slots += held
					if len(diffs) > 0 {
						vs = append(vs, Violation{Kind: KindWindow, Region: r, Key: k.String(),
							Detail: fmt.Sprintf("%s slots: %d of %d differ from the model's: %s", l.name, len(diffs), held, strings.Join(firstFew(diffs), "; "))})
					}
					continue
				}
				// Likes (and uncertain counters): every region reads the
				// same slots, and, if they span the run, they sum to the
				// model's count.
				if first == "" {
					first = r
				} else {
					held, diffs := slotDiffs(got, reads[first].Values[k], nil, sr.From, sr.To, first)
					n.Slots += held
					if len(diffs) > 0 {
						vs = append(vs, Violation{Kind: KindWindow, Region: r, Key: k.String(),
							Detail: fmt.Sprintf("%s slots: %d of %d differ from %s's: %s", l.name, len(diffs), held, first, strings.Join(firstFew(diffs), "; "))})
					}
				}
				w, certain := wants[k]
				if !certain || sr.From*1000 > ws.SpanFrom || sr.To*1000 <= ws.SpanTo {
					continue
				}
				var sum int64
				for _, v := range got {
					sum += v
				}
				if sum != w {
					vs = append(vs, Violation{Kind: KindWindow, Region: r, Key: k.String(),
						Detail: fmt.Sprintf("%s slots over the run sum to %d, model %d (%+d)", l.name, sum, w, sum-w)})
				}
			}
		}
	}
	for _, likes := range []bool{false, true} {
		tv, tn := checkTrending(likes, keys, wants, ws)
		vs = append(vs, tv...)
		n.Trending += tn
	}
	return vs, n
}

// plusApprox is the counters' total want plus what region's read sr holds
// of the approximate counters among keys, slot by slot.
func plusApprox(want map[int64]int64, sr *seriesRead, keys []key) map[int64]int64 {
	out := maps.Clone(want)
	if out == nil {
		out = map[int64]int64{}
	}
	for _, k := range keys {
		if k.Likes || !isApprox(k.ID) {
			continue
		}
		for b, v := range sr.Values[k] {
			out[b] += v
			if out[b] == 0 {
				delete(out, b)
			}
		}
	}
	return out
}

// checkTrending compares each region's trending list of a family with the
// model's top trendingN: the keys with the largest positive counts, by
// count, ties in any order. Every listed count must be the model's count
// of its key, and the counts listed the model's top counts, so that no key
// is missing. Not checked if a key of the family is uncertain.
func checkTrending(likes bool, keys []key, wants map[key]int64, ws windowState) ([]Violation, int) {
	lists := ws.Trending[family(likes)]
	if lists == nil {
		return nil, 0
	}
	type ranked struct {
		id    string
		count int64
	}
	var model []ranked
	for _, k := range keys {
		if k.Likes != likes || isApprox(k.ID) {
			continue // approximate counters are not listed (prefix ctr-)
		}
		w, ok := wants[k]
		if !ok {
			return nil, 0
		}
		if w > 0 {
			model = append(model, ranked{k.ID, w})
		}
	}
	sort.Slice(model, func(i, j int) bool {
		if model[i].count != model[j].count {
			return model[i].count > model[j].count
		}
		return model[i].id < model[j].id
	})
	model = model[:min(len(model), trendingN)]
	render := func(rs []ranked) string {
		var parts []string
		for _, r := range rs {
			parts = append(parts, fmt.Sprintf("%s:%d", r.id, r.count))
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	var vs []Violation
	checked := 0
	for _, r := range ws.Regions {
		t, ok := lists[r]
		if !ok {
			continue // Errs says why
		}
		checked++
		var got []ranked
		for _, it := range t.Items {
			got = append(got, ranked{it.Item, it.Count})
		}
		var problems []string
		if len(got) != len(model) {
			problems = append(problems, fmt.Sprintf("%d listed, model %d", len(got), len(model)))
		}
		for i := range min(len(got), len(model)) {
			if got[i].count != model[i].count {
				problems = append(problems, fmt.Sprintf("#%d counts %d, model's #%d %d", i+1, got[i].count, i+1, model[i].count))
				break
			}
		}
		for _, g := range got {
			k := key{Likes: likes, ID: g.id}
			if w, ok := wants[k]; !ok || w != g.count {
				problems = append(problems, fmt.Sprintf("%s listed with %d, model %d", g.id, g.count, w))
			}
		}
		if len(problems) > 0 {
			vs = append(vs, Violation{Kind: KindTrending, Region: r, Key: key{Likes: likes}.String(),
				Detail: fmt.Sprintf("trending over %s: %s; lists %s, model %s", trendingWindow, strings.Join(firstFew(problems), "; "), render(got), render(model))})
		}
	}
	return vs, checked
}

// agreed reports whether every region was read whole and all read the
// same series and trending lists: their windows have converged, be they
// right or wrong.
func (ws windowState) agreed() bool {
	if len(ws.Errs) > 0 {
		return false
	}
	same := func(a, b map[int64]int64) bool { return maps.Equal(a, b) }
	for _, byRegion := range ws.Series {
		for _, r := range ws.Regions {
			if byRegion[r] == nil || !maps.EqualFunc(byRegion[r].Values, byRegion[ws.Regions[0]].Values, same) {
				return false
			}
		}
	}
	for _, byRegion := range ws.Trending {
		for _, r := range ws.Regions {
			if byRegion[r] == nil || !slices.Equal(byRegion[r].Items, byRegion[ws.Regions[0]].Items) {
				return false
			}
		}
	}
	return true
}

// windowCheckTimeout bounds how long the checker waits for the regions'
// windows to agree: slots converge with the totals, or moments after.
const windowCheckTimeout = 10 * time.Second

// checkWindowsUntil reads and checks the windows until they pass, or the
// regions agree on them (reading again would not change a thing), or
// windowCheckTimeout has gone by, and returns the last check's result.
func checkWindowsUntil(ctx context.Context, procs []*proc, ops []Op, keys []key, wants map[key]int64, start time.Time, lead time.Duration, perKey bool) ([]Violation, windowChecked) {
	deadline := time.Now().Add(windowCheckTimeout)
	for {
		ws := readWindows(ctx, procs, keys, start.Add(-windowMargin), lead, perKey)
		vs, n := checkWindows(ops, keys, wants, ws)
		if len(vs) == 0 || ws.agreed() || time.Now().After(deadline) || !poll.Sleep(ctx, 500*time.Millisecond) {
			return vs, n
		}
	}
}
