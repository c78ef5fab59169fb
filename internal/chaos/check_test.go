package chaos

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/api"
)

// Hand-made histories whose model is computed by hand.

var regions3 = []string{"us", "eu", "ap"}

func like(id int64, region, item, user string, out Outcome) Op {
	return Op{ID: id, Kind: OpLike, Region: region, Key: item, User: user, Outcome: out, Attempts: 1}
}

func unlike(id int64, region, item, user string, out Outcome) Op {
	o := like(id, region, item, user, out)
	o.Kind = OpUnlike
	return o
}

func incr(id int64, region, key string, by int64, out Outcome, resolved string) Op {
	return Op{ID: id, Kind: OpIncr, Region: region, Key: key, By: by, Idem: fmt.Sprintf("op-%d", id), Outcome: out, Attempts: 1, Resolved: resolved}
}

func paired(pair int64, ops ...Op) []Op {
	for i := range ops {
		ops[i].Pair = pair
	}
	return ops
}

// everywhere builds a final state where every region reads the same.
func everywhere(values map[key]int64, liked map[userKey]bool) finalState {
	f := finalState{Regions: regions3, Reads: map[string]map[key]reading{}, Liked: map[userKey]map[string]bool{}}
	for _, r := range regions3 {
		f.Reads[r] = map[key]reading{}
		for k, v := range values {
			f.Reads[r][k] = reading{Value: v}
		}
	}
	for uk, l := range liked {
		f.Liked[uk] = map[string]bool{}
		for _, r := range regions3 {
			f.Liked[uk][r] = l
		}
	}
	return f
}

// withCounter makes every region read counter id as a vector holding p of
// increments and n of decrements, spread over two replicas.
func withCounter(f finalState, id string, p, n uint64) finalState {
	for _, r := range f.Regions {
		f.Reads[r][key{ID: id}] = reading{Value: int64(p) - int64(n),
			Replicas: map[string]PN{"us-1": {P: p / 2, N: n}, "eu-1": {P: p - p/2}}}
	}
	return f
}

func kinds(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		if !slices.Contains(out, v.Kind) {
			out = append(out, v.Kind)
		}
	}
	slices.Sort(out)
	return out
}

func TestModelCountersCountAppliedIncrementsOnce(t *testing.T) {
	ops := []Op{
		incr(1, "us", "c", 5, OutcomeOK, ""),
		incr(2, "eu", "c", -2, OutcomeOK, ""),
		incr(3, "ap", "c", 7, OutcomeFailed, ""),                 // refused: not applied
		incr(4, "us", "c", 3, OutcomeTimeout, ResolvedDuplicate), // had applied
		incr(5, "eu", "c", 10, OutcomeTimeout, ResolvedApplied),  // applied at resolution
		incr(6, "us", "d", 1, OutcomeFailed, ""),
	}
	m, vs := buildModel(ops)
	if len(vs) != 0 {
		t.Fatal(vs)
	}
	// c: increments 5 + 3 + 10 = 18, decrements 2; d: nothing applied.
	if m.Counters["c"] != (PN{P: 18, N: 2}) || m.Counters["d"] != (PN{}) {
		t.Fatalf("counters %v, want c={18 2} d={0 0}", m.Counters)
	}
	keys := []key{{ID: "c"}, {ID: "d"}}
	state := func(p, n uint64) finalState {
		return withCounter(withCounter(everywhere(nil, nil), "c", p, n), "d", 0, 0)
	}
	if _, vs := check(ops, keys, state(18, 2)); len(vs) != 0 {
		t.Fatalf("exact state flagged: %v", vs)
	}
	for _, tc := range []struct {
		p, n  uint64
		kinds []string
	}{
		{19, 2, []string{KindDoubleCount, KindValueMismatch}}, // an increment counted twice
		{13, 2, []string{KindLostAck, KindValueMismatch}},     // the acknowledged 5 is missing
		// A lost decrement raises the value like a double count; the
		// halves tell them apart.
		{18, 0, []string{KindLostAck, KindValueMismatch}},
		// Both halves one above the model with the value right: an
		// idempotency key applied by two regions and taken back by the
		// winner looks like this, and is correct.
		{19, 3, nil},
		{17, 1, []string{KindLostAck}},
	} {
		_, vs := check(ops, keys, state(tc.p, tc.n))
		if got := kinds(vs); !slices.Equal(got, tc.kinds) {
			t.Errorf("P %d N %d: %v, want kinds %v", tc.p, tc.n, vs, tc.kinds)
		}
	}
}

func TestModelUnresolvedIncrementIsReportedNotGuessed(t *testing.T) {
	ops := []Op{incr(1, "us", "c", 5, OutcomeOK, ""), incr(2, "us", "c", 4, OutcomeTimeout, "")}
	wants, vs := check(ops, []key{{ID: "c"}}, withCounter(everywhere(nil, nil), "c", 9, 0))
	if got := kinds(vs); !slices.Equal(got, []string{KindUnresolved}) {
		t.Fatalf("%v", vs)
	}
	if _, ok := wants[key{ID: "c"}]; ok {
		t.Fatal("an uncertain counter has a model value")
	}
}

func TestModelLastSequentialActionDecides(t *testing.T) {
	item := key{Likes: true, ID: "i"}
	a, b, c := userKey{"i", "a"}, userKey{"i", "b"}, userKey{"i", "c"}
	ops := []Op{
		like(1, "us", "i", "a", OutcomeOK),
		unlike(2, "eu", "i", "a", OutcomeOK), // a: liked, then unliked elsewhere: 0
		like(3, "us", "i", "b", OutcomeOK),
		unlike(4, "ap", "i", "b", OutcomeFailed), // refused: b still likes
		like(5, "eu", "i", "c", OutcomeFailed),   // c never liked
	}
	m, _ := buildModel(ops)
	for uk, want := range map[userKey]bool{a: false, b: true, c: false} {
		if got := m.Allowed[uk]; !slices.Equal(got, []bool{want}) {
			t.Errorf("%v allowed %v, want [%v]", uk, got, want)
		}
	}
	liked := map[userKey]bool{a: false, b: true, c: false}
	if _, vs := check(ops, []key{item}, everywhere(map[key]int64{item: 1}, liked)); len(vs) != 0 {
		t.Fatalf("exact state flagged: %v", vs)
	}
	// a's unlike lost: a's record says liked and the count is 2.
	liked[a] = true
	_, vs := check(ops, []key{item}, everywhere(map[key]int64{item: 2}, liked))
	if got := kinds(vs); !slices.Equal(got, []string{KindLostAck, KindValueMismatch}) {
		t.Fatalf("lost unlike: %v", vs)
	}
	if vs[0].Op != 2 || !strings.Contains(vs[0].Detail, "unlike at eu") {
		t.Fatalf("lost-ack does not name the op: %+v", vs[0])
	}
}

func TestModelConcurrentPairAllowsEitherButCountMustMatchRecords(t *testing.T) {
	item := key{Likes: true, ID: "i"}
	u, v := userKey{"i", "u"}, userKey{"i", "v"}
	ops := []Op{like(1, "us", "i", "v", OutcomeOK)}
	ops = append(ops, paired(9, like(2, "us", "i", "u", OutcomeOK), unlike(3, "eu", "i", "u", OutcomeOK))...)
	m, _ := buildModel(ops)
	if got := m.Allowed[u]; len(got) != 2 {
		t.Fatalf("pair allows %v, want both states", got)
	}
	// Either winner is fine if the count follows the records.
	for _, won := range []bool{true, false} {
		want := int64(1)
		if won {
			want = 2
		}
		if _, vs := check(ops, []key{item}, everywhere(map[key]int64{item: want}, map[userKey]bool{u: won, v: true})); len(vs) != 0 {
			t.Fatalf("u liked=%v, count %d flagged: %v", won, want, vs)
		}
	}
	// Both concurrent likes counted: the double count reconciliation removes.
	ops2 := []Op{like(1, "us", "i", "v", OutcomeOK)}
	ops2 = append(ops2, paired(9, like(2, "us", "i", "u", OutcomeOK), like(3, "eu", "i", "u", OutcomeOK))...)
	_, vs := check(ops2, []key{item}, everywhere(map[key]int64{item: 3}, map[userKey]bool{u: true, v: true}))
	if got := kinds(vs); !slices.Equal(got, []string{KindDoubleCount, KindValueMismatch}) {
		t.Fatalf("double-counted pair: %v", vs)
	}
	// A pair of likes cannot end unliked.
	_, vs = check(ops2, []key{item}, everywhere(map[key]int64{item: 1}, map[userKey]bool{u: false, v: true}))
	if got := kinds(vs); !slices.Equal(got, []string{KindLostAck, KindValueMismatch}) {
		t.Fatalf("pair of likes ending unliked: %v", vs)
	}
	// A later sequential action ends the pair's freedom.
	ops3 := append(slices.Clone(ops), like(4, "ap", "i", "u", OutcomeOK))
	_, vs = check(ops3, []key{item}, everywhere(map[key]int64{item: 1}, map[userKey]bool{u: false, v: true}))
	if got := kinds(vs); !slices.Equal(got, []string{KindLostAck, KindValueMismatch}) {
		t.Fatalf("after a sequential like: %v", vs)
	}
}

func TestModelPairWithOneSideRefusedIsSequential(t *testing.T) {
	u := userKey{"i", "u"}
	ops := paired(3, like(1, "us", "i", "u", OutcomeFailed), unlike(2, "eu", "i", "u", OutcomeOK))
	m, _ := buildModel(append([]Op{like(0, "ap", "i", "u", OutcomeOK)}, ops...))
	if got := m.Allowed[u]; !slices.Equal(got, []bool{false}) {
		t.Fatalf("allowed %v, want [false]", got)
	}
}

func TestCheckDisagreementApproxAndUnreadable(t *testing.T) {
	item := key{Likes: true, ID: "i"}
	u := userKey{"i", "u"}
	ops := []Op{like(1, "us", "i", "u", OutcomeOK)}
	f := everywhere(map[key]int64{item: 1}, map[userKey]bool{u: true})
	f.Liked[u]["ap"] = false
	rd := f.Reads["eu"][item]
	rd.Approx = true
	f.Reads["eu"][item] = rd
	delete(f.Reads["us"], item)
	_, vs := check(ops, []key{item}, f)
	if got := kinds(vs); !slices.Equal(got, []string{KindApprox, KindDisagreement, KindNotConverged}) {
		t.Fatalf("%v", vs)
	}
}

func TestCheckUntouchedItemMustReadZero(t *testing.T) {
	item := key{Likes: true, ID: "quiet"}
	_, vs := check(nil, []key{item}, everywhere(map[key]int64{item: 1}, nil))
	if got := kinds(vs); !slices.Contains(got, KindValueMismatch) || !slices.Contains(got, KindDoubleCount) {
		t.Fatalf("%v", vs)
	}
}

func TestTimedOutLikeRetriedToAckIsTheLatestAction(t *testing.T) {
	u := userKey{"i", "u"}
	retried := unlike(2, "eu", "i", "u", OutcomeOK)
	retried.Attempts = 3 // timed out twice, then acknowledged
	m, vs := buildModel([]Op{like(1, "us", "i", "u", OutcomeOK), retried})
	if len(vs) != 0 || !slices.Equal(m.Allowed[u], []bool{false}) {
		t.Fatalf("allowed %v, %v", m.Allowed[u], vs)
	}
	never := unlike(3, "eu", "i", "u", OutcomeTimeout)
	_, vs = buildModel([]Op{like(1, "us", "i", "u", OutcomeOK), never})
	if got := kinds(vs); !slices.Equal(got, []string{KindUnresolved}) {
		t.Fatalf("%v", vs)
	}
}

func TestConvergenceTimes(t *testing.T) {
	k := key{ID: "c"}
	procs := []*proc{{region: "us", view: "us"}, {region: "eu", view: "eu"}}
	round := func(ms int, us, eu int64) pollRound {
		return pollRound{at: msDur(ms), reads: map[string]map[key]reading{
			"us": {k: {Value: us}}, "eu": {k: {Value: eu}},
		}}
	}
	rounds := []pollRound{round(100, 5, 3), round(200, 5, 5), round(300, 4, 5), round(400, 5, 5), round(500, 5, 5)}
	if got := convergenceTimes(rounds, procs, map[key]int64{k: 5})[k]; got != 400 {
		t.Fatalf("converged at %v ms, want 400", got)
	}
	if got := convergenceTimes(rounds[:3], procs, map[key]int64{k: 5})[k]; got != -1 {
		t.Fatalf("unconverged: %v, want -1", got)
	}
}

func TestStats(t *testing.T) {
	var ms []float64
	for i := 1; i <= 100; i++ {
		ms = append(ms, float64(i))
	}
	if s := statsOf(ms); s.N != 100 || s.P50Ms != 50 || s.P99Ms != 99 || s.MaxMs != 100 {
		t.Fatalf("%+v", s)
	}
	if s := statsOf(nil); s.N != 0 {
		t.Fatalf("%+v", s)
	}
}

func msDur(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }

func TestLostAckAfterARestartIsAnnotated(t *testing.T) {
	u := userKey{"i", "u"}
	won := like(1, "us", "i", "u", OutcomeOK)
	won.Start = msDur(12_000)
	ops := []Op{won, unlike(2, "eu", "i", "u", OutcomeOK)}
	ops[1].Start = msDur(13_000)
	_, vs := check(ops, nil, everywhere(nil, map[userKey]bool{u: true}))
	if len(vs) != 1 || vs[0].Kind != KindLostAck {
		t.Fatalf("%v", vs)
	}
	eps := []EpisodeRecord{{Episode: Episode{Index: 4, Kind: KindKill, Region: "us"}, Start: msDur(9_000), End: msDur(11_500)}}
	annotateRestartClock(vs, ops, eps, map[userKey]map[string]bool{u: {"us": true, "eu": true, "ap": true}})
	if !strings.Contains(vs[0].Detail, "after us was killed (episode #4)") {
		t.Fatalf("not annotated: %s", vs[0].Detail)
	}
}

// The like lists must name exactly the users whose records say liked,
// region by region; lists not read are not checked.
func TestCheckLists(t *testing.T) {
	keys := []key{{ID: "p", Likes: true}, {ID: "c"}}
	perItem := map[string][]userKey{"p": {{"p", "u1"}, {"p", "u2"}, {"p", "u3"}}}
	f := finalState{
		Regions: []string{"us", "eu"},
		Liked: map[userKey]map[string]bool{
			{"p", "u1"}: {"us": true, "eu": true},
			{"p", "u2"}: {"us": false, "eu": false},
			{"p", "u3"}: {"us": true, "eu": true},
		},
	}
	if vs := checkLists(keys, perItem, f); len(vs) != 0 {
		t.Fatalf("unread lists checked: %v", vs)
	}
	f.Likers = map[string]map[string][]string{"p": {"us": {"u3", "u1"}, "eu": {"u1"}}}
	vs := checkLists(keys, perItem, f)
	if len(vs) != 1 || vs[0].Kind != KindListMismatch || vs[0].Region != "eu" {
		t.Fatalf("violations %v, want one list-mismatch at eu", vs)
	}
	if !strings.Contains(vs[0].Detail, "1 missing [u3], 0 extra []") {
		t.Fatalf("detail %q", vs[0].Detail)
	}
	f.Likers["p"]["us"] = []string{"u1", "u3", "u3"}
	if vs = checkLists(keys, perItem, f); len(vs) != 2 || !strings.Contains(vs[0].Detail, "1 extra [u3]") {
		t.Fatalf("a liker listed twice: %v", vs)
	}
	f.Likers["p"]["eu"] = []string{"u1", "u3"}
	delete(f.Likers["p"], "us")
	vs = checkLists(keys, perItem, f)
	if len(vs) != 1 || vs[0].Kind != KindNotConverged || vs[0].Region != "us" {
		t.Fatalf("violations %v, want us's list unread", vs)
	}
}

func TestCheckHistories(t *testing.T) {
	uk := userKey{"item-1", "u1"}
	act := func(liked bool, replica string) api.HistoryAction {
		return api.HistoryAction{Liked: liked, Replica: replica, HLC: "1." + replica}
	}
	h := &api.History{Complete: true, Actions: []api.HistoryAction{act(true, "us-1"), act(false, "eu-1")}}
	f := finalState{Regions: []string{"us", "eu"},
		Liked:     map[userKey]map[string]bool{uk: {"us": false, "eu": false}},
		Histories: map[userKey]map[string]*api.History{uk: {"us": h, "eu": h}}}
	if vs := checkHistories(f, nil); len(vs) != 0 {
		t.Fatalf("agreeing histories flagged: %v", vs)
	}
	f.Liked[uk]["eu"] = true
	if vs := checkHistories(f, nil); len(vs) != 1 || vs[0].Kind != KindHistory || vs[0].Region != "eu" {
		t.Fatalf("latest action against the record: %v", vs)
	}
	f.Wiped = []string{"us-1"}
	if vs := checkHistories(f, nil); len(vs) != 0 {
		t.Fatalf("after a wipe the latest action is not checked: %v", vs)
	}
	f.Histories[uk]["eu"] = &api.History{Complete: true, Actions: h.Actions[:1]}
	if vs := checkHistories(f, nil); len(vs) != 1 || !strings.Contains(vs[0].Detail, "differs") {
		t.Fatalf("differing histories: %v", vs)
	}
	f.Histories[uk]["eu"] = &api.History{Complete: false, Actions: h.Actions}
	if vs := checkHistories(f, nil); len(vs) != 1 || !strings.Contains(vs[0].Detail, "whole") {
		t.Fatalf("an incomplete history: %v", vs)
	}
	// A history that says a wiped replica lost part of its own is right;
	// one that says so of a replica whose disk was kept is not, nor one
	// that misses a replica.
	f.Histories[uk]["eu"] = &api.History{Complete: false, Partial: []string{"us-1"}, Actions: h.Actions}
	if vs := checkHistories(f, nil); len(vs) != 0 {
		t.Fatalf("partial for the wiped replica: %v", vs)
	}
	f.Histories[uk]["eu"] = &api.History{Complete: false, Partial: []string{"eu-1"}, Actions: h.Actions}
	if vs := checkHistories(f, nil); len(vs) != 1 || !strings.Contains(vs[0].Detail, "only [us-1] lost a disk") {
		t.Fatalf("partial for a replica that kept its disk: %v", vs)
	}
	f.Histories[uk]["eu"] = &api.History{Complete: false, Partial: []string{"us-1"}, Missing: []string{"ap-1"}, Actions: h.Actions}
	if vs := checkHistories(f, nil); len(vs) != 1 || !strings.Contains(vs[0].Detail, "whole") {
		t.Fatalf("partial and missing: %v", vs)
	}
}

// Availability counts a write acknowledged at its first attempt, also an
// increment whose failover retry was sent after it anyway; not one
// acknowledged only at a retry, nor one refused or not_ready (the region
// was down), nor a budget operation or a blocked user's like (answers).
func TestAvailabilityCountsFirstAttempts(t *testing.T) {
	ok := incr(1, "us", "c", 1, OutcomeOK, "")
	retried := incr(2, "us", "c", 1, OutcomeOK, "")
	retried.Attempts, retried.Retry, retried.FirstAcked = 2, "eu", true
	late := incr(3, "us", "c", 1, OutcomeOK, "")
	late.Attempts, late.Retry = 2, "eu" // the first timed out; the retry was acknowledged
	down := incr(4, "us", "c", 1, OutcomeFailed, "")
	down.Reason = "not_ready"
	spend := Op{ID: 5, Kind: OpSpend, Outcome: OutcomeRefused, Attempts: 1}
	blocked := Op{ID: 6, Kind: OpLike, Outcome: OutcomeFailed, Reason: "http 403 user_blocked", Attempts: 1}
	a := availability([]Op{ok, retried, late, down, spend, blocked}, func(*Op) bool { return true })
	if a.Attempted != 3 || a.Acked != 2 {
		t.Fatalf("%+v, want 2 of 3", a)
	}
}

// After forged heartbeats (ClocksApart) two actions without client times
// in two regions are ordered by HLCs up to ClockLead apart: a like in a
// region whose clock peers moved a minute ahead beats an unlike sent a
// second later to a region wiped since, whose clock is still behind and
// which has not heard from its peers since before the like, and then a
// stamped unlike 60 s after the like too (seed 2839's lost-acks in CI:
// the like won everywhere, as the order of a user's actions says). In
// one region not wiped, or once the gap is past ClockLead, the later
// action still wins.
func TestModelClocksApartOrderActionsWithoutTimesByHLC(t *testing.T) {
	item := key{Likes: true, ID: "i"}
	u := userKey{"i", "u"}
	const startMs = 1_700_000_000_000
	lead := hlcLead + forgedClockLead + time.Second
	at := func(o Op, start time.Duration) Op {
		o.Start, o.End = start, start+100*time.Millisecond
		return o
	}
	for _, c := range []struct {
		name        string
		apart       bool
		wiped       []string
		secondIn    string        // the unstamped unlike's region
		secondAfter time.Duration // and its send, after the like's
		want        []bool
	}{
		{"clocks together", false, nil, "eu", time.Second, []bool{false}},
		{"clocks apart", true, []string{"eu-1"}, "eu", time.Second, []bool{true, false}},
		{"clocks apart, one region", true, []string{"eu-1"}, "us", time.Second, []bool{false}},
		{"clocks apart, one region wiped", true, []string{"us-1"}, "us", time.Second, []bool{true, false}},
		{"clocks apart, past the lead", true, []string{"eu-1"}, "eu", lead + time.Second, []bool{false}},
	} {
		ops := []Op{
			at(like(1, "us", "i", "u", OutcomeOK), 0),
			at(unlike(2, c.secondIn, "i", "u", OutcomeOK), c.secondAfter),
			// Stamped a minute after the like: inside its HLC's lead.
			stamped(at(unlike(3, "eu", "i", "u", OutcomeOK), c.secondAfter+time.Second), startMs+60_000),
		}
		mo := modelOrder{StartMs: startMs, ClockLead: lead, ClocksApart: c.apart, Wiped: c.wiped}
		m, _ := buildModelOrder(ops, mo)
		got := m.Allowed[u]
		same := len(got) == len(c.want)
		for _, s := range c.want {
			same = same && slices.Contains(got, s)
		}
		if !same {
			t.Errorf("%s: allowed %v, want %v", c.name, got, c.want)
		}
		// Every region saying liked is a lost unlike only where the
		// model rules the like out.
		f := everywhere(map[key]int64{item: 1}, map[userKey]bool{u: true})
		f.StartMs, f.ClockLead, f.ClocksApart, f.Wiped = startMs, lead, c.apart, c.wiped
		_, vs := check(ops, []key{item}, f)
		if slices.Contains(c.want, true) && len(vs) != 0 {
			t.Errorf("%s: final liked flagged: %v", c.name, vs)
		}
		if !slices.Contains(c.want, true) && !slices.Equal(kinds(vs), []string{KindLostAck, KindValueMismatch}) {
			t.Errorf("%s: final liked gave %v, want a lost unlike", c.name, vs)
		}
	}
}
