package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/alloc"
	"github.com/tally-dev/tally/milestone"
)

// A hand-made numbering: rule every:5; numbers 1..22 were leased and five
// of them left unused, so 17 numbers were used (the dense rank) and the
// milestones reached are 5, 10 and 15 (20 is not yet).

var msStart = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func msEvent(n uint64, region, item, user string, at time.Duration, seq uint64) milestone.Event {
	return milestone.Event{Sequence: "likes", Number: n, Item: item, User: user, Region: region,
		Replica: replicaID(region), Time: msStart.Add(at), StreamSeq: seq}
}

func msFixture(t *testing.T) ([]Op, milestoneFinal) {
	t.Helper()
	rule, err := milestone.ParseRule("every:5")
	if err != nil {
		t.Fatal(err)
	}
	likeAt := func(id int64, region, item, user string, at time.Duration) Op {
		o := like(id, region, item, user, OutcomeOK)
		o.Start, o.End = at, at+20*time.Millisecond
		return o
	}
	ops := []Op{
		likeAt(1, "us", "i", "a", time.Second),
		likeAt(2, "eu", "i", "b", 2*time.Second),
		likeAt(3, "ap", "j", "c", 3*time.Second),
		unlike(4, "ap", "j", "d", OutcomeOK),
	}
	evs := []milestone.Event{
		msEvent(5, "us", "i", "a", time.Second+10*time.Millisecond, 1),
		msEvent(10, "eu", "i", "b", 2*time.Second+10*time.Millisecond, 2),
		msEvent(15, "ap", "j", "c", 3*time.Second+10*time.Millisecond, 3),
	}
	st := alloc.NewState()
	st.HWM, st.NextEpoch = 23, 4
	st.Dense = alloc.Dense{Pos: 23, Rank: 17}
	f := milestoneFinal{
		Rule: rule, Regions: regions3, Seq: st, Claims: map[uint64]milestone.Event{},
		Events: map[string][]milestone.Event{}, Synced: map[string]bool{},
		Status: map[string]numberingStatus{}, Lost: map[string]float64{}, Errs: map[string]error{},
	}
	for _, e := range evs {
		c := e
		c.StreamSeq = 0 // a claim is the event before it was published
		f.Claims[e.Number] = c
	}
	for _, r := range regions3 {
		f.Events[r] = slices.Clone(evs)
		f.Synced[r] = true
		f.Status[r] = numberingStatus{}
		f.Lost[r] = 0
	}
	return ops, f
}

func TestMilestonesExactStatePasses(t *testing.T) {
	ops, f := msFixture(t)
	res, vs := checkMilestones(ops, msStart, f)
	if len(vs) != 0 {
		t.Fatalf("exact state flagged: %v", vs)
	}
	if res.Milestones != 3 || res.Numbers != 17 || res.HWM != 23 {
		t.Fatalf("checked %+v, want 3 milestones of 17 numbers below 23", res)
	}
}

func TestMilestonesEachFaultIsCaught(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(ops []Op, f *milestoneFinal)
		kinds  []string
		detail string
	}{
		{
			name: "skipped: a used milestone never claimed",
			mutate: func(_ []Op, f *milestoneFinal) {
				delete(f.Claims, 10)
				for _, r := range regions3 {
					f.Events[r] = slices.DeleteFunc(f.Events[r], func(e milestone.Event) bool { return e.Number == 10 })
				}
			},
			kinds: []string{KindMilestoneSkipped}, detail: "milestone 10 was reached",
		},
		{
			name: "claimed, never published",
			mutate: func(_ []Op, f *milestoneFinal) {
				for _, r := range regions3 {
					f.Events[r] = f.Events[r][:2]
				}
			},
			kinds: []string{KindMilestoneDisagreement, KindMilestoneSkipped}, detail: "claimed, never published",
		},
		{
			name: "a region misses one",
			mutate: func(_ []Op, f *milestoneFinal) {
				f.Events["eu"] = f.Events["eu"][1:]
			},
			kinds: []string{KindMilestoneDisagreement}, detail: "does not list milestone 5",
		},
		{
			name: "a region lists one twice",
			mutate: func(_ []Op, f *milestoneFinal) {
				f.Events["ap"] = append(f.Events["ap"], f.Events["ap"][0])
			},
			kinds: []string{KindMilestoneTwice}, detail: "lists milestone 5 twice",
		},
		{
			name: "a lost claim: two likes carried one number",
			mutate: func(_ []Op, f *milestoneFinal) {
				f.Lost["eu"] = 1
			},
			kinds: []string{KindMilestoneTwice}, detail: "tally_milestones_lost_total",
		},
		{
			name: "a milestone not yet reached fired",
			mutate: func(_ []Op, f *milestoneFinal) {
				e := msEvent(20, "us", "i", "a", time.Second, 4)
				for _, r := range regions3 {
					f.Events[r] = append(f.Events[r], e)
				}
				e.StreamSeq = 0
				f.Claims[20] = e
			},
			kinds: []string{KindMilestoneBogus}, detail: "fired early",
		},
		{
			name: "a number that is no milestone fired",
			mutate: func(_ []Op, f *milestoneFinal) {
				e := msEvent(7, "us", "i", "a", time.Second, 4)
				for _, r := range regions3 {
					f.Events[r] = append(f.Events[r], e)
				}
				e.StreamSeq = 0
				f.Claims[7] = e
			},
			kinds: []string{KindMilestoneBogus}, detail: "no milestone of every:5",
		},
		{
			name: "a like done elsewhere",
			mutate: func(ops []Op, _ *milestoneFinal) {
				ops[2].Region = "us"
			},
			kinds: []string{KindMilestoneBogus}, detail: "never liked j as c there",
		},
		{
			name: "a like done much later",
			mutate: func(ops []Op, _ *milestoneFinal) {
				ops[1].Start, ops[1].End = 9*time.Second, 9*time.Second
			},
			kinds: []string{KindMilestoneBogus}, detail: "were sent at op 2 9.0s",
		},
		{
			name: "claim and event name different likes",
			mutate: func(_ []Op, f *milestoneFinal) {
				c := f.Claims[15]
				c.User = "z"
				f.Claims[15] = c
			},
			kinds: []string{KindMilestoneTwice}, detail: "published for",
		},
		{
			name: "unsettled: queued likes, a lease, an unsynced feed",
			mutate: func(_ []Op, f *milestoneFinal) {
				st := f.Status["us"]
				st.Unnumbered = 3
				f.Status["us"] = st
				f.Synced["ap"] = false
				f.Seq.Leases = []alloc.Lease{{Epoch: 3, Leaseholder: "eu-1", Span: alloc.Span{Start: 16, End: 23}, Used: 18}}
			},
			kinds: []string{KindMilestoneUnsettled}, detail: "wait for a number",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops, f := msFixture(t)
			tc.mutate(ops, &f)
			_, vs := checkMilestones(ops, msStart, f)
			if got := kinds(vs); !slices.Equal(got, tc.kinds) {
				t.Fatalf("kinds %v, want %v: %v", got, tc.kinds, vs)
			}
			if !slices.ContainsFunc(vs, func(v Violation) bool { return strings.Contains(v.Detail, tc.detail) }) {
				t.Fatalf("no violation says %q: %v", tc.detail, vs)
			}
		})
	}
}

// Blocks whose ranks nobody took are numbering not settled.
func TestMilestonesUntakenRanksAreUnsettled(t *testing.T) {
	ops, f := msFixture(t)
	f.Seq.Closed = []alloc.Closed{{Epoch: 2, Leaseholder: "eu-1", Span: alloc.Span{Start: 1, End: 5}, Used: 3, Folded: true}}
	_, vs := checkMilestones(ops, msStart, f)
	if got := kinds(vs); !slices.Equal(got, []string{KindMilestoneUnsettled}) {
		t.Fatalf("kinds %v, want milestone-unsettled: %v", got, vs)
	}
}
