package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/internal/base/poll"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/replication"
	"github.com/tally-dev/tally/storage"
)

// stepClock runs a clock episode: the region's wall clock is offset by
// e.Offset for e.Dur, then set right, two steps of the kind a bad NTP
// server or an operator's typo makes. Only a chaos build can be told to.
func (x *executor) stepClock(ctx context.Context, e Episode) error {
	p := x.d.proc(e.Region)
	if err := p.client.setClockOffset(ctx, e.Offset); err != nil {
		return fmt.Errorf("clock step skipped: %w", err)
	}
	poll.Sleep(ctx, e.Dur)
	// Set right even if ctx ended: the final checks run on this clock.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return p.client.setClockOffset(cctx, 0)
}

// setClockOffset offsets a chaos build's wall clock (PUT
// /v1/admin/chaos/clock).
func (c *client) setClockOffset(ctx context.Context, d time.Duration) error {
	if err := c.api.SetClockOffset(ctx, d); err != nil {
		return fmt.Errorf("%w (a chaos build of tallyd serves this route)", err)
	}
	return nil
}

// forgedReplica is the id the malicious region makes up.
const forgedReplica = "zz-9"

// retiredReplica is a replica every region is told is retired (--retired)
// and that never ran: it has no state, so any state that names it is
// forged.
const retiredReplica = "old-1"

// Issue 27's forgeries (ask, sketch, clocks) use a budget
// and a unique-count key of their own, apart from the workload's, so the
// model never counts them: the forge episode checks the budget itself,
// and the final checks read the key (checkForgedSketch).
const (
	forgedBudget    = "bud:forge"
	forgedUniqueKey = "uv:forged"
	// forgedGrant is what each region other than the forger grants to
	// forgedBudget before the forged ask.
	forgedGrant = 1000
	// forgedAskWait bounds the wait for the ask's transfer to show.
	forgedAskWait = 5 * time.Second
)

// forgedClockLead is how far ahead of the wall clock a forge episode's
// heartbeats may leave every replica's clock for the rest of the run:
// peers move a clock at most a minute past its own readings of the time
// (region.maxPeerCorrection), and once every replica has moved, they
// agree and nothing moves them back. The final checks of a run with a
// forge episode allow for it: a like is booked and a milestone stamped
// by a clock up to this far ahead of the harness's.
const forgedClockLead = time.Minute

// Incarnations of the forger's messages: as the region's own replica,
// as the other replicas (heartbeats), and in a hello.
const (
	forgedIncarnation      = 0x5eed
	forgedPeerIncarnation  = 0xbea7
	forgedHelloIncarnation = 0x4e110
)

// forge runs a forge episode: a client on e.Region's NATS server, with
// that region's access, publishes forged deltas for e.Dur. None of them
// may change a count or a record anywhere (docs/architecture.md, "Threat
// model"); the final checks find out.
//
//   - From a replica nobody configured: like-count and counter entries of
//     its own, in the all-time vectors and the slots, and like
//     records naming real replicas.
//   - On the region's own replica's subject: like records whose register
//     and contributions belong to other replicas, as if relayed, and block
//     flags set in another replica's name.
//   - On the same subject: the replica's own records and block flags
//     stamped a year ahead.
//   - On the same subject: like records in the name of the retired
//     replica, of pairs the workload touched, stamped long ago and
//     claiming it counted the user 1000 times (issue 27, item 1): taken,
//     the record's winner would reconcile the 1000 away with its own
//     entry.
//   - If e.Sketch, at the start, a saturated sketch (sketch, item 5).
//
// Then, with the workload paused, one ask for 2^40 rights (ask, item 6),
// and for 3 s heartbeats an hour and then a day ahead in every replica's
// name and a hello claiming one of their ids since 1970 (clocks, item 8).
func (x *executor) forge(ctx context.Context, e Episode) error {
	nc, err := nats.Connect(x.d.net.ClientURL(e.Region), nats.Name("chaos forger"))
	if err != nil {
		return fmt.Errorf("forge skipped: %w", err)
	}
	defer nc.Close()
	f := &forger{x: x, e: e, nc: nc, self: replicaID(e.Region)}
	for _, r := range x.cfg.Regions {
		if r != e.Region {
			f.others = append(f.others, r)
		}
	}
	// The pairs the workload has acted on so far, with an acknowledgement
	// (their records exist, and have a winner to reconcile).
	for _, o := range x.w.hist.snapshot() {
		if o.likeOp() && o.Outcome == OutcomeOK {
			f.touched = append(f.touched, userKey{o.Key, o.User})
		}
	}
	if e.Sketch {
		if err := f.sketch(); err != nil {
			return fmt.Errorf("forge: %w", err)
		}
	}
	if err := f.deltas(ctx); err != nil {
		return fmt.Errorf("forge: %w", err)
	}
	// Then, with the workload paused, the ask (no handoff of the
	// workload's then moves a holder's rights while the check waits),
	// the clocks and the hello (see clocks).
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := x.w.gate.pause(qctx); err != nil {
		return fmt.Errorf("forge: the ask and the clocks skipped: %w", err)
	}
	defer x.w.gate.resume()
	if err := f.ask(ctx); err != nil {
		return fmt.Errorf("forge: %w", err)
	}
	if err := f.clocks(ctx); err != nil {
		return fmt.Errorf("forge: %w", err)
	}
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("forge: %w", err)
	}
	return nil
}

// forger is one forge episode's publisher.
type forger struct {
	x       *executor
	e       Episode
	nc      *nats.Conn
	self    string    // the forging region's replica
	others  []string  // the other regions
	touched []userKey // pairs the workload acted on before the episode
	seq     atomic.Uint64
}

// publish sends d as the forging region's own replica.
func (f *forger) publish(d *replication.Delta) error {
	d.Replica, d.Region = f.self, f.e.Region
	d.Incarnation, d.Seq, d.SentAtMs = forgedIncarnation, f.seq.Add(1), time.Now().UnixMilli()
	return f.nc.Publish("tally.delta."+d.Region+"."+d.Replica, replication.AppendDelta(nil, d))
}

// deltas publishes the forged records and entries every 50 ms for the
// episode's duration.
func (f *forger) deltas(ctx context.Context) error {
	x, e := f.x, f.e
	rng := rand.New(rand.NewPCG(x.cfg.Seed, uint64(e.Index)))
	var others []string
	for _, r := range f.others {
		others = append(others, replicaID(r))
	}
	pickKey := func() (string, string) {
		return itemID(rng.IntN(x.cfg.Items)), userID(rng.IntN(x.cfg.Users))
	}
	pickTouched := func() (string, string) {
		if len(f.touched) == 0 {
			return pickKey()
		}
		uk := f.touched[rng.IntN(len(f.touched))]
		return uk.Item, uk.User
	}
	sent := 0
	for end := time.Now().Add(e.Dur); time.Now().Before(end) && ctx.Err() == nil; poll.Sleep(ctx, 50*time.Millisecond) {
		now := crdt.MakeHLC(time.Now().UnixMilli(), 0)
		y, z := others[rng.IntN(len(others))], others[rng.IntN(len(others))]
		item, user := pickKey()
		ctr := counterID(rng.IntN(x.cfg.Counters))
		sec := time.Now().Unix()
		stranger := &replication.Delta{Replica: forgedReplica, Region: e.Region,
			Vectors: []replication.OwnEntry{
				{Kind: storage.Likes, Item: item, PN: crdt.PN{P: 1000}},
				{Kind: storage.Counters, Item: ctr, PN: crdt.PN{N: 1000}},
				// And their slots (windowLevels' 1 s and 1 min).
				{Kind: storage.Likes.Windows(), Item: crdt.Slot{Key: item, Width: 1, Start: sec, Keep: 3 * 3600}.Name(), PN: crdt.PN{P: 1000}},
				{Kind: storage.Counters.Windows(), Item: crdt.Slot{Key: ctr, Width: 60, Start: sec - sec%60, Keep: 15 * 86400}.Name(), PN: crdt.PN{P: 1000}},
			},
			Records: []replication.Record{{Item: item, User: user, Rec: &crdt.LikeRecord{
				Liked: rng.IntN(2) == 0, HLC: now + 5000<<16, Origin: y,
				Contrib: crdt.Vector{}.Set(y, crdt.PN{N: 7}).Set(forgedReplica, crdt.PN{P: 1000}),
			}}},
		}
		item, user = pickKey()
		relay := &replication.Delta{
			Records: []replication.Record{{Item: item, User: user, Rec: &crdt.LikeRecord{
				Liked: rng.IntN(2) == 0, HLC: now + 5000<<16, Origin: y,
				Contrib: crdt.Vector{}.Set(y, crdt.PN{N: 7}).Set(z, crdt.PN{P: 3}),
			}}},
		}
		// A block of any user (most are never blocked), as if relayed.
		_, user = pickKey()
		relay.Records = append(relay.Records, replication.Record{Item: region.BlockRecordItem, User: user,
			Rec: crdt.FlagRecord(crdt.Flag{Value: crdt.Block{Blocked: true}, HLC: now + 5000<<16, Origin: y})})
		// The retired replica's like of a touched pair, stamped long ago
		// so that the register's holder keeps the register: it would
		// reconcile the forged 1000 away with its own entry.
		item, user = pickTouched()
		relay.Records = append(relay.Records, replication.Record{Item: item, User: user, Rec: &crdt.LikeRecord{
			Liked: true, HLC: 1000, Origin: retiredReplica,
			Contrib: crdt.Vector{}.Set(retiredReplica, crdt.PN{P: 1000}),
		}})
		item, user = pickKey()
		yearAhead := crdt.MakeHLC(time.Now().Add(365*24*time.Hour).UnixMilli(), 0)
		future := &replication.Delta{
			Records: []replication.Record{{Item: item, User: user, Rec: &crdt.LikeRecord{
				Liked: rng.IntN(2) == 0, HLC: yearAhead, Origin: f.self,
				Contrib: crdt.Vector{}.Set(f.self, crdt.PN{P: 1}),
			}}},
		}
		_, user = pickKey()
		future.Records = append(future.Records, replication.Record{Item: region.BlockRecordItem, User: user,
			Rec: crdt.FlagRecord(crdt.Flag{Value: crdt.Block{Blocked: true}, HLC: yearAhead, Origin: f.self})})
		if err := f.nc.Publish("tally.delta."+e.Region+"."+forgedReplica, replication.AppendDelta(nil, withStamp(stranger, uint64(sent+1)))); err != nil {
			return err
		}
		for _, d := range []*replication.Delta{relay, future} {
			if err := f.publish(d); err != nil {
				return err
			}
		}
		sent += 3
	}
	x.logf("forged %d deltas as %s", sent, e.Region)
	return nil
}

// withStamp sets a stranger's delta's incarnation, sequence and send time.
func withStamp(d *replication.Delta, seq uint64) *replication.Delta {
	d.Incarnation, d.Seq, d.SentAtMs = forgedIncarnation, seq, time.Now().UnixMilli()
	return d
}

// sketch publishes, as the region's own replica, a sketch of
// forgedUniqueKey with every register at its largest legal value (issue
// 27, item 5). Every region that merges it must still answer the key's
// unique count, a finite estimate (checkForgedSketch).
//
// The forger is not the region's process: the region itself ignores
// deltas from another incarnation on its own subject, and takes its own
// sketch from nobody once it accepts writes, so it reads the key as
// empty, while the regions that merged the pages read the clamp, and the
// regions' digests differ for good (hence Episode.Sketch).
func (f *forger) sketch() error {
	var sat crdt.HLLPage
	for i := range sat {
		sat[i] = crdt.HLLMaxRho
	}
	const perDelta = 16 // 4 KiB of registers a message
	for first := 0; first < crdt.HLLPages; first += perDelta {
		d := &replication.Delta{}
		for pg := first; pg < min(first+perDelta, crdt.HLLPages); pg++ {
			d.Sketches = append(d.Sketches, replication.OwnPage{Kind: storage.Uniques, Name: forgedUniqueKey, Page: pg, Regs: &sat})
		}
		if err := f.publish(d); err != nil {
			return err
		}
	}
	return nil
}

// ask forges one ask for 2^40 rights to forgedBudget (issue 27, item 6):
// each other region first grants forgedGrant to it, then the region's own
// replica asks once, as a delta of its own. Each holder must keep at least
// half of what it held: one ask takes at most half of a holder's spare.
// The wait ends once every holder's transfer shows, or after
// forgedAskWait; the check is of what each holds then, so a holder that
// gave everything fails it however long the transfer took to show.
func (f *forger) ask(ctx context.Context) error {
	x := f.x
	before := map[string]int64{}
	for _, r := range f.others {
		c := x.d.proc(r).client
		cctx, cancel := context.WithTimeout(ctx, x.cfg.ClientTimeout)
		_, err := c.api.Grant(cctx, forgedBudget, forgedGrant)
		cancel()
		if err != nil {
			return fmt.Errorf("grant %s at %s: %w", forgedBudget, r, err)
		}
		b, err := c.readBudget(ctx, forgedBudget, x.cfg.ClientTimeout)
		if err != nil {
			return fmt.Errorf("read %s at %s: %w", forgedBudget, r, err)
		}
		before[r] = b.LocalRights
	}
	if err := f.publish(&replication.Delta{Asks: []replication.Ask{{Key: forgedBudget, Want: region.MaxBy}}}); err != nil {
		return err
	}
	after := map[string]int64{}
	deadline := time.Now().Add(forgedAskWait)
	for {
		moved := 0
		for _, r := range f.others {
			b, err := x.d.proc(r).client.readBudget(ctx, forgedBudget, x.cfg.ClientTimeout)
			if err != nil {
				return fmt.Errorf("read %s at %s: %w", forgedBudget, r, err)
			}
			after[r] = b.LocalRights
			if b.LocalRights != before[r] {
				moved++
			}
		}
		if moved == len(f.others) || time.Now().After(deadline) || !poll.Sleep(ctx, 50*time.Millisecond) {
			break
		}
	}
	for _, r := range f.others {
		x.logf("forged ask for %s as %s: %s held %d, holds %d", forgedBudget, f.e.Region, r, before[r], after[r])
		if v, ok := drained(r, before[r], after[r]); ok {
			x.violate(v)
		}
	}
	return nil
}

// drained reports a violation if a holder of before rights holds fewer
// than half of them (rounded down) after one forged ask.
func drained(region string, before, after int64) (Violation, bool) {
	if after >= before/2 {
		return Violation{}, false
	}
	return Violation{Kind: KindBudgetDrained, Region: region, Key: budgetName(forgedBudget),
		Detail: fmt.Sprintf("one forged ask for 2^40 rights left it %d of the %d it held: an ask takes at most half of a holder's spare", after, before)}, true
}

// forgedClockPhase is how long the forged heartbeats say each of their
// two times (an hour ahead, then a day and an hour ahead).
const forgedClockPhase = 1500 * time.Millisecond

// clocks forges heartbeats in every replica's name, its own region's
// included, stamped an hour ahead for forgedClockPhase and then a day and
// an hour ahead for as long (issue 27, item 8), and a hello in the first
// other replica's name claiming it started in 1970. Then it reads every
// region's status: no region may have stopped (stopped-by-hello), and no
// clock may be more than a minute off (clock-dragged): peers move a clock
// 10 s a round and a minute in all, however many lie.
//
// The workload is paused meanwhile (forge), so that a replica's peers publish
// nothing but a heartbeat a second while the forger publishes one in each
// name every 2 ms: at an anti-entropy round (every 300 ms) the last
// message from each peer is then a forged one but for about 1 round in
// 100, and a replica sees the forged offset as its peers' median at its
// first or second round of each phase. So, deterministically, every clock
// is pushed as far as its peers may push it: the bound, a minute, is what
// the rest of the run is checked with (forgedClockLead), and a clock
// without the bound (the clock-follows-peers control) is a day ahead.
//
// A hello alone stops no replica; only a process also seen publishing as
// it with the hello's incarnation does. On a NATS without authorization,
// as here, anyone can forge both, so the hello names an incarnation the
// forged heartbeats do not use: what is checked is that a hello alone
// stops nothing.
func (f *forger) clocks(ctx context.Context) error {
	x, e := f.x, f.e
	h, _ := json.Marshal(map[string]any{"replica": replicaID(f.others[0]), "incarnation": forgedHelloIncarnation,
		"started_ms": 0, "host": "forger", "pid": 1})
	if err := f.nc.Publish("tally.id."+replicaID(f.others[0]), h); err != nil {
		return err
	}
	start := time.Now()
	seq, sent := uint64(0), 0
	for end := start.Add(2 * forgedClockPhase); time.Now().Before(end) && ctx.Err() == nil; poll.Sleep(ctx, 2*time.Millisecond) {
		ahead := time.Hour
		if time.Since(start) > forgedClockPhase {
			ahead = 25 * time.Hour
		}
		seq++
		for _, r := range x.cfg.Regions {
			d := &replication.Delta{Replica: replicaID(r), Region: r, Incarnation: forgedPeerIncarnation, Seq: seq,
				SentAtMs: time.Now().Add(ahead).UnixMilli()}
			if r == e.Region {
				// As the forger's own deltas: one rival incarnation.
				d.Incarnation, d.Seq = forgedIncarnation, f.seq.Add(1)
			}
			if err := f.nc.Publish("tally.delta."+r+"."+d.Replica, replication.AppendDelta(nil, d)); err != nil {
				return err
			}
			sent++
		}
	}
	if err := f.nc.Flush(); err != nil {
		return err
	}
	x.logf("forged %d heartbeats as %v, an hour then a day ahead, and a hello as %s", sent, x.cfg.Regions, replicaID(f.others[0]))
	for _, p := range x.d.procs {
		sctx, cancel := context.WithTimeout(ctx, x.cfg.ClientTimeout)
		st, err := p.client.api.Status(sctx)
		cancel()
		if err != nil {
			return fmt.Errorf("status of %s after forged clocks: %w", p.view, err)
		}
		x.logf("after forged clocks: %s's clock is corrected by %s", p.view, time.Duration(st.ClockCorrectionMs)*time.Millisecond)
		for _, v := range forgedClockViolations(p.view, st.ClockCorrectionMs, st.StorageError) {
			x.violate(v)
		}
	}
	return nil
}

// forgedClockSlack is what a clock's correction may exceed the peers'
// bound by: a step of the wall clock, kept out, is up to a second.
const forgedClockSlack = 5 * time.Second

// forgedClockViolations are what a region's status after forged clocks and
// a forged hello shows wrong: a clock corrected by more than the peers may
// move it, or a stopped replica.
func forgedClockViolations(region string, correctionMs int64, stopped string) []Violation {
	var vs []Violation
	if c := time.Duration(correctionMs) * time.Millisecond; c > forgedClockLead+forgedClockSlack || c < -forgedClockLead-forgedClockSlack {
		vs = append(vs, Violation{Kind: KindClockDragged, Region: region, Key: "clock",
			Detail: fmt.Sprintf("after heartbeats forged an hour and a day ahead its clock is corrected by %s: peers may move it %s at most", c, forgedClockLead)})
	}
	if stopped != "" {
		vs = append(vs, Violation{Kind: KindStoppedByHello, Region: region, Key: "replica",
			Detail: fmt.Sprintf("after a forged hello it stopped (%s): a hello alone must stop no replica", stopped)})
	}
	return vs
}

// checkForgedSketch reads forgedUniqueKey, which forge episodes saturate,
// in every region: each must answer it (issue 27, item 5: a saturated
// sketch estimated +Inf and its reads answered 500 for good).
func checkForgedSketch(ctx context.Context, procs []*proc, timeout time.Duration) []Violation {
	var vs []Violation
	for _, p := range procs {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		u, err := p.client.readUniques(rctx, []string{forgedUniqueKey}, "")
		cancel()
		switch {
		case err != nil:
			vs = append(vs, Violation{Kind: KindUniques, Region: p.view, Key: "uniques/" + forgedUniqueKey,
				Detail: "a saturated sketch cannot be read: " + err.Error()})
		case u.Estimate < 0 || u.Estimate > crdt.HLLMaxEstimate:
			vs = append(vs, Violation{Kind: KindUniques, Region: p.view, Key: "uniques/" + forgedUniqueKey,
				Detail: fmt.Sprintf("a saturated sketch estimates %d, outside [0, 2^62]", u.Estimate)})
		}
	}
	return vs
}
