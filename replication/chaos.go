package replication

import (
	"fmt"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/internal/base/buildtags"
	"github.com/tally-dev/tally/storage"
)

// The environment variables a chaos build (`go build -tags chaos`) reads,
// through ChaosFromEnv.
const (
	// EnvChaosNet holds message faults in ParseChaosNet's syntax, e.g.
	// "drop=0.1,dup=0.1,delay=30ms,seed=7".
	EnvChaosNet = "TALLY_CHAOS_NET"
	// EnvChaosBug names one deliberate bug; replication's is
	// BugGossipIncrements (other packages read other values).
	EnvChaosBug = "TALLY_CHAOS_BUG"
	// BugGossipIncrements is the EnvChaosBug value that sets
	// Chaos.GossipIncrements.
	BugGossipIncrements = "gossip-increments"
	// BugTrustRelays is the EnvChaosBug value that sets Chaos.TrustRelays.
	BugTrustRelays = "trust-relays"
	// BugTrustRetiredRelays is the EnvChaosBug value that sets
	// Chaos.TrustRetiredRelays.
	BugTrustRetiredRelays = "trust-retired-relays"
)

// Chaos is what a chaos build may do to replication so that the chaos
// suite can prove it catches faults and bugs. Every field is honoured only
// in a chaos build; in any other the code that reads them compiles away.
// The zero Chaos changes nothing.
type Chaos struct {
	// Net: every message the replicator publishes (the fast path: deltas
	// and heartbeats) goes through a FaultyTransport with these faults.
	// Anti-entropy requests are left alone.
	Net Faults
	// GossipIncrements switches on a deliberate bug: the fast path
	// publishes how much each own entry grew since the last flush instead
	// of its absolute value, and receivers add that to their copy of the
	// sender's entry instead of max-merging. That is the one thing the
	// design forbids: a duplicated message counts twice, and the sum races
	// anti-entropy.
	GossipIncrements bool
	// TrustRelays switches on a deliberate bug: every message is taken
	// whole, whoever sent it, as before authority.go: a forged record
	// rewrites other replicas' parts and a stranger becomes a peer.
	TrustRelays bool
	// TrustRetiredRelays switches on a deliberate bug: state of a retired
	// replica is taken from any peer, on the fast path and in pages, at
	// any time, as before issue 27: a region that names the retired id
	// in a like record's contributions makes the record's winner
	// reconcile the forged count away with its own entry.
	TrustRetiredRelays bool
}

// ChaosFromEnv reads EnvChaosNet and EnvChaosBug through getenv (os.Getenv
// in tallyd). In a build without the chaos tag it returns the zero Chaos:
// the variables mean nothing there.
func ChaosFromEnv(getenv func(string) string) (Chaos, error) {
	if !buildtags.Chaos {
		return Chaos{}, nil
	}
	spec := getenv(EnvChaosNet)
	net, err := ParseChaosNet(spec)
	if err != nil {
		return Chaos{}, fmt.Errorf("%s=%q: %w", EnvChaosNet, spec, err)
	}
	bug := getenv(EnvChaosBug)
	return Chaos{Net: net, GossipIncrements: bug == BugGossipIncrements, TrustRelays: bug == BugTrustRelays,
		TrustRetiredRelays: bug == BugTrustRetiredRelays}, nil
}

// gossipIncrements reports whether the gossip-increments bug is on.
func (r *Replicator) gossipIncrements() bool {
	return buildtags.Chaos && r.cfg.Chaos.GossipIncrements
}

// chaosOutgoing, under the gossip-increments bug, turns absolute own
// entries into their growth since the last flush; sent holds the entries
// as last published and is the flusher's.
func chaosOutgoing(sent map[outVec]crdt.PN, vecs []OwnEntry) {
	for i, v := range vecs {
		k := outVec{v.Kind, v.Item}
		last := sent[k]
		sent[k] = v.PN
		vecs[i].PN = crdt.PN{P: v.PN.P - min(last.P, v.PN.P), N: v.PN.N - min(last.N, v.PN.N)}
	}
}

// chaosIncoming, under the gossip-increments bug, adds a received
// increment to the local copy of the sender's entry; the result is then
// max-merged, which keeps the sum.
func (r *Replicator) chaosIncoming(sender string, e OwnEntry) crdt.PN {
	read := r.cfg.Replica.Counters().Get
	if e.Kind == storage.Likes {
		read = r.cfg.Replica.Likes().Count
	}
	rd, err := read(e.Item)
	if err != nil {
		return e.PN
	}
	cur := rd.Vector.Get(sender)
	return crdt.PN{P: cur.P + e.PN.P, N: cur.N + e.PN.N}
}

// trustRelays reports whether the bug TrustRelays is on.
func (r *Replicator) trustRelays() bool {
	return buildtags.Chaos && r.cfg.Chaos.TrustRelays
}

// trustRetiredRelays reports whether the bug TrustRetiredRelays is on.
func (r *Replicator) trustRetiredRelays() bool {
	return buildtags.Chaos && r.cfg.Chaos.TrustRetiredRelays
}
