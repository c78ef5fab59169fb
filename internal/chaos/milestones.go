package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/alloc"
	"github.com/tally-dev/tally/internal/base/poll"
	"github.com/tally-dev/tally/milestone"
)

// Milestone checks. The regions number every counted like from the global
// "likes" sequence, leased in blocks from the allocator's KV; a used
// number's rank among all used numbers is final once every block below it
// is closed, and the ranks of Config.Milestones fire exactly once. After
// the final heal numbering settles: queued likes get their numbers, idle
// holders give their leases back, every number is final, and every block's
// ranks are taken. Then the allocator's state says how many numbers were
// used (its dense rank). Each milestone up to that rank must have fired
// once, for a like the workload did, none above it, and every region must
// list the same events.

// likesSequence is the sequence tallyd numbers counted likes from.
const likesSequence = "likes"

// Milestone violation kinds.
const (
	// KindMilestoneSkipped: a milestone rank was reached (at or below the
	// allocator's dense rank) but fired nowhere.
	KindMilestoneSkipped = "milestone-skipped"
	// KindMilestoneTwice: two likes carried the same number (a claim found
	// its number claimed by another like: tally_milestones_lost_total > 0),
	// or a region lists a number twice.
	KindMilestoneTwice = "milestone-twice"
	// KindMilestoneDisagreement: regions list different events, or the
	// events differ from the claims in the KV.
	KindMilestoneDisagreement = "milestone-disagreement"
	// KindMilestoneBogus: an event that cannot be: not a milestone of the
	// rule, a rank never reached (fired early), or not a like the workload
	// did in the event's region around the event's time.
	KindMilestoneBogus = "milestone-bogus"
	// KindMilestoneUnsettled: numbering did not settle after the final
	// heal: likes still wait for numbers, leases are still held, a feed is
	// not synced, or something could not be read.
	KindMilestoneUnsettled = "milestone-unsettled"
)

// milestoneFinal is what the regions and the allocator say of numbering.
type milestoneFinal struct {
	Rule    milestone.Rule
	Regions []string
	// Seq is the likes sequence's allocator state; nil if unread (SeqErr).
	Seq    *alloc.State
	SeqErr error
	// Claims are the claim keys in the KV, by number; nil if unread.
	Claims    map[uint64]milestone.Event
	ClaimsErr error
	// Per region: GET /v1/milestones and its synced flag, the numbering
	// part of /v1/status, and tally_milestones_lost_total summed over the
	// region's processes. A region missing from Events could not be read
	// (Errs says why).
	Events map[string][]milestone.Event
	Synced map[string]bool
	Status map[string]numberingStatus
	Lost   map[string]float64
	Errs   map[string]error
	// ClockLead is how far ahead of the harness's clock the regions'
	// clocks may run (forgedClockLead after a forge episode; else 0): an
	// event's time may be that much later than its like's answer.
	ClockLead time.Duration
}

// milestoneResult says how much the milestone check covered.
type milestoneResult struct {
	// Milestones: milestone ranks up to the dense rank, each of which was
	// checked to have fired exactly once.
	Milestones int
	// Numbers: numbers the regions used (the dense rank).
	Numbers uint64
	// HWM is the sequence's high-water mark.
	HWM uint64
}

// timeSlack bounds how far an event's time (the replica's clock when it
// counted the like) may be from the client's send and answer times of the
// like it names: the processes share one machine's clock.
const timeSlack = 2 * time.Second

// checkMilestones checks f against the history: ops are the workload's
// operations, their times offsets from start.
func checkMilestones(ops []Op, start time.Time, f milestoneFinal) (milestoneResult, []Violation) {
	var vs []Violation
	add := func(kind, region, detail string, args ...any) {
		vs = append(vs, Violation{Kind: kind, Region: region, Key: "milestones", Detail: fmt.Sprintf(detail, args...)})
	}

	// Settled, and no number used twice.
	for _, r := range f.Regions {
		if err := f.Errs[r]; err != nil {
			add(KindMilestoneUnsettled, r, "could not read numbering: %v", err)
		}
		if st, ok := f.Status[r]; ok {
			if st.Unnumbered > 0 {
				add(KindMilestoneUnsettled, r, "%d counted likes still wait for a number", st.Unnumbered)
			}
			if n := len(st.Lease.Leases); n > 0 {
				add(KindMilestoneUnsettled, r, "still holds %d lease(s) with no likes coming (an idle holder gives its tail back)", n)
			}
		}
		if _, ok := f.Events[r]; ok && !f.Synced[r] {
			add(KindMilestoneUnsettled, r, "its milestone feed has not read the whole stream (synced:false)")
		}
		if f.Lost[r] > 0 {
			add(KindMilestoneTwice, r, "%.0f claim(s) found their number already claimed by another like (tally_milestones_lost_total, all its processes): two likes carried the same number", f.Lost[r])
		}
	}
	if f.Seq == nil {
		add(KindMilestoneUnsettled, "", "could not read the allocator's state: %v", f.SeqErr)
	} else if len(f.Seq.Leases) > 0 {
		var ls []string
		for _, l := range f.Seq.Leases {
			ls = append(ls, fmt.Sprintf("%s [%d,%d) used %d", l.Leaseholder, l.Start, l.End, l.Used))
		}
		add(KindMilestoneUnsettled, "", "leases still held in the KV: %s", strings.Join(ls, "; "))
	} else if st := f.Seq; st.Dense.Pos != st.HWM || len(st.Closed) > 0 {
		add(KindMilestoneUnsettled, "", "numbers not all final (dense %+v of hwm %d), or blocks whose ranks were not taken: %+v", st.Dense, st.HWM, st.Closed)
	}
	if f.Claims == nil {
		add(KindMilestoneUnsettled, "", "could not read the claims in the KV: %v", f.ClaimsErr)
	}

	// Every region lists the same events, each number once.
	all := map[uint64]milestone.Event{} // the first region's event of each number
	byRegion := map[string]map[uint64]milestone.Event{}
	var read []string
	for _, r := range f.Regions {
		evs, ok := f.Events[r]
		if !ok {
			continue
		}
		read = append(read, r)
		m := map[uint64]milestone.Event{}
		for _, e := range evs {
			if _, dup := m[e.Number]; dup {
				add(KindMilestoneTwice, r, "lists milestone %d twice", e.Number)
			}
			m[e.Number] = e
			if _, ok := all[e.Number]; !ok {
				all[e.Number] = e
			}
		}
		byRegion[r] = m
	}
	numbers := slices.Sorted(maps.Keys(all))
	for _, n := range numbers {
		want := all[n]
		for _, r := range read {
			got, ok := byRegion[r][n]
			switch {
			case !ok:
				add(KindMilestoneDisagreement, r, "does not list milestone %d (%s)", n, eventString(want))
			case !sameLike(got, want) || got.StreamSeq != want.StreamSeq:
				add(KindMilestoneDisagreement, r, "lists milestone %d as %s, another region as %s", n, eventString(got), eventString(want))
			}
		}
	}
	if f.Claims != nil {
		for _, n := range slices.Sorted(maps.Keys(f.Claims)) {
			c := f.Claims[n]
			e, ok := all[n]
			switch {
			case !ok:
				add(KindMilestoneDisagreement, "", "milestone %d is claimed in the KV (%s) but no region lists it: claimed, never published", n, eventString(c))
			case !sameLike(c, e):
				add(KindMilestoneTwice, "", "milestone %d is claimed in the KV for %s but published for %s", n, eventString(c), eventString(e))
			}
		}
		for _, n := range numbers {
			if _, ok := f.Claims[n]; !ok {
				add(KindMilestoneBogus, "", "milestone %d (%s) is published with no claim in the KV", n, eventString(all[n]))
			}
		}
	}

	// None skipped, none early, none made up.
	var res milestoneResult
	if f.Seq != nil {
		st := f.Seq
		res.HWM = st.HWM
		res.Numbers = st.Dense.Rank
		for _, m := range f.Rule.Upto(st.Dense.Rank) {
			res.Milestones++
			if _, ok := all[m]; ok {
				continue
			}
			detail := "milestone %d was reached (%d numbers used) but fired nowhere"
			if c, ok := f.Claims[m]; ok {
				detail += fmt.Sprintf("; it is claimed in the KV by %s", eventString(c))
			}
			add(KindMilestoneSkipped, "", detail, m, st.Dense.Rank)
		}
		for _, n := range numbers {
			switch {
			case !f.Rule.Hit(n):
				add(KindMilestoneBogus, "", "%d fired (%s) but is no milestone of %s", n, eventString(all[n]), f.Rule)
			case n > st.Dense.Rank:
				add(KindMilestoneBogus, "", "%d fired (%s) but only %d numbers were used: fired early", n, eventString(all[n]), st.Dense.Rank)
			}
		}
	}

	// Each event is a like the workload did, in the event's region.
	type like struct{ region, item, user string }
	likes := map[like][]*Op{}
	for i := range ops {
		o := &ops[i]
		// (A toggle likes if it answered so, and may have if it timed
		// out.)
		if (o.Kind == OpLike || o.Kind == OpToggle && (o.Liked || o.Outcome == OutcomeTimeout)) &&
			(o.Outcome == OutcomeOK || o.Outcome == OutcomeTimeout) {
			k := like{o.Region, o.Key, o.User}
			likes[k] = append(likes[k], o)
		}
	}
	for _, n := range numbers {
		e := all[n]
		// f.Regions are the views: regions, or replicas in a sharded run.
		known := slices.Contains(f.Regions, e.Region) && e.Replica == replicaID(e.Region) ||
			slices.Contains(f.Regions, e.Replica) && strings.HasPrefix(e.Replica, e.Region+"-")
		if e.Sequence != likesSequence || !known {
			add(KindMilestoneBogus, "", "milestone %d: %s is not a like of sequence %q counted by a region's replica", n, eventString(e), likesSequence)
			continue
		}
		cands := likes[like{e.Region, e.Item, e.User}]
		if len(cands) == 0 {
			add(KindMilestoneBogus, e.Region, "milestone %d names %s, but the workload never liked %s as %s there", n, eventString(e), e.Item, e.User)
			continue
		}
		found := false
		for _, o := range cands {
			from, to := start.Add(o.Start-timeSlack), start.Add(o.End+timeSlack+f.ClockLead)
			if !e.Time.Before(from) && !e.Time.After(to) {
				found = true
				break
			}
		}
		if !found {
			add(KindMilestoneBogus, e.Region, "milestone %d names %s, at %.1fs of the run, but the workload's likes of %s as %s there were sent at %s",
				n, eventString(e), e.Time.Sub(start).Seconds(), e.Item, e.User, opTimes(cands))
		}
	}
	return res, vs
}

// sameLike reports whether a claim and an event are of the same like.
func sameLike(a, b milestone.Event) bool {
	return a.Sequence == b.Sequence && a.Number == b.Number && a.Item == b.Item && a.User == b.User &&
		a.Region == b.Region && a.Replica == b.Replica && a.Time.Equal(b.Time)
}

func eventString(e milestone.Event) string {
	return fmt.Sprintf("%s liking %s at %s (%s, %s)", e.User, e.Item, e.Region, e.Replica, e.Time.Format("15:04:05.000"))
}

func opTimes(ops []*Op) string {
	var parts []string
	for i, o := range ops {
		if i == 5 {
			parts = append(parts, fmt.Sprintf("... %d more", len(ops)-5))
			break
		}
		parts = append(parts, fmt.Sprintf("op %d %.1fs-%.1fs", o.ID, o.Start.Seconds(), o.End.Seconds()))
	}
	return strings.Join(parts, ", ")
}

// settleMilestones waits until numbering has settled and passes the
// milestone check, or until timeout, and returns the last check. Settling
// takes the holders' idle time (2 s without likes) and a claim retry.
// lead is milestoneFinal.ClockLead.
func settleMilestones(ctx context.Context, d *deployment, ops []Op, start time.Time, lead, timeout time.Duration) (milestoneResult, []Violation) {
	rule, err := milestone.ParseRule(d.cfg.Milestones)
	if err != nil {
		return milestoneResult{}, []Violation{{Kind: KindMilestoneUnsettled, Key: "milestones", Detail: err.Error()}}
	}
	deadline := time.Now().Add(timeout)
	nc, js, err := connectAllocator(d)
	if err != nil {
		return milestoneResult{}, []Violation{{Kind: KindMilestoneUnsettled, Key: "milestones", Detail: err.Error()}}
	}
	defer nc.Close()
	for {
		f := collectMilestones(ctx, d, js, rule)
		f.ClockLead = lead
		res, vs := checkMilestones(ops, start, f)
		if len(vs) == 0 || time.Now().After(deadline) || !poll.Sleep(ctx, 250*time.Millisecond) {
			return res, vs
		}
	}
}

// connectAllocator connects the harness to NATS in the region that holds
// the allocator's bucket (the first), as a client of the deployment.
func connectAllocator(d *deployment) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(d.net.ClientURL(d.cfg.Regions[0]), nats.Timeout(2*time.Second), nats.MaxReconnects(-1))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to NATS in %s to read the allocator: %w", d.cfg.Regions[0], err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// collectMilestones reads the allocator's state and claims, and every
// region's milestones, numbering status and lost claims.
func collectMilestones(ctx context.Context, d *deployment, js jetstream.JetStream, rule milestone.Rule) milestoneFinal {
	f := milestoneFinal{
		Rule: rule, Regions: d.views(),
		Events: map[string][]milestone.Event{}, Synced: map[string]bool{},
		Status: map[string]numberingStatus{}, Lost: map[string]float64{}, Errs: map[string]error{},
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range d.procs {
		wg.Go(func() {
			evs, synced, err1 := p.client.milestones(ctx)
			st, err2 := p.client.numbering(ctx)
			lost, err3 := p.client.lostClaims(ctx)
			p.mu.Lock()
			lost += p.lostDead
			p.mu.Unlock()
			mu.Lock()
			defer mu.Unlock()
			if err := errors.Join(err1, err2, err3); err != nil {
				f.Errs[p.view] = err
			}
			if err1 == nil {
				f.Events[p.view], f.Synced[p.view] = evs, synced
			}
			if err2 == nil {
				f.Status[p.view] = st
			}
			f.Lost[p.view] = lost
		})
	}
	wg.Go(func() {
		seq, claims, err1, err2 := readAllocator(ctx, js)
		mu.Lock()
		f.Seq, f.Claims, f.SeqErr, f.ClaimsErr = seq, claims, err1, err2
		mu.Unlock()
	})
	wg.Wait()
	return f
}

// readAllocator reads the likes sequence's state and every claim key.
func readAllocator(ctx context.Context, js jetstream.JetStream) (seq *alloc.State, claims map[uint64]milestone.Event, seqErr, claimsErr error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, alloc.DefaultBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return alloc.NewState(), map[uint64]milestone.Event{}, nil, nil // nothing numbered yet
	}
	if err != nil {
		return nil, nil, err, err
	}
	seq, seqErr = alloc.Read(ctx, kv, likesSequence)
	claims, claimsErr = readClaims(ctx, kv)
	return seq, claims, seqErr, claimsErr
}

// readClaims reads every claim key "ms.likes.<n>".
func readClaims(ctx context.Context, kv jetstream.KeyValue) (map[uint64]milestone.Event, error) {
	prefix := "ms." + likesSequence + "."
	lister, err := kv.ListKeysFiltered(ctx, prefix+">")
	if err != nil {
		return nil, fmt.Errorf("list claims: %w", err)
	}
	defer func() { _ = lister.Stop() }()
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	out := make(map[uint64]milestone.Event, len(keys))
	for _, k := range keys {
		n, err := strconv.ParseUint(strings.TrimPrefix(k, prefix), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("claim key %q: %w", k, err)
		}
		e, err := kv.Get(ctx, k)
		if err != nil {
			return nil, fmt.Errorf("read claim %s: %w", k, err)
		}
		ev, err := milestone.DecodeEvent(e.Value())
		if err != nil {
			return nil, fmt.Errorf("claim %s: %w", k, err)
		}
		if ev.Number != n {
			return nil, fmt.Errorf("claim %s holds milestone %d", k, ev.Number)
		}
		out[n] = ev
	}
	return out, nil
}
