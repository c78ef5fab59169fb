package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/internal/base/poll"
)

// The block list in the chaos suite. Clients (admins) block and unblock a
// few users (the first Config.BlockUsers) at random regions, also while
// regions are cut apart, so a block often reaches a region only after it
// took more likes of the user, and two regions may flag one user at once.
// A timed-out block or unblock is retried at the same region until
// acknowledged: its retry is stamped later by that replica, so the
// acknowledged one is the last this region set, whatever the first did.
//
// The model: a user's final flag is the acknowledged block or unblock
// with the largest (stamp, replica), as each answered; every region must
// end with exactly that flag, and an item counts only the users whose
// final flag is not blocked. A blocked user's like refused with 403
// user_blocked was not applied (a failed operation); a like whose first
// attempt timed out and whose retry was refused (the block arrived in
// between) may or may not have applied: it leaves the record unknown,
// which matters to a count only if the user ends unblocked.

// block draws an admin's block or unblock.
func (p *planner) block() *Op {
	kind := OpUnblock
	if p.rng.IntN(2) == 0 {
		kind = OpBlock
	}
	return &Op{Kind: kind, Region: p.region(), User: userID(p.rng.IntN(p.cfg.BlockUsers))}
}

// execBlock runs a block or unblock, retried at the same region while its
// answer is lost.
func (w *workload) execBlock(retry context.Context, o *Op) {
	for {
		o.Attempts++
		ctx, cancel := context.WithTimeout(retry, w.cfg.ClientTimeout)
		b, err := w.client(o.Region).api.Block(ctx, o.User, o.Kind == OpBlock)
		cancel()
		out, reason := classify(err)
		if o.Attempts == 1 {
			o.Outcome, o.Reason = out, reason
		}
		if out == OutcomeOK {
			o.Outcome, o.FlagHLC, o.FlagReplica = OutcomeOK, b.HLC, b.Replica
			return
		}
		if o.Outcome == OutcomeFailed || !poll.Sleep(retry, 200*time.Millisecond) {
			return // not applied, or stays a timeout: unresolved
		}
	}
}

// flagStamp orders flags: the stamp "<unix ms>.<logical>" as one number.
func flagStamp(hlc string) (uint64, bool) {
	ms, logical, ok := strings.Cut(hlc, ".")
	m, err1 := strconv.ParseUint(ms, 10, 48)
	l, err2 := strconv.ParseUint(logical, 10, 16)
	return m<<16 | l, ok && err1 == nil && err2 == nil
}

// flagModel is the winning flag per user, from the acknowledged blocks
// and unblocks.
type flagModel struct {
	// Final: per user ever blocked or unblocked, the winning flag.
	Final map[string]api.Block
	// Uncertain: users with a block or unblock never acknowledged, whose
	// final flag the model cannot know.
	Uncertain map[string]bool
}

// blocked reports whether user's final flag is blocked.
func (f flagModel) blocked(user string) bool { return f.Final[user].Blocked }

func buildFlags(ops []Op) (flagModel, []Violation) {
	f := flagModel{Final: map[string]api.Block{}, Uncertain: map[string]bool{}}
	var vs []Violation
	stamps := map[string]uint64{}
	for i := range ops {
		o := &ops[i]
		if !o.Kind.blockOp() {
			continue
		}
		switch o.Outcome {
		case OutcomeOK:
			s, ok := flagStamp(o.FlagHLC)
			if !ok {
				vs = append(vs, Violation{Kind: KindBlocks, Region: o.Region, User: o.User, Op: o.ID,
					Detail: fmt.Sprintf("%s answered the stamp %q, not <ms>.<logical>", o.Kind, o.FlagHLC)})
				continue
			}
			cur, have := f.Final[o.User]
			if !have || s > stamps[o.User] || s == stamps[o.User] && o.FlagReplica > cur.Replica {
				f.Final[o.User] = api.Block{User: o.User, Blocked: o.Kind == OpBlock, HLC: o.FlagHLC, Replica: o.FlagReplica}
				stamps[o.User] = s
			}
		case OutcomeTimeout:
			f.Uncertain[o.User] = true
			vs = append(vs, Violation{Kind: KindUnresolved, Region: o.Region, User: o.User, Op: o.ID,
				Detail: fmt.Sprintf("%s was never acknowledged after %d attempts", o.Kind, o.Attempts)})
		}
	}
	return f, vs
}

// blockedUsers lists the users the workload blocked or unblocked.
func blockedUsers(ops []Op) []string {
	seen := map[string]bool{}
	for i := range ops {
		if ops[i].Kind.blockOp() {
			seen[ops[i].User] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// readFlags reads, in every region, the flag of every user the workload
// blocked or unblocked.
func readFlags(ctx context.Context, procs []*proc, users []string) map[string]map[string]*api.Block {
	out := map[string]map[string]*api.Block{}
	for _, u := range users {
		out[u] = perRegion(ctx, procs, 5*time.Second, func(ctx context.Context, p *proc) (api.Block, error) {
			return p.client.api.BlockOf(ctx, u)
		})
	}
	return out
}

// checkFlags reports a region whose final flag of a user is not the
// model's winner (or could not be read).
func checkFlags(f flagModel, final finalState) []Violation {
	var vs []Violation
	for _, u := range slices.Sorted(maps.Keys(final.Flags)) {
		want, ok := f.Final[u]
		if !ok || f.Uncertain[u] {
			continue
		}
		for _, r := range final.Regions {
			got, ok := final.Flags[u][r]
			switch {
			case !ok:
				vs = append(vs, Violation{Kind: KindNotConverged, Region: r, User: u, Detail: "the final block flag could not be read"})
			case got.Blocked != want.Blocked || got.HLC != want.HLC || got.Replica != want.Replica:
				vs = append(vs, Violation{Kind: KindBlocks, Region: r, User: u,
					Detail: fmt.Sprintf("flag blocked=%v at %s by %s, but the latest acknowledged action was blocked=%v at %s by %s",
						got.Blocked, got.HLC, got.Replica, want.Blocked, want.HLC, want.Replica)})
			}
		}
	}
	return vs
}
