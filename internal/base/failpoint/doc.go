// Package failpoint is the one place a chaos build's deliberate faults are
// named: the bugs the chaos suite switches on to prove its checker catches
// them (its negative controls) and the crashes it aims at given steps.
//
// A point is armed in a Set, a value made by New (tests) or FromEnv
// (tallyd, from TALLY_CHAOS_BUG, TALLY_CHAOS_CRASH_BEFORE_CLAIM and
// TALLY_FAILPOINT) and handed down to the parts that evaluate it. Code
// asks Set.On(name) where the bug would be; outside a chaos build
// (`-tags chaos`) On is a constant false (failpoint_off.go), so the
// compiler removes the bug's code and production pays nothing. A nil Set
// arms nothing.
//
// The points, and what each does when armed (the names are the values of
// TALLY_CHAOS_BUG and of `tallyd chaos --bug`):
//
//	name                       package      what goes wrong
//	gossip-increments          replication  the fast path sends each own entry's growth, receivers add it: a duplicate counts twice
//	trust-relays               replication  every message is taken whole, whoever sent it: forgeries rewrite others' entries
//	trust-retired-relays       replication  a retired replica's state is taken from any peer at any time
//	ack-before-commit          region       a batch is acknowledged, then committed 250 ms later: kill -9 loses acked writes
//	no-reconcile               region       a record's winner does not reconcile: concurrent likes of one user count twice
//	clock-follows-wall         region       stamps follow the wall clock, steps and all, and ignore the peers' clocks
//	lists-local-only           region       like lists take only this replica's own likes, not merged ones
//	keys-not-reconciled        region       a keyed record's winner keeps a retry two regions both applied
//	log-skips-increments       region       increments are applied but not written to the event log
//	buckets-at-arrival         region       counter changes are booked at arrival, not at the event's time
//	sketch-merge-stored-only   region       a peer's sketch page merges only into a page already stored
//	spend-without-rights       region       a budget spend needs only enough left in view, not the rights to it
//	block-not-reconciled       region       a block flag merged from a peer does not reconcile the user's records
//	approx-coin-twice          region       an approximate keyed increment flips one coin for its answer, another for its write
//	give-what-is-asked         region       a holder gives a peer what it asks for, up to all it holds
//	clock-follows-peers        region       the peers' clock correction is the whole median offset, unbounded
//	estimate-unbounded         region       a saturated unique count's estimate reads +Inf
//	ack-unheld-writes          region+http  a write of a shard not held here is served here and acked unstored
//	split-user-two-parts       region+http  an unlike of a split item goes to another part than the user's likes
//	delete-before-sync         region+node  a shard move says synced at once and the leaver drops its own entries
//	toggle-applies-twice       region       a retried toggle flips the state again
//	merge-ignores-client-time  region       a merged like record is ordered by HLC alone, not by client time
//	cashback-no-floor          region       a cashback takes from the merchant's balance below zero
//	forwarded-ack-unapplied    node         a holder answers a forwarded write as served without applying it
//	fences-lose                region       a merged fence orders by HLC and origin alone, so a called-off purchase ends paid
//	part-digests-keys-only     replication  a part's digest hashes keys, not values: a stale entry is never repaired
//	diffs-without-relays       replication  a diff page for its asker leaves out what the asker takes as a relay only
//	crash-before-claim         milestone    the process kills itself (SIGKILL) just before its first milestone claim
//	cashback:<step>            node         the process kills itself as a cross-shard cashback is about to take <step>
//	                                        (journaled, pool, merchant, fence, call_off, user, done)
//
// The chaos suite's message faults (TALLY_CHAOS_NET: drop, duplicate and
// delay replication messages) are not here: they are a fault model of the
// network, not a bug, and stay replication's (replication.Config.NetFaults).
package failpoint
