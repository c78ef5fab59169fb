package chaos

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tally-dev/tally/api"
)

// Violation kinds.
const (
	// KindValueMismatch: a region's final value of a counter or an item's
	// like count differs from the model.
	KindValueMismatch = "value-mismatch"
	// KindDoubleCount: something counted more than once: a counter above
	// the sum of its applied increments, or an item's count above the
	// number of users whose final record says liked.
	KindDoubleCount = "double-count"
	// KindLostAck: an acknowledged operation is not in the final state: a
	// counter below the sum of its applied increments, or a user's final
	// record contradicting that user's last acknowledged action.
	KindLostAck = "lost-ack"
	// KindDisagreement: regions disagree on a user's record.
	KindDisagreement = "disagreement"
	// KindApprox: a final read says approx:true (or unreconciled > 0).
	KindApprox = "approx"
	// KindRollback: a replica's own entry was seen to decrease.
	KindRollback = "rollback"
	// KindUnresolved: a timed-out operation could not be resolved, so the
	// model cannot count it.
	KindUnresolved = "unresolved"
	// KindNotConverged: regions did not converge in time (at the end, or
	// before a wipe), or a final read failed.
	KindNotConverged = "not-converged"
	// KindNotReady: a restarted region did not become ready.
	KindNotReady = "not-ready"
	// KindListMismatch: a region's list of an item's likers is not the
	// users whose records there say liked.
	KindListMismatch = "list-mismatch"
	// KindHistory: a pair's like history differs between regions, or its
	// latest action is not the record's state.
	KindHistory = "history"
	// KindToggle: a toggle's idempotency key, resent to the region that
	// had acknowledged it, flipped the state again (or answered another
	// state) instead of answering duplicate:true and the state the
	// toggle decided.
	KindToggle = "toggle"
	// KindAudit: a region's event log does not account for its own
	// entries (GET /v1/audit), or could not be audited.
	KindAudit = "audit"
	// KindWindow: a region's slots of a key differ from the
	// model's (counters), from another region's or, summed over the run,
	// from the model's count (likes); or could not be read.
	KindWindow = "window"
	// KindTrending: a region's trending list over the run is not the
	// model's top keys with their counts.
	KindTrending = "trending"
	// KindUniques: after the final heal a region's unique count of a key
	// (or of the union of every key, over all time or the last 24 h) is
	// not the estimate of the model's sketch of the acknowledged ids, or
	// differs from another region's, or is not from the sketches of the
	// replicas that acknowledged adds; or could not be read.
	KindUniques = "uniques"
	// KindBudgets: a region's view of a budget, sampled during the run,
	// showed remaining below 0 (or spent above granted), or a replica held
	// negative rights in its own view; or, after the final heal, the
	// regions disagree on a budget, its rights do not add up to its
	// remaining, it is below 0 or outside the model's bounds of the
	// acknowledged grants and spends (each idempotency key once), or the
	// cashback balances do not conserve their sum or do not match what the
	// pool spent; or a budget could not be read.
	KindBudgets = "budgets"
	// KindBlocks: after the final heal a region's block flag of a user is
	// not the latest acknowledged block or unblock (by stamp, then
	// replica), or an acknowledgement's stamp could not be read.
	KindBlocks = "blocks"
	// KindApproxCounter: after the final heal a region's approximate
	// counter is further from the true sum of its increments than its
	// error bound allows, or its read says approx:false (approx.go).
	KindApproxCounter = "approx-counter"
	// KindBudgetDrained: one forged ask for rights, however many it
	// wanted, left a region holding less than half of what it held of a
	// budget (forge episodes; issue 27, item 6: an ask takes at most half
	// of a holder's spare).
	KindBudgetDrained = "budget-drained"
	// KindClockDragged: after heartbeats forged an hour and a day ahead,
	// a region's clock is corrected by more than the minute peers may
	// move it (forge episodes; issue 27, item 8).
	KindClockDragged = "clock-dragged"
	// KindStoppedByHello: after a forged hello claiming its replica id, a
	// region stopped (forge episodes; issue 27, item 8: a hello alone
	// stops no replica).
	KindStoppedByHello = "stopped-by-hello"
)

// Violation is one failed check.
type Violation struct {
	Kind   string `json:"kind"`
	Region string `json:"region,omitempty"`
	Key    string `json:"key,omitempty"`
	User   string `json:"user,omitempty"`
	Op     int64  `json:"op,omitempty"`
	Detail string `json:"detail"`
}

func (v Violation) String() string {
	var b strings.Builder
	b.WriteString(v.Kind)
	for _, f := range []struct{ name, v string }{{"region", v.Region}, {"key", v.Key}, {"user", v.User}} {
		if f.v != "" {
			fmt.Fprintf(&b, " %s=%s", f.name, f.v)
		}
	}
	if v.Op != 0 {
		fmt.Fprintf(&b, " op=%d", v.Op)
	}
	return b.String() + ": " + v.Detail
}

// userKey names one user's record of one item.
type userKey struct{ Item, User string }

// finalState is what the regions say after the final heal.
type finalState struct {
	// Regions are every region; a region missing from a map below could
	// not be read.
	Regions []string
	// Reads are the final reads of every key, per region.
	Reads map[string]map[key]reading
	// Liked are the final records of every user that acted on an item:
	// per region, whether the record says liked.
	Liked map[userKey]map[string]bool
	// Likers are the final like lists: per item, per region, the users
	// listed as liking it. Nil: lists are not checked.
	Likers map[string]map[string][]string
	// Audits are every region's audit of its event log. Nil: not checked.
	Audits map[string]*api.Audit
	// Histories are sampled pairs' like histories, per region. Nil: not
	// checked.
	Histories map[userKey]map[string]*api.History
	// Flags are the final block flags of every user the workload blocked
	// or unblocked: per user, per region. Nil: not checked.
	Flags map[string]map[string]*api.Block
	// StartMs and ClockLead place the actions without a client time
	// among those with one (modelOrder); zero: the run had none with.
	StartMs   int64
	ClockLead time.Duration
	// ClocksApart: the replicas' clocks may have disagreed by up to
	// ClockLead (forged heartbeats moved them; see modelOrder).
	ClocksApart bool
	// Wiped are the replicas whose region lost its data during the run,
	// and with it the history of the actions it had accepted (they are in
	// its region's stream): the latest action of a history is not
	// checked, and a history may say it is partial, for those replicas
	// only.
	Wiped []string
}

// checkHistories reports a sampled pair whose history differs between
// regions, misses a replica, or whose latest action is not what the
// pair's final record says. A history lists actions in the order the
// replicas accepted them (HLC): for a pair with an action carrying its
// client's time (timed), the winner may be an earlier one, and only the
// first two checks apply.
func checkHistories(f finalState, timed map[userKey]bool) []Violation {
	var vs []Violation
	for _, uk := range slices.SortedFunc(maps.Keys(f.Histories), func(a, b userKey) int {
		return strings.Compare(a.String(), b.String())
	}) {
		var first string
		for _, r := range f.Regions {
			h, ok := f.Histories[uk][r]
			if !ok || !h.Complete && (len(h.Missing) > 0 || len(h.Partial) == 0) {
				vs = append(vs, Violation{Kind: KindHistory, Region: r, Key: uk.String(), Detail: "the history could not be read whole"})
				continue
			}
			if p := slices.DeleteFunc(slices.Clone(h.Partial), func(id string) bool { return slices.Contains(f.Wiped, id) }); len(p) > 0 {
				vs = append(vs, Violation{Kind: KindHistory, Region: r, Key: uk.String(),
					Detail: fmt.Sprintf("the history says %v lost part of theirs, but only %v lost a disk", p, f.Wiped)})
				continue
			}
			render := fmt.Sprint(h.Actions)
			if first == "" {
				first = render
			} else if render != first {
				vs = append(vs, Violation{Kind: KindHistory, Region: r, Key: uk.String(), Detail: "the history differs between regions: " + render + " vs " + first})
			}
			if n := len(h.Actions); n > 0 && len(f.Wiped) == 0 && !timed[uk] {
				if liked, ok := f.Liked[uk][r]; ok && h.Actions[n-1].Liked != liked {
					vs = append(vs, Violation{Kind: KindHistory, Region: r, Key: uk.String(),
						Detail: fmt.Sprintf("the latest action in the history says liked=%v, the record %v", h.Actions[n-1].Liked, liked)})
				}
			}
		}
	}
	return vs
}

// checkToggles reports an acknowledged toggle whose key, resent to the
// same region, did not answer duplicate:true with the state the toggle
// answered: the region flipped it twice.
func checkToggles(ops []Op) []Violation {
	var vs []Violation
	for i := range ops {
		o := &ops[i]
		if o.Kind != OpToggle || o.Outcome != OutcomeOK || o.ResendOutcome != OutcomeOK {
			continue
		}
		if !o.ResendDuplicate || o.ResendLiked != o.Liked {
			vs = append(vs, Violation{Kind: KindToggle, Region: o.Region, Key: o.Key, User: o.User, Op: o.ID,
				Detail: fmt.Sprintf("toggle %s answered liked=%v; its key resent to %s answered liked=%v duplicate=%v, not the same state as a duplicate",
					o.Idem, o.Liked, o.Region, o.ResendLiked, o.ResendDuplicate)})
		}
	}
	return vs
}

// checkAudits reports every region whose event log does not account for
// its own entries: each region's stored own entries are what every region
// converged to (checked above), so the logs together account for every
// count.
func checkAudits(f finalState) []Violation {
	if f.Audits == nil {
		return nil
	}
	var vs []Violation
	for _, r := range f.Regions {
		a, ok := f.Audits[r]
		switch {
		case !ok:
			vs = append(vs, Violation{Kind: KindAudit, Region: r, Detail: "the audit could not be read"})
		case !a.Complete:
			vs = append(vs, Violation{Kind: KindAudit, Region: r, Detail: fmt.Sprintf("the log was trimmed (first event %d): the audit cannot be exact", a.FirstSeq)})
		}
		if !ok {
			continue
		}
		for _, d := range a.Diffs {
			k := key{ID: d.Key, Likes: d.Kind == "likes"}
			vs = append(vs, Violation{Kind: KindAudit, Region: r, Key: k.String(),
				Detail: fmt.Sprintf("the log accounts for %+v of %s's own entry, the store holds %+v", d.Logged, a.Replica, d.Stored)})
		}
	}
	return vs
}

// model is what the final state must be, derived from the history alone
// (and, for users whose winning action the history cannot tell, such as a
// last concurrent pair, from the final records, which may then say either
// action).
type model struct {
	// Counters: per counter key, the sums of its applied increments (P)
	// and decrements (N); its value is P - N.
	Counters map[string]PN
	// Allowed: per user record, the states the final record may have:
	// those of the acknowledged actions no other acknowledged action
	// certainly beats (modelOrder): the last action, either of a last
	// concurrent pair, or the latest by the client's time.
	Allowed map[userKey][]bool
	// LastOp is the id of the last such action that Allowed derives
	// from.
	LastOp map[userKey]int64
	// Uncertain holds counters and users whose history has an operation
	// that could not be resolved: they are not checked against the model.
	Uncertain map[string]bool
}

// modelOrder is what the model knows of the order of a user's actions of
// an item (crdt.LikeRecord.Wins): their time, the client's if it gave one
// (Op.At), else the HLC's, which the model knows only within the action's
// span: at least its first send (a replica's HLC is never behind the wall
// clock) and at most its last answer plus ClockLead.
type modelOrder struct {
	// StartMs is the run's start (unix ms), which Op.Start and Op.End
	// count from.
	StartMs int64
	// ClockLead is how far ahead of the wall clock a replica's HLC may
	// run (hlcLead, and forgedClockLead after forged heartbeats).
	ClockLead time.Duration
	// ClocksApart: the replicas' clocks may have disagreed by up to
	// ClockLead (a forge episode's heartbeats moved every replica's clock
	// a minute ahead, and a replica restarted or wiped after it starts at
	// its own wall clock and follows its peers back 10 s a round, while
	// it accepts writes). Then two actions without client times in two
	// regions are ordered by HLCs up to ClockLead apart, not by when they
	// happened (see beats).
	ClocksApart bool
	// Wiped are the replicas whose data dir was wiped during the run. A
	// run with forged clocks is not sharded: one replica a region
	// (replicaID).
	Wiped []string
}

// beats reports whether acknowledged action y certainly wins over x,
// by the order of the records. Two actions without client times are in
// the order the client sent them (id order, as each user's actions are
// one after the other), but for the two of a concurrent pair, and, if
// the clocks were apart, for two in different regions less than
// ClockLead apart.
func (mo modelOrder) beats(y, x *Op) bool {
	switch {
	case y.At != 0 && x.At != 0:
		return y.At > x.At // a tie goes to the HLC, which the model does not know
	case y.At == 0 && x.At == 0:
		if y.ID <= x.ID || x.Pair != 0 && x.Pair == y.Pair {
			return false
		}
		// Without client times the order is the HLC's
		// (crdt.LikeRecord.Wins), and a later action's HLC is above an
		// earlier one's only where the earlier one is known: at its own
		// region (the writer stamps an action above the record it finds,
		// region.likeState), unless that region lost its data since. A
		// region that has not heard of it yet stamps by its own clock or
		// the latest stamp it heard, whichever is ahead, which may be up
		// to ClockLead behind the earlier action's: a like in a region a
		// minute ahead beats an unlike sent a second later to a region
		// wiped since, still following its peers' clocks back and cut
		// off from them (seed 2839 in CI: eu's NATS restarted while its
		// clock was 50 s behind its peers').
		return !mo.ClocksApart || y.Start > x.End+mo.ClockLead ||
			y.Region == x.Region && !slices.Contains(mo.Wiped, replicaID(x.Region))
	case y.At != 0:
		return y.At > mo.StartMs+(x.End+mo.ClockLead).Milliseconds()
	default:
		return mo.StartMs+y.Start.Milliseconds() > x.At
	}
}

// buildModel derives the model from the operations, which must be sorted
// by id. Each user's operations are serialized by the client, so id order
// is each user's action order; a pair's two operations have consecutive
// ids.
func buildModel(ops []Op) (model, []Violation) { return buildModelOrder(ops, modelOrder{}) }

// buildModelOrder is buildModel knowing the run's clocks, for actions
// with and without client times.
func buildModelOrder(ops []Op, mo modelOrder) (model, []Violation) {
	m := model{Counters: map[string]PN{}, Allowed: map[userKey][]bool{}, LastOp: map[userKey]int64{}, Uncertain: map[string]bool{}}
	var vs []Violation
	acked := map[userKey][]*Op{} // the acknowledged actions
	// maybe: a like or unlike that may have applied: its first attempt
	// timed out and its retry was refused because the user had been
	// blocked meanwhile (blocks.go).
	maybe := map[userKey][]*Op{}
	for i := range ops {
		o := &ops[i]
		switch {
		case o.Kind == OpIncr:
			c := m.Counters[o.Key]
			switch {
			case o.applied():
				if o.By >= 0 {
					c.P += uint64(o.By)
				} else {
					c.N += uint64(-o.By)
				}
			case o.Outcome == OutcomeTimeout:
				m.Uncertain[key{ID: o.Key}.String()] = true
				vs = append(vs, Violation{Kind: KindUnresolved, Region: o.Region, Key: o.Key, Op: o.ID,
					Detail: fmt.Sprintf("increment by %d (idempotency key %s) timed out and could not be resolved", o.By, o.Idem)})
			}
			m.Counters[o.Key] = c
		case o.likeOp():
			uk := userKey{o.Key, o.User}
			switch {
			case o.Outcome == OutcomeOK:
				acked[uk] = append(acked[uk], o)
			case o.Outcome == OutcomeTimeout && o.BlockedRetry && o.Kind == OpToggle:
				m.Uncertain[uk.String()] = true // which way it flipped, if it did, nobody saw
			case o.Outcome == OutcomeTimeout && o.BlockedRetry:
				maybe[uk] = append(maybe[uk], o)
			case o.Outcome == OutcomeTimeout:
				m.Uncertain[uk.String()] = true
				vs = append(vs, Violation{Kind: KindUnresolved, Region: o.Region, Key: o.Key, User: o.User, Op: o.ID,
					Detail: fmt.Sprintf("%s was never acknowledged after %d attempts", o.Kind, o.Attempts)})
			}
			if _, ok := acked[uk]; !ok {
				acked[uk] = nil // acted on, with no acknowledged action yet: not liked
			}
		}
	}
	for uk, as := range acked {
		var states []bool
		// The candidates: every action no acknowledged one certainly
		// beats; a maybe-applied one only counts if it applied.
		for _, x := range append(slices.Clone(as), maybe[uk]...) {
			if slices.ContainsFunc(as, func(y *Op) bool { return y != x && mo.beats(y, x) }) {
				continue
			}
			liked, _ := x.likeState()
			if !slices.Contains(states, liked) {
				states = append(states, liked)
			}
			if x.Outcome == OutcomeOK {
				m.LastOp[uk] = max(m.LastOp[uk], x.ID)
			}
		}
		if len(as) == 0 {
			// Nothing acknowledged: not liked, or what a maybe did.
			if !slices.Contains(states, false) {
				states = append(states, false)
			}
		}
		m.Allowed[uk] = states
	}
	return m, vs
}

func (uk userKey) String() string { return "likes/" + uk.Item + "/" + uk.User }

// check compares the final state with the model. keys are every key the
// workload could touch; items no user acted on must read 0. It returns the
// model's value of every key (absent: uncertain) and the violations.
func check(ops []Op, keys []key, f finalState) (map[key]int64, []Violation) {
	m, vs := buildModelOrder(ops, modelOrder{StartMs: f.StartMs, ClockLead: f.ClockLead, ClocksApart: f.ClocksApart, Wiped: f.Wiped})
	vs = append(vs, checkToggles(ops)...)
	timed := map[userKey]bool{}
	for i := range ops {
		if o := &ops[i]; o.likeOp() && o.At != 0 {
			timed[userKey{o.Key, o.User}] = true
		}
	}
	flags, fvs := buildFlags(ops)
	vs = append(vs, fvs...)
	vs = append(vs, checkFlags(flags, f)...)
	wants := map[key]int64{}
	byID := map[int64]*Op{}
	for i := range ops {
		byID[ops[i].ID] = &ops[i]
	}
	// Users: regions agree, and the record matches the last action.
	final := map[userKey]bool{} // the agreed (or first region's) state
	users := make([]userKey, 0, len(m.Allowed))
	for uk := range m.Allowed {
		users = append(users, uk)
	}
	sort.Slice(users, func(i, j int) bool { return users[i].String() < users[j].String() })
	perItem := map[string][]userKey{}
	for _, uk := range users {
		perItem[uk.Item] = append(perItem[uk.Item], uk)
		var seen []string
		first, have := false, false
		agree := true
		for _, r := range f.Regions {
			liked, ok := f.Liked[uk][r]
			if !ok {
				vs = append(vs, Violation{Kind: KindNotConverged, Region: r, Key: uk.Item, User: uk.User, Detail: "the final record could not be read"})
				continue
			}
			seen = append(seen, fmt.Sprintf("%s:%v", r, liked))
			if !have {
				first, have = liked, true
			} else if liked != first {
				agree = false
			}
		}
		final[uk] = first
		if !agree {
			vs = append(vs, Violation{Kind: KindDisagreement, Key: uk.Item, User: uk.User,
				Detail: "regions disagree on liked: " + strings.Join(seen, " ")})
			continue
		}
		if !have || m.Uncertain[uk.String()] || slices.Contains(m.Allowed[uk], first) {
			continue
		}
		detail := fmt.Sprintf("every region says liked=%v, but the user's winning acknowledged action says otherwise", first)
		if o := byID[m.LastOp[uk]]; o != nil {
			liked, _ := o.likeState()
			at := ""
			if o.At != 0 {
				at = fmt.Sprintf(", client time %s", time.UnixMilli(o.At).UTC().Format("15:04:05.000"))
			}
			detail = fmt.Sprintf("every region says liked=%v, but the user's winning acknowledged action was %s at %s (op %d, liked=%v, acknowledged at %.2fs after %d attempt(s)%s)",
				first, o.Kind, o.Region, o.ID, liked, o.End.Seconds(), o.Attempts, at)
		}
		vs = append(vs, Violation{Kind: KindLostAck, Key: uk.Item, User: uk.User, Op: m.LastOp[uk], Detail: detail})
	}
	vs = append(vs, checkLists(keys, perItem, f)...)
	vs = append(vs, checkAudits(f)...)
	vs = append(vs, checkHistories(f, timed)...)
	// Values.
	for _, k := range keys {
		var want, liked int64 // liked: users whose final record says liked
		uncertain := m.Uncertain[k.String()]
		if k.Likes {
			for _, uk := range perItem[k.ID] {
				if final[uk] {
					liked++
				}
				if flags.Uncertain[uk.User] {
					uncertain = true
					continue
				}
				if flags.blocked(uk.User) {
					continue // a blocked user's like counts nowhere
				}
				allowed := m.Allowed[uk]
				switch {
				case m.Uncertain[uk.String()]:
					uncertain = true
				case len(allowed) == 1 && allowed[0]:
					want++
				case len(allowed) == 2 && final[uk]:
					want++ // a concurrent pair: the record decides
				}
			}
		} else {
			c := m.Counters[k.ID]
			want = int64(c.P) - int64(c.N)
		}
		if !uncertain {
			wants[k] = want
		}
		for _, r := range f.Regions {
			rd, ok := f.Reads[r][k]
			if !ok {
				vs = append(vs, Violation{Kind: KindNotConverged, Region: r, Key: k.String(), Detail: "the final value could not be read"})
				continue
			}
			if rd.Approx || rd.Unreconciled > 0 {
				vs = append(vs, Violation{Kind: KindApprox, Region: r, Key: k.String(),
					Detail: fmt.Sprintf("the final read says approx:%v unreconciled:%d", rd.Approx, rd.Unreconciled)})
			}
			if k.Likes && rd.Value > liked {
				vs = append(vs, Violation{Kind: KindDoubleCount, Region: r, Key: k.String(),
					Detail: fmt.Sprintf("count %d, but only %d users' final records say liked", rd.Value, liked)})
			}
			if uncertain {
				continue
			}
			if !k.Likes {
				vs = append(vs, counterDiagnosis(r, k, rd, m.Counters[k.ID])...)
			}
			if rd.Value != want {
				vs = append(vs, Violation{Kind: KindValueMismatch, Region: r, Key: k.String(),
					Detail: fmt.Sprintf("reads %d, model %d (%+d)", rd.Value, want, rd.Value-want)})
			}
		}
	}
	return wants, vs
}

// counterDiagnosis tells a counter's lost acknowledged writes from double
// counts. Both halves of a vector only grow, and a region that applied an
// idempotency key a second time takes it back by raising the other half,
// so a half below the model's means acknowledged increments (P) or
// decrements (N) are missing, and a value above the model's with no
// decrement missing means something counted twice.
func counterDiagnosis(region string, k key, rd reading, want PN) []Violation {
	var got PN
	for _, e := range rd.Replicas {
		got.P += e.P
		got.N += e.N
	}
	var vs []Violation
	for _, h := range []struct {
		what      string
		got, want uint64
	}{{"increments", got.P, want.P}, {"decrements", got.N, want.N}} {
		if h.got < h.want {
			vs = append(vs, Violation{Kind: KindLostAck, Region: region, Key: k.String(),
				Detail: fmt.Sprintf("applied %s sum to %d but the vector holds %d: acknowledged %s are missing", h.what, h.want, h.got, h.what)})
		}
	}
	if v, w := int64(got.P)-int64(got.N), int64(want.P)-int64(want.N); v > w && got.N >= want.N {
		vs = append(vs, Violation{Kind: KindDoubleCount, Region: region, Key: k.String(),
			Detail: fmt.Sprintf("value %d, applied increments and decrements add up to %d: %d counted more than once (vector halves %d/%d, applied %d/%d)",
				v, w, v-w, got.P, got.N, want.P, want.N)})
	}
	return vs
}

// checkLists compares every region's like list of each item with the
// region's records: exactly the users whose record says liked, each once.
// As every region's records agree (checked above), so then do the lists.
func checkLists(keys []key, perItem map[string][]userKey, f finalState) []Violation {
	if f.Likers == nil {
		return nil
	}
	var vs []Violation
	for _, k := range keys {
		if !k.Likes {
			continue
		}
		for _, r := range f.Regions {
			listed, ok := f.Likers[k.ID][r]
			if !ok {
				vs = append(vs, Violation{Kind: KindNotConverged, Region: r, Key: k.String(), Detail: "the like list could not be read"})
				continue
			}
			var want []string
			for _, uk := range perItem[k.ID] {
				if f.Liked[uk][r] {
					want = append(want, uk.User)
				}
			}
			sort.Strings(want)
			got := slices.Clone(listed)
			sort.Strings(got)
			if !slices.Equal(got, want) {
				missing, extra := setDiff(want, got), setDiff(got, want)
				vs = append(vs, Violation{Kind: KindListMismatch, Region: r, Key: k.String(),
					Detail: fmt.Sprintf("lists %d likers, the records say %d: %d missing %v, %d extra %v",
						len(got), len(want), len(missing), firstFew(missing), len(extra), firstFew(extra))})
			}
		}
	}
	return vs
}

// setDiff is the elements of sorted a not in sorted b (duplicates in a
// count as extra).
func setDiff(a, b []string) []string {
	var out []string
	j := 0
	for i, x := range a {
		for j < len(b) && b[j] < x {
			j++
		}
		if j < len(b) && b[j] == x && (i == 0 || a[i-1] != x) {
			continue
		}
		out = append(out, x)
	}
	return out
}

// firstFew is up to 5 of l, for messages.
func firstFew(l []string) []string { return l[:min(len(l), 5)] }
