package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/alloc"
	"github.com/tally-dev/tally/internal/base/poll"
)

// EpisodeRecord is an episode as it ran.
type EpisodeRecord struct {
	Episode
	// Start and End are offsets from the start of the run (End: the fault
	// is over and, for kill, wipe and nats, the region is back).
	Start time.Duration `json:"start"`
	End   time.Duration `json:"end"`
	// HealMs is how long after the heal every region held everything any
	// region held at the heal (link faults; -1: not within healWait).
	HealMs *float64 `json:"heal_ms,omitempty"`
	// ReadyMs is how long the restarted region took to be ready (kill, wipe).
	ReadyMs *float64 `json:"ready_ms,omitempty"`
	Note    string   `json:"note,omitempty"`

	healAt time.Time // when the fault was undone (nats: the start of the server)
}

// executor runs the fault schedule, one episode after another.
type executor struct {
	cfg   Config
	d     *deployment
	w     *workload
	keys  []key
	start time.Time

	current atomic.Pointer[Episode] // the running episode, read by the workload

	mu         sync.Mutex // protects records and violations
	records    []*EpisodeRecord
	violations []Violation

	natsDown map[string]bool // owned by the executor goroutine

	// Shard moves (moves.go): the bucket, opened at the first move, and
	// the moves running behind the episodes.
	nc     *nats.Conn
	kv     jetstream.KeyValue
	moves  sync.WaitGroup
	moveMu sync.Mutex // held by the running move
	// steps are the steps each region's latest move took (under mu),
	// for the kills aimed at them (Episode.Step).
	steps map[string]*moveSteps
	plan  []Episode // the schedule run runs
}

func (x *executor) since() time.Duration { return time.Since(x.start) }

func (x *executor) logf(format string, args ...any) {
	fmt.Fprintf(x.cfg.Out, "%7.1fs  %s\n", x.since().Seconds(), fmt.Sprintf(format, args...))
}

// episode reports the running episode for the workload's records.
func (x *executor) episode() (int, bool) {
	if e := x.current.Load(); e != nil {
		return e.Index, e.linkFault()
	}
	return 0, false
}

func (x *executor) violate(v Violation) {
	x.mu.Lock()
	x.violations = append(x.violations, v)
	x.mu.Unlock()
}

// healWait bounds the wait, after a link fault heals, for every region to
// hold what any region held at the heal.
const healWait = 15 * time.Second

// run executes plan. After a link fault heals, it measures the heal before
// the next fault begins, so that no heal is cut short by the next fault
// (the schedule drifts by that time, and by restarts that take long). A
// late episode still runs, and the workload with it (Config.Duration).
// Each episode leaves the deployment healed, so run returns with every
// link up and every region running, unless ctx ended.
func (x *executor) run(ctx context.Context, plan []Episode) {
	x.natsDown = map[string]bool{}
	x.plan = plan
	defer x.waitMoves()
	for _, e := range plan {
		if !poll.Sleep(ctx, time.Until(x.start.Add(e.At))) {
			return
		}
		rec := &EpisodeRecord{Episode: e, Start: x.since()}
		x.mu.Lock()
		x.records = append(x.records, rec)
		x.mu.Unlock()
		x.logf("fault %s", e)
		ep := e
		x.current.Store(&ep)
		err := x.do(ctx, rec)
		x.current.Store(nil)
		rec.End = x.since()
		if err != nil {
			rec.Note = err.Error()
			x.logf("fault #%d: %v", e.Index, err)
		}
		if rec.healAt.IsZero() {
			rec.healAt = time.Now()
		}
		if e.linkFault() && err == nil {
			mctx, cancel := context.WithTimeout(ctx, healWait)
			x.measureHeal(mctx, rec)
			cancel()
		}
	}
}

// do runs one episode and undoes its fault.
func (x *executor) do(ctx context.Context, rec *EpisodeRecord) error {
	e := rec.Episode
	n := x.d.net
	cutAll := func(side, other []string, up bool) error {
		for _, a := range side {
			for _, b := range other {
				if err := n.SetLink(a, b, up); err != nil {
					return err
				}
			}
		}
		return nil
	}
	switch e.Kind {
	case KindIsolate, KindSplit:
		minority, majority := e.Minority, e.Majority
		if e.Kind == KindIsolate {
			minority, majority = []string{e.Region}, nil
			for _, r := range x.cfg.Regions {
				if r != e.Region {
					majority = append(majority, r)
				}
			}
		}
		if err := cutAll(minority, majority, false); err != nil {
			return err
		}
		poll.Sleep(ctx, e.Dur)
		return cutAll(minority, majority, true)
	case KindBridge:
		if err := n.SetLink(e.A, e.B, false); err != nil {
			return err
		}
		poll.Sleep(ctx, e.Dur)
		return n.SetLink(e.A, e.B, true)
	case KindLoss:
		if err := n.SetDrop(e.A, e.B, true); err != nil {
			return err
		}
		poll.Sleep(ctx, e.Dur)
		// Lifting the drop resets the link's connections (see
		// localnet.Cluster.SetDrop), as the end of a real loss would.
		return n.SetDrop(e.A, e.B, false)
	case KindFlap:
		for i, d := range e.Flaps {
			if err := n.SetLink(e.A, e.B, i%2 == 1); err != nil {
				return err
			}
			if !poll.Sleep(ctx, d) {
				break
			}
		}
		return n.SetLink(e.A, e.B, true)
	case KindNATS:
		if err := n.StopServer(e.Region); err != nil {
			return err
		}
		x.natsDown[e.Region] = true
		poll.Sleep(ctx, e.Dur)
		rec.healAt = time.Now()
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := n.StartServer(sctx, e.Region); err != nil {
			return err
		}
		delete(x.natsDown, e.Region)
		return nil
	case KindKill:
		killed := func() {}
		if e.Step != "" {
			var err error
			if killed, err = x.awaitStep(ctx, e); err != nil {
				return err
			}
		}
		p := x.d.target(e)
		var aim func()
		if e.AfterAck {
			aim = func() { x.aim(ctx, e.Region) }
		}
		err := x.d.kill(p, aim)
		killed()
		if err != nil {
			return err
		}
		poll.Sleep(ctx, e.Dur)
		return x.restart(ctx, rec, p)
	case KindWipe:
		if e.Step != "" {
			killed, err := x.awaitStep(ctx, e)
			if err != nil {
				return err
			}
			killed() // the move goes on: the wipe strikes now
		}
		return x.wipe(ctx, rec)
	case KindClock:
		return x.stepClock(ctx, e)
	case KindForge:
		return x.forge(ctx, e)
	case KindMove:
		return x.move(ctx, rec)
	case KindPause:
		p := x.d.target(e)
		paused := e.Region
		if e.Replica != "" {
			paused = e.Replica // its region's other replicas take its requests
		}
		x.w.setPaused(paused, true)
		defer x.w.setPaused(paused, false)
		if err := x.d.pause(p, true); err != nil {
			return err
		}
		poll.Sleep(ctx, e.Dur)
		return x.d.pause(p, false)
	}
	return fmt.Errorf("unknown episode kind %q", e.Kind)
}

// aim waits until the workload sees region acknowledge an increment (at
// most aimWait), for a kill aimed at the moment after an acknowledgement.
func (x *executor) aim(ctx context.Context, region string) {
	t0 := time.Now()
	select {
	case <-x.w.nextAck(region):
		x.logf("%s acknowledged an increment %.0f ms into the episode: kill now", region, float64(time.Since(t0).Microseconds())/1000)
	case <-time.After(aimWait):
		x.logf("%s acknowledged no increment within %s: kill anyway", region, aimWait)
	case <-ctx.Done():
	}
}

// aimWait bounds how long an aimed kill waits for an acknowledgement.
const aimWait = 5 * time.Second

// restart starts a region's process again and waits until it is ready.
func (x *executor) restart(ctx context.Context, rec *EpisodeRecord, p *proc) error {
	t0 := time.Now()
	if err := x.d.start(p); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := x.d.waitReady(rctx, p); err != nil {
		x.violate(Violation{Kind: KindNotReady, Region: p.view,
			Detail: fmt.Sprintf("episode #%d: restarted %s not ready: %v", rec.Index, p.view, err)})
		return err
	}
	ms := float64(time.Since(t0).Microseconds()) / 1000
	rec.ReadyMs = &ms
	x.logf("%s ready %.0f ms after its restart", p.view, ms)
	return nil
}

// wipe models the loss of a region's disk. A replica restarted empty gets
// its state back from its peers, but only the state they had received: a
// write acknowledged just before the disk died and not yet replicated is
// lost with it, as docs/architecture.md says. To test recovery rather
// than that known limit, the workload is paused and the regions are
// allowed to converge first; the region's timed-out increments are also
// resolved, since idempotency keys die with the data dir. Numbering has
// the same limit (a milestone whose like is recorded only on the lost
// disk does not fire), so the region's numbering must settle too (see
// waitNumberingSettled).
func (x *executor) wipe(ctx context.Context, rec *EpisodeRecord) error {
	e := rec.Episode
	p := x.d.target(e)
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := x.w.gate.pause(qctx); err != nil {
		return fmt.Errorf("wipe skipped: %w", err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			x.w.gate.resume()
		}
	}
	defer resume()
	if left := x.w.resolve(qctx, e.Region); left > 0 {
		return fmt.Errorf("wipe skipped: %d timed-out increments to %s could not be resolved", left, e.Region)
	}
	if err := x.waitConverged(qctx); err != nil {
		x.violate(Violation{Kind: KindNotConverged, Region: e.Region,
			Detail: fmt.Sprintf("episode #%d: with every link up and no writes, the regions did not converge within 30s: %v", e.Index, err)})
		return fmt.Errorf("wipe skipped: %w", err)
	}
	if x.cfg.numbering() {
		if err := waitNumberingSettled(qctx, x.d, p); err != nil {
			x.violate(Violation{Kind: KindMilestoneUnsettled, Region: e.Region,
				Detail: fmt.Sprintf("episode #%d: with no writes for 30s, %s's numbering did not settle: %v", e.Index, e.Region, err)})
			return fmt.Errorf("wipe skipped: %w", err)
		}
	}
	if err := x.d.kill(p, nil); err != nil {
		return err
	}
	if err := os.RemoveAll(p.dataDir); err != nil {
		return fmt.Errorf("wipe %s: %w", p.dataDir, err)
	}
	resume()
	poll.Sleep(ctx, e.Dur)
	return x.restart(ctx, rec, p)
}

// waitNumberingSettled polls until nothing of the region's numbering is
// recorded only in its data directory, so that losing it loses no
// milestone. Which like took each number of a block stays in the
// holder's store (and nowhere else) until the block's ranks are known and
// taken; a milestone rank then becomes a claim intent, still only in the
// store, until it is claimed and published. So the region must hold no
// lease and no unnumbered like, the allocator must hold no closed block
// of the region (a block whose ranks wait for a block below it, or that
// the holder has not taken yet: it takes them at its next renewal), and
// the region must have no pending claim. Giving the leases back is not
// enough: a milestone in the last block the region closed would die with
// the disk (the known disk-loss limit of numbering, docs/architecture.md),
// as losing an unreplicated write is the disk-loss limit of counting.
// The other regions are idle too (the workload is paused), so the blocks
// below close within their idle time.
func waitNumberingSettled(ctx context.Context, d *deployment, p *proc) error {
	nc, js, err := connectAllocator(d)
	if err != nil {
		return err
	}
	defer nc.Close()
	holder := p.replica
	for {
		err := numberingSettled(ctx, js, p, holder)
		if err == nil {
			return nil
		}
		if !poll.Sleep(ctx, 100*time.Millisecond) {
			return err
		}
	}
}

// numberingSettled says why the region's numbering has not settled, or
// nil. The blocks are read before the claims: once the allocator holds no
// block of the region, no new claim intent can appear there.
func numberingSettled(ctx context.Context, js jetstream.JetStream, p *proc, holder string) error {
	st, err := p.client.numbering(ctx)
	if err != nil {
		return err
	}
	if st.Unnumbered > 0 || len(st.Lease.Leases) > 0 {
		return fmt.Errorf("%d likes unnumbered, %d leases held", st.Unnumbered, len(st.Lease.Leases))
	}
	var closed []alloc.Closed
	kv, err := js.KeyValue(ctx, alloc.DefaultBucket)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound): // nothing numbered yet
	case err != nil:
		return fmt.Errorf("open the allocator's bucket: %w", err)
	default:
		seq, err := alloc.Read(ctx, kv, likesSequence)
		if err != nil {
			return fmt.Errorf("read the allocator: %w", err)
		}
		closed = seq.Closed
	}
	var blocks []string
	for _, c := range closed {
		if c.Leaseholder == holder {
			blocks = append(blocks, fmt.Sprintf("[%d,%d) used %d folded %v", c.Start, c.End, c.Used, c.Folded))
		}
	}
	if len(blocks) > 0 {
		return fmt.Errorf("blocks whose ranks it has not taken: %s", strings.Join(blocks, "; "))
	}
	if st, err = p.client.numbering(ctx); err != nil {
		return err
	}
	if st.ClaimsPending != 0 {
		return fmt.Errorf("%d milestone claims not made", st.ClaimsPending)
	}
	return nil
}

// waitConverged polls /v1/convergence until every region says converged
// in the same round.
func (x *executor) waitConverged(ctx context.Context) error {
	var last error
	for {
		last = nil
		for _, p := range x.d.procs {
			ok, err := p.client.converged(ctx)
			if err == nil && !ok {
				err = fmt.Errorf("%s not converged", p.view)
			}
			if err != nil {
				last = err
				break
			}
		}
		if last == nil {
			return nil
		}
		if !poll.Sleep(ctx, 100*time.Millisecond) {
			return last
		}
	}
}

// healAll ends every fault: links up, stopped NATS servers and processes
// started again (and ready).
func (x *executor) healAll(ctx context.Context) error {
	if err := x.d.healLinks(); err != nil {
		return err
	}
	for r := range x.natsDown {
		if err := x.d.net.StartServer(ctx, r); err != nil {
			return err
		}
		delete(x.natsDown, r)
	}
	for _, p := range x.d.procs {
		if p.running() {
			continue
		}
		if err := x.restart(ctx, &EpisodeRecord{}, p); err != nil {
			return err
		}
	}
	return nil
}

// measureHeal records how long after a heal every region holds everything
// that any region held at the heal: the join of the regions' vectors of
// every key, read right after the heal.
func (x *executor) measureHeal(ctx context.Context, rec *EpisodeRecord) {
	healed := rec.healAt
	target := map[key]map[string]PN{}
	for _, p := range x.d.procs {
		for _, k := range x.keys {
			rd, err := p.client.read(ctx, k, time.Second)
			if err != nil {
				continue
			}
			t := target[k]
			if t == nil {
				t = map[string]PN{}
				target[k] = t
			}
			for id, e := range rd.Replicas {
				t[id] = PN{P: max(t[id].P, e.P), N: max(t[id].N, e.N)}
			}
		}
	}
	for {
		if x.covers(ctx, target) {
			ms := float64(time.Since(healed).Microseconds()) / 1000
			x.mu.Lock()
			rec.HealMs = &ms
			x.mu.Unlock()
			return
		}
		if !poll.Sleep(ctx, 50*time.Millisecond) {
			never := -1.0
			x.mu.Lock()
			rec.HealMs = &never
			x.mu.Unlock()
			return
		}
	}
}

// covers reports whether every region's vector of every key is at least
// target's.
func (x *executor) covers(ctx context.Context, target map[key]map[string]PN) bool {
	for _, p := range x.d.procs {
		for k, t := range target {
			rd, err := p.client.read(ctx, k, time.Second)
			if err != nil {
				return false
			}
			for id, e := range t {
				if got := rd.Replicas[id]; got.P < e.P || got.N < e.N {
					return false
				}
			}
		}
	}
	return true
}

// episodeRecords returns copies of the records.
func (x *executor) episodeRecords() []EpisodeRecord {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]EpisodeRecord, len(x.records))
	for i, r := range x.records {
		out[i] = *r
	}
	return out
}
