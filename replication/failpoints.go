package replication

import (
	"fmt"
	"hash/fnv"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/internal/base/buildtags"
	"github.com/tally-dev/tally/internal/base/failpoint"
	"github.com/tally-dev/tally/storage"
)

// EnvChaosNet holds the message faults a chaos build (`go build -tags
// chaos`) puts replication's publishes through, in ParseChaosNet's syntax,
// e.g. "drop=0.1,dup=0.1,delay=30ms,seed=7"; NetFaultsFromEnv reads it.
// They are the chaos suite's model of a bad network, not a bug, so they
// are no failpoint: Config.NetFaults carries them.
const EnvChaosNet = "TALLY_CHAOS_NET"

// NetFaultsFromEnv reads EnvChaosNet through getenv (os.Getenv in tallyd).
// In a build without the chaos tag it returns no faults: the variable
// means nothing there.
func NetFaultsFromEnv(getenv func(string) string) (Faults, error) {
	if !buildtags.Chaos || getenv == nil {
		return Faults{}, nil
	}
	spec := getenv(EnvChaosNet)
	net, err := ParseChaosNet(spec)
	if err != nil {
		return Faults{}, fmt.Errorf("%s=%q: %w", EnvChaosNet, spec, err)
	}
	return net, nil
}

// The deliberate bugs of replication, each behind its failpoint (package
// failpoint's table): Config.Failpoints arms them, and outside a chaos
// build failpoint.Set.On is a constant false that removes them.
//
// gossip-increments: the fast path publishes how much each own entry grew
// since the last flush instead of its absolute value, and receivers add
// that to their copy of the sender's entry instead of max-merging. That is
// the one thing the design forbids: a duplicated message counts twice,
// and the sum races anti-entropy.
//
// trust-relays: every message is taken whole, whoever sent it, as before
// authority.go: a forged record rewrites other replicas' parts and a
// stranger becomes a peer.
//
// trust-retired-relays: state of a retired replica is taken from any
// peer, on the fast path and in pages, at any time, as before issue 27: a
// region that names the retired id in a like record's contributions makes
// the record's winner reconcile the forged count away with its own entry.
//
// part-digests-keys-only: repair by parts digests a part by its entries'
// keys alone, on both sides (serveParts, pullParts), as if an entry were
// either held or lacking. A part where a replica holds an older value of
// a key, and nothing else differs, compares equal and is not asked for:
// the segment differs on every round and the stale entry stays, unless
// the fast path brings a newer value. Under it every differing segment is
// compared by parts, however small (pullParts asks a small one's
// difference at once otherwise, and the digests would not matter).
//
// diffs-without-relays: a diff page for a request naming its asker
// carries the sender's and the asker's entries only (givesTo), not those
// of a replica that left the shard or was retired: a replica recovering
// from an empty store, or joining the shard, never gets them.

// gossipIncrements reports whether the gossip-increments bug is on.
func (r *Replicator) gossipIncrements() bool {
	return r.cfg.Failpoints.On(failpoint.GossipIncrements)
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
	return r.cfg.Failpoints.On(failpoint.TrustRelays)
}

// trustRetiredRelays reports whether the bug TrustRetiredRelays is on.
func (r *Replicator) trustRetiredRelays() bool {
	return r.cfg.Failpoints.On(failpoint.TrustRetiredRelays)
}

// keysOnlyParts reports whether the bug PartDigestsKeysOnly is on.
func (r *Replicator) keysOnlyParts() bool {
	return r.cfg.Failpoints.On(failpoint.PartDigestsKeysOnly)
}

// partHash is an entry's share of its part's digest: its entry hash h,
// or, under the bug part-digests-keys-only, a hash of its key alone.
func (r *Replicator) partHash(key []byte, h uint64) uint64 {
	if !r.keysOnlyParts() {
		return h
	}
	f := fnv.New64a()
	f.Write(key)
	return f.Sum64()
}

// diffsWithoutRelays reports whether the bug DiffsWithoutRelays is on.
func (r *Replicator) diffsWithoutRelays() bool {
	return r.cfg.Failpoints.On(failpoint.DiffsWithoutRelays)
}
