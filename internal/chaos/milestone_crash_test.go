package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/failpoint"
	"github.com/tally-dev/tally/internal/base/poll"
	"github.com/tally-dev/tally/milestone"
)

// Process-level tests of like numbering and milestones, on
// the chaos deployment: real tallyd processes, the embedded NATS
// super-cluster and Pebble.

// A region's process dies by SIGKILL after the like that took a
// milestone number was committed (and, as a rule, acknowledged) and
// before its claim: the chaos build's TALLY_CHAOS_CRASH_BEFORE_CLAIM.
// Restarted without the switch, it finishes the claim from the intent
// stored with the like: the milestone fires once, the same in every
// region, naming the crashed region and that like. Seeded trials on one
// deployment, each crashing a region the seed picks while the other
// regions keep liking.
func TestMilestoneClaimFinishedAfterKillBeforeClaim(t *testing.T) {
	realProcesses(t, "runs real processes")
	cfg := DefaultConfig()
	cfg.ToggleWeight, cfg.LateWeight = 0, 0 // the mix this test was tuned with
	cfg.Binary, cfg.Faults = chaosBinary(t), []string{}
	// Blocks hold at least 16 numbers, so a region hits a milestone
	// within 16 of its likes.
	cfg.Milestones = "every:7"
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const trials = 3
	crash := envCrashBeforeClaim + "=1"
	victim := func(trial int) string {
		rng := rand.New(rand.NewPCG(uint64(trial+1), 0xc1a1))
		return cfg.Regions[rng.IntN(len(cfg.Regions))]
	}
	// The first trial's region starts with the switch.
	d, err := startDeployment(ctx, cfg, t.TempDir(), "", map[string][]string{victim(0): {crash}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.stop()
	l := &liker{start: time.Now(), hist: &history{}}
	if err := waitFeedsSynced(ctx, d); err != nil {
		t.Fatal(err)
	}

	acked, fired := 0, 0
	for trial := range trials {
		x := d.proc(victim(trial))
		before := eventsBy(t, ctx, x)
		if trial > 0 {
			// x restarts with the switch: its first claim kills it.
			if err := d.kill(x, nil); err != nil {
				t.Fatal(err)
			}
			x.setEnv(crash)
			if err := d.start(x); err != nil {
				t.Fatal(err)
			}
			if err := d.waitReady(ctx, x); err != nil {
				t.Fatal(err)
			}
		}
		bg, stopBg := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for _, p := range d.procs {
			if p != x {
				wg.Go(func() {
					for i := 0; bg.Err() == nil; i++ {
						l.like(bg, p, fmt.Sprintf("t%d-bg-%d", trial, i))
						poll.Sleep(bg, 10*time.Millisecond)
					}
				})
			}
		}
		var last *Op
		for i := 0; i < 200; i++ {
			if last = l.like(ctx, x, fmt.Sprintf("t%d-x-%d", trial, i)); last.Outcome != OutcomeOK {
				break
			}
		}
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		how, err := d.waitExit(wctx, x)
		wcancel()
		stopBg()
		wg.Wait()
		if err != nil {
			t.Fatalf("trial %d: %s took likes up to op %d and did not die: %v", trial, x.region, last.ID, err)
		}
		if how != "signal: killed" {
			t.Fatalf("trial %d: %s ended with %q, want SIGKILL; log:\n%s", trial, x.region, how, x.logTail(20))
		}
		// Nothing of x's was claimed in this life of it.
		if claims := claimsBy(t, ctx, d, x); !slices.Equal(claims, before) {
			t.Fatalf("trial %d: %s claimed %v before it died (had %v)", trial, x.region, claims, before)
		}

		x.setEnv()
		if err := d.start(x); err != nil {
			t.Fatal(err)
		}
		if err := d.waitReady(ctx, x); err != nil {
			t.Fatal(err)
		}
		ops := l.hist.snapshot()
		res, vs := settleMilestones(ctx, d, ops, l.start, 0, 30*time.Second)
		if len(vs) > 0 {
			t.Fatalf("trial %d: %d violations, first: %v", trial, len(vs), vs[:min(len(vs), 10)])
		}
		// New milestones of x's, in every region (settle checked that they
		// agree), all claimed by x's restarted process. Usually one: the
		// claim runs right after the commit that numbered the like. But
		// likes keep coming while the claimer gets to it, and on a loaded
		// machine a later like can take the next milestone number (7 on)
		// first; its intent is stored too, and the restart claims both.
		var fresh []milestone.Event
		for _, e := range eventList(t, ctx, x) {
			if e.Replica == x.replica && !slices.Contains(before, e.Number) {
				fresh = append(fresh, e)
			}
		}
		if len(fresh) == 0 {
			t.Fatalf("trial %d: %s fired no new milestone after its restart", trial, x.region)
		}
		if won, err := x.client.metric(ctx, `tally_milestones_won_total{sequence="likes"}`); err != nil || won != float64(len(fresh)) {
			t.Fatalf("trial %d: the restarted %s won %v claims (%v), want %d (its new milestones: %v)", trial, x.region, won, err, len(fresh), fresh)
		}
		var firedFor []string
		for _, ev := range fresh {
			i := slices.IndexFunc(ops, func(o Op) bool { return o.Region == x.region && o.Key == ev.Item && o.User == ev.User })
			if i < 0 {
				t.Fatalf("trial %d: milestone %d names %s, not a like sent to %s", trial, ev.Number, eventString(ev), x.region)
			}
			o := ops[i]
			switch o.Outcome {
			case OutcomeOK:
				acked++
			case OutcomeTimeout: // in flight when x died: committed, its answer lost
				if o.ID != last.ID {
					t.Fatalf("trial %d: milestone %d names op %d (%s), which was not acknowledged, and not the last like", trial, ev.Number, o.ID, o.Outcome)
				}
			default:
				t.Fatalf("trial %d: milestone %d names op %d, which %s (%s)", trial, ev.Number, o.ID, o.Outcome, o.Reason)
			}
			firedFor = append(firedFor, fmt.Sprintf("milestone %d for op %d (%s, %s)", ev.Number, o.ID, o.Outcome, eventString(ev)))
			fired++
		}
		t.Logf("trial %d: %s died (%s) at op %d; restarted, it fired %v; %d milestones checked so far",
			trial, x.region, how, last.ID, firedFor, res.Milestones)
	}
	// The ack and the claim race after the commit: the like is usually
	// acknowledged before the process dies, not always.
	t.Logf("of the %d milestones claimed after a restart, %d named a like acknowledged before the crash", fired, acked)
}

// envCrashBeforeClaim arms the failpoint crash-before-claim in a chaos
// build's process.
const envCrashBeforeClaim = failpoint.EnvCrashBeforeClaim

// liker sends likes of fresh users to one item and records them.
type liker struct {
	start  time.Time
	hist   *history
	nextID atomic.Int64
}

func (l *liker) like(ctx context.Context, p *proc, user string) *Op {
	o := &Op{ID: l.nextID.Add(1), Kind: OpLike, Region: p.region, Key: "item-ms", User: "u-" + user, Attempts: 1}
	o.Start = time.Since(l.start)
	a := p.client.like(ctx, o.Key, o.User, true, 2*time.Second)
	o.End = time.Since(l.start)
	o.Outcome, o.Reason = a.outcome, a.reason
	l.hist.add(o)
	return o
}

// waitFeedsSynced polls until every region's milestone feed has read the
// whole stream. Until a feed has first opened the stream, GET
// /v1/milestones can wait for it, seconds after /readyz says ready.
func waitFeedsSynced(ctx context.Context, d *deployment) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, p := range d.procs {
		for {
			_, synced, err := p.client.milestones(ctx)
			if err == nil && synced {
				break
			}
			if !poll.Sleep(ctx, 100*time.Millisecond) {
				return fmt.Errorf("%s's milestone feed not synced: synced=%v, %v", p.region, synced, err)
			}
		}
	}
	return nil
}

// eventList reads a region's milestones.
func eventList(t *testing.T, ctx context.Context, p *proc) []milestone.Event {
	t.Helper()
	evs, _, err := p.client.milestones(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// eventsBy lists the milestone numbers p's replica fired, in p's view.
func eventsBy(t *testing.T, ctx context.Context, p *proc) []uint64 {
	t.Helper()
	var out []uint64
	for _, e := range eventList(t, ctx, p) {
		if e.Replica == p.replica {
			out = append(out, e.Number)
		}
	}
	return out
}

// claimsBy lists the milestone numbers claimed in the KV by p's replica.
func claimsBy(t *testing.T, ctx context.Context, d *deployment, p *proc) []uint64 {
	t.Helper()
	nc, js, err := connectAllocator(d)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_, claims, _, err := readAllocator(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for n, c := range claims {
		if c.Replica == p.replica {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}
