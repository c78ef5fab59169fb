package chaos

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/api"
)

// t0 is a whole minute, in unix ms.
const t0 = int64(1_700_000_040_000)

func incrAt(id int64, region, key string, by int64, at int64, out Outcome, resolved string) Op {
	o := incr(id, region, key, by, out, resolved)
	o.At = at
	return o
}

// windowsEverywhere is a window state where every region reads vals at
// level 1s (and their sums per minute and hour at 1m and 1h), over a span
// holding [t0-1h, t0+1h).
func windowsEverywhere(vals map[key]map[int64]int64) windowState {
	ws := windowState{Regions: regions3, Series: map[string]map[string]*seriesRead{},
		SpanFrom: t0 - 10_000, SpanTo: t0 + 600_000}
	for _, l := range seriesLevels {
		w := int64(l.width / time.Second)
		ws.Series[l.name] = map[string]*seriesRead{}
		for _, r := range regions3 {
			sr := &seriesRead{From: t0/1000 - 3600, To: t0/1000 + 3600, Values: map[key]map[int64]int64{}}
			for k, bs := range vals {
				m := map[int64]int64{}
				for b, v := range bs {
					m[b-((b%w)+w)%w] += v
				}
				sr.Values[k] = m
			}
			ws.Series[l.name][r] = sr
		}
	}
	return ws
}

func TestWindowModelBooksEachAppliedIncrementAtItsEventTime(t *testing.T) {
	ops := []Op{
		incrAt(1, "us", "c", 5, t0+100, OutcomeOK, ""),
		incrAt(2, "eu", "c", -2, t0+900, OutcomeOK, ""),
		incrAt(3, "us", "c", 7, t0+1500, OutcomeFailed, ""),               // not applied
		incrAt(4, "ap", "d", 3, t0+2500, OutcomeTimeout, ResolvedApplied), // resolved: applied
		incrAt(5, "ap", "d", 4, t0+3500, OutcomeTimeout, ResolvedDuplicate),
	}
	m := buildWindowModel(ops)
	if len(m.Uncertain) != 0 {
		t.Fatalf("uncertain: %v", m.Uncertain)
	}
	want, g := expect(m.Bookings["c"], 1)
	if len(g) != 0 || want[t0/1000] != 3 || len(want) != 1 {
		t.Errorf("c: %v %v, want 3 in one slot", want, g)
	}
	want, _ = expect(m.Bookings["d"], 1)
	if want[t0/1000+2] != 3 || want[t0/1000+3] != 4 {
		t.Errorf("d: %v", want)
	}
	want, _ = expect(m.Bookings[totalKey], 60)
	if want[t0/1000] != 10 || len(want) != 1 {
		t.Errorf("total by minute: %v, want 10", want)
	}

	// An unresolved one makes the key (and the total) uncertain.
	m = buildWindowModel(append(ops, incrAt(6, "us", "c", 1, t0, OutcomeTimeout, "")))
	if !m.Uncertain["c"] || !m.Uncertain[totalKey] || m.Uncertain["d"] {
		t.Errorf("uncertain: %v", m.Uncertain)
	}
}

// A cashback's credit is a user's counter's: in the family's total, at
// the purchase's time; one with no answer makes the total uncertain.
func TestWindowModelBooksCashbackCredits(t *testing.T) {
	cb := cashbackOp(1, "us", "m:1", "cu:1", 2, OutcomeOK)
	cb.At = t0 + 1500
	refused := cashbackOp(2, "eu", "m:1", "cu:1", 3, OutcomeRefused)
	refused.At = t0
	m := buildWindowModel([]Op{incrAt(3, "us", "c", 5, t0+100, OutcomeOK, ""), cb, refused})
	want, _ := expect(m.Bookings[totalKey], 1)
	if len(m.Uncertain) != 0 || want[t0/1000] != 5 || want[t0/1000+1] != 2 || len(want) != 2 {
		t.Errorf("total: %v (uncertain %v), want 5 then 2", want, m.Uncertain)
	}
	if sum, certain := cashbackCredits([]Op{cb, refused}); sum != 2 || !certain {
		t.Errorf("credits %d %v", sum, certain)
	}
	lost := cashbackOp(4, "ap", "m:2", "cu:2", 1, OutcomeTimeout)
	lost.At = t0
	if m := buildWindowModel([]Op{cb, lost}); !m.Uncertain[totalKey] {
		t.Errorf("uncertain: %v", m.Uncertain)
	}
	if _, certain := cashbackCredits([]Op{cb, lost}); certain {
		t.Error("a lost cashback's credit is certain")
	}
}

func TestCheckWindowsCountersExactPerSlot(t *testing.T) {
	keys := []key{{ID: "c"}}
	ops := []Op{
		incrAt(1, "us", "c", 5, t0+100, OutcomeOK, ""),
		incrAt(2, "eu", "c", 2, t0+1100, OutcomeOK, ""),
	}
	wants := map[key]int64{{ID: "c"}: 7}
	s := t0 / 1000
	good := map[key]map[int64]int64{{ID: "c"}: {s: 5, s + 1: 2}, {ID: totalKey}: {s: 5, s + 1: 2}}
	vs, n := checkWindows(ops, keys, wants, windowsEverywhere(good))
	if len(vs) != 0 {
		t.Fatalf("violations: %v", vs)
	}
	if n.Slots == 0 {
		t.Error("nothing compared")
	}

	// Booked one second late: the total is right, the slots are not.
	late := map[key]map[int64]int64{{ID: "c"}: {s + 1: 7}, {ID: totalKey}: {s + 1: 7}}
	ws := windowsEverywhere(late)
	vs, _ = checkWindows(ops, keys, wants, ws)
	if !slices.Equal(kinds(vs), []string{KindWindow}) {
		t.Fatalf("kinds %v: %v", kinds(vs), vs)
	}
	// At 1 s in every region (counter and total); the minute is right.
	if len(vs) != 6 || !strings.Contains(vs[0].Detail, "1s slots: 2 of 2 differ") {
		t.Errorf("%d violations: %v", len(vs), vs)
	}
}

// An approximate counter's slots are compared between regions, and the
// counters' total is the model's exact counters plus what each region
// reads of the approximate ones.
func TestCheckWindowsApproxCounters(t *testing.T) {
	c, a := key{ID: "c"}, key{ID: approxID(0)}
	keys := []key{c, a}
	ops := []Op{
		incrAt(1, "us", "c", 5, t0+100, OutcomeOK, ""),
		incrAt(2, "eu", a.ID, 3, t0+1100, OutcomeOK, ""),
	}
	ops[1].Counted = []int64{8}
	m := buildWindowModel(ops)
	if !m.Uncertain[a.ID] || m.Uncertain["c"] || m.Uncertain[totalKey] || len(m.Bookings[a.ID]) != 0 {
		t.Fatalf("model: %+v", m)
	}
	wants := map[key]int64{c: 5}
	s := t0 / 1000
	good := map[key]map[int64]int64{c: {s: 5}, a: {s + 1: 8}, {ID: totalKey}: {s: 5, s + 1: 8}}
	if vs, _ := checkWindows(ops, keys, wants, windowsEverywhere(good)); len(vs) != 0 {
		t.Fatalf("violations: %v", vs)
	}
	// The total holds what the approximate counter does not: wrong.
	bad := map[key]map[int64]int64{c: {s: 5}, a: {s + 1: 8}, {ID: totalKey}: {s: 5, s + 1: 3}}
	if vs, _ := checkWindows(ops, keys, wants, windowsEverywhere(bad)); len(vs) == 0 || !strings.Contains(vs[0].Key, totalKey) {
		t.Fatalf("a total that is not the sum: %v", vs)
	}
	// One region's approximate slots differ from another's.
	ws := windowsEverywhere(good)
	ws.Series["1s"]["eu"].Values[a] = map[int64]int64{s + 2: 8}
	ws.Series["1s"]["eu"].Values[key{ID: totalKey}] = map[int64]int64{s: 5, s + 2: 8}
	if vs, _ := checkWindows(ops, keys, wants, ws); len(vs) != 1 || vs[0].Key != a.String() || vs[0].Region != "eu" {
		t.Fatalf("regions that disagree on an approximate counter: %v", vs)
	}
}

func TestCheckWindowsLateResolutionMayBeInEitherSlot(t *testing.T) {
	keys := []key{{ID: "c"}}
	o := incrAt(1, "us", "c", 5, t0+100, OutcomeTimeout, ResolvedApplied)
	o.Retry, o.RetryOutcome, o.ResolveAt = "eu", OutcomeTimeout, t0+400_000
	ops := []Op{o}
	wants := map[key]int64{{ID: "c"}: 5}
	s := t0 / 1000
	for _, at := range []int64{s, s + 400} {
		vals := map[key]map[int64]int64{{ID: "c"}: {at: 5}, {ID: totalKey}: {at: 5}}
		if vs, _ := checkWindows(ops, keys, wants, windowsEverywhere(vals)); len(vs) != 0 {
			t.Errorf("booked at %d: %v", at, vs)
		}
	}
	vals := map[key]map[int64]int64{{ID: "c"}: {s: 5, s + 400: 5}, {ID: totalKey}: {s: 5, s + 400: 5}}
	if vs, _ := checkWindows(ops, keys, wants, windowsEverywhere(vals)); len(vs) == 0 || !strings.Contains(vs[0].Detail, "together read 10, model 5") {
		t.Errorf("booked twice: %v", vs)
	}
	// Without a retry that may have applied it, the resend's time is the
	// only one.
	ops[0].RetryOutcome = OutcomeFailed
	vals = map[key]map[int64]int64{{ID: "c"}: {s: 5}, {ID: totalKey}: {s: 5}}
	if vs, _ := checkWindows(ops, keys, wants, windowsEverywhere(vals)); len(vs) == 0 {
		t.Error("booked at the first event time: no violation")
	}
}

func TestCheckWindowsLikesAgreeAndSumToTheCount(t *testing.T) {
	keys := []key{{Likes: true, ID: "i"}}
	wants := map[key]int64{{Likes: true, ID: "i"}: 2}
	s := t0 / 1000
	vals := map[key]map[int64]int64{{Likes: true, ID: "i"}: {s: 3, s + 5: -1}, {Likes: true, ID: totalKey}: {s: 3, s + 5: -1}}
	ws := windowsEverywhere(vals)
	if vs, _ := checkWindows(nil, keys, wants, ws); len(vs) != 0 || !ws.agreed() {
		t.Fatalf("agreed %v, violations: %v", ws.agreed(), vs)
	}
	// One region books the unlike a second later: it disagrees.
	ws.Series["1s"]["ap"].Values[key{Likes: true, ID: "i"}] = map[int64]int64{s: 3, s + 6: -1}
	vs, _ := checkWindows(nil, keys, wants, ws)
	if len(vs) != 1 || vs[0].Kind != KindWindow || vs[0].Region != "ap" || !strings.Contains(vs[0].Detail, "differ from us's") {
		t.Fatalf("violations: %v", vs)
	}
	if ws.agreed() {
		t.Error("regions that read different slots agreed")
	}
	// Every region misses the unlike: they agree, but the sum is off.
	vals[key{Likes: true, ID: "i"}] = map[int64]int64{s: 3}
	vs, _ = checkWindows(nil, keys, wants, windowsEverywhere(vals))
	if len(vs) != 9 || !strings.Contains(vs[0].Detail, "sum to 3, model 2") {
		t.Fatalf("%d violations: %v", len(vs), vs)
	}
	// An uncertain item is only compared between regions.
	vs, _ = checkWindows(nil, keys, map[key]int64{}, windowsEverywhere(vals))
	if len(vs) != 0 {
		t.Fatalf("violations: %v", vs)
	}
}

func TestCheckTrendingTiesInAnyOrder(t *testing.T) {
	var keys []key
	wants := map[key]int64{}
	for i, c := range []int64{5, 9, 5, 0, -3, 1} {
		k := key{Likes: true, ID: itemID(i)}
		keys = append(keys, k)
		wants[k] = c
	}
	list := func(items ...any) *api.Trending {
		t := &api.Trending{}
		for i := 0; i < len(items); i += 2 {
			t.Items = append(t.Items, api.TrendingItem{Item: items[i].(string), Count: items[i+1].(int64)})
		}
		return t
	}
	ws := windowState{Regions: []string{"us", "eu"}, Trending: map[string]map[string]*api.Trending{"likes": {
		"us": list("item-001", int64(9), "item-000", int64(5), "item-002", int64(5), "item-005", int64(1)),
		"eu": list("item-001", int64(9), "item-002", int64(5), "item-000", int64(5), "item-005", int64(1)),
	}}}
	if vs, n := checkTrending(true, keys, wants, ws); len(vs) != 0 || n != 2 {
		t.Fatalf("%d checked, violations: %v", n, vs)
	}
	// A wrong count, a missing key.
	ws.Trending["likes"]["us"] = list("item-001", int64(9), "item-000", int64(6), "item-002", int64(5), "item-005", int64(1))
	ws.Trending["likes"]["eu"] = list("item-001", int64(9), "item-000", int64(5), "item-005", int64(1))
	vs, _ := checkTrending(true, keys, wants, ws)
	if len(vs) != 2 || !slices.Equal(kinds(vs), []string{KindTrending}) {
		t.Fatalf("violations: %v", vs)
	}
	if !strings.Contains(vs[0].Detail, "item-000 listed with 6, model 5") || !strings.Contains(vs[1].Detail, "3 listed, model 4") {
		t.Errorf("details: %v", vs)
	}
	// An uncertain item: not checked.
	delete(wants, keys[3])
	if vs, n := checkTrending(true, keys, wants, ws); len(vs) != 0 || n != 0 {
		t.Errorf("uncertain: %d checked, %v", n, vs)
	}
}

// Both forms of an event time name the same millisecond, half of the
// times each.
func TestAtOf(t *testing.T) {
	forms := map[bool]int{}
	for _, at := range []int64{t0, t0 + 1, t0 + 10, t0 + 999} {
		raw, err := json.Marshal(atOf(at))
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("%d: %s: %v", at, raw, err)
		}
		switch v := v.(type) {
		case string:
			forms[true]++
			p, err := time.Parse(time.RFC3339Nano, v)
			if err != nil || p.UnixMilli() != at {
				t.Errorf("%d: %q parses as %d, %v", at, v, p.UnixMilli(), err)
			}
		case float64:
			forms[false]++
			if int64(v) != at {
				t.Errorf("%d: %s", at, raw)
			}
		default:
			t.Errorf("%d: %s", at, raw)
		}
	}
	if forms[true] != 2 || forms[false] != 2 {
		t.Errorf("forms %v, want 2 of each", forms)
	}
	if !atOf(0).IsZero() {
		t.Error("no time: not zero")
	}
}
