// Package chaos is tally's chaos suite: it runs a real multi-region
// deployment under a seeded workload and a seeded fault schedule, then
// checks every region's final state, and the history of every operation,
// against an exact model.
//
// # Deployment under test
//
// The harness process runs the NATS super-cluster (package localnet: one
// embedded nats-server per region, gateway links through proxies the
// harness can cut, make lossy or flap). Each region's replica is a separate
// OS process, `tallyd serve`, run from the binary under test, so kill -9 is
// real. A chaos build of that binary (`go build -tags chaos`) also drops,
// duplicates and delays replication messages (TALLY_CHAOS_NET) and can run
// with one deliberate bug (TALLY_CHAOS_BUG) for negative controls. The
// regions number every counted like and fire milestones
// (Config.Milestones, default every:50), with the allocator's KV and the
// milestone stream in the first region. With Config.Replicas above 1 each
// region runs that many processes, sharded, and every check reads every
// replica (Config.Replicas says what a sharded run checks).
//
// # Faults
//
// Plan turns the seed into a schedule of episodes, one after another:
// isolating a region, majority/minority splits (four regions or more), one
// cut link, one-way loss, a flapping link, kill -9 and restart of a region,
// restart from a wiped data dir, restart of a region's nats-server. Message
// faults, when on, last the whole run. At the end everything is healed.
// Config.Schedule replaces the seeded schedule, for tests of one fault,
// such as pausing a region's process (SIGSTOP) past its lease TTL.
//
// # Workload
//
// Clients like and unlike Zipf-skewed items as many users, each user's
// actions one after another except deliberate concurrent pairs (one user in
// two regions at once), and increment a few counters with idempotency keys.
// Every operation is recorded with its outcome: acknowledged, failed (the
// region was down or recovering: not applied) or timed out (maybe applied).
// A timed-out like is retried at the same region until acknowledged. A
// share of increments (Config.RetryElsewhere) is sent again with the same
// idempotency key to another region, at once or a few hundred ms later,
// as a client failing over would: during a cut both regions apply it, and
// it must still count once. A timed-out increment is resolved after the
// final heal by resending its key, so every operation counts exactly once
// or not at all, and the model has one exact value per key.
//
// A share of the increments go to approximate counters (apx-0, ...; the
// regions run with an approx rule on apx-), which count in steps decided
// by a coin; each answer says what it counted (approx.go).
//
// Clients also add ids to a few unique counts (uv:1, uv:2, uv:3: POST
// /v1/uniques/{key} with one id or a list, or a batch of unique events),
// drawn from one pool of ids so that the same id is added in several
// regions, to several keys and more than once; a third of the adds go to
// two regions at once. Adding is idempotent: an add whose answer is lost
// is sent again to the same region until acknowledged, so the model knows
// exactly which ids every key holds.
//
// Clients also grant and spend budgets (bud:1, bud:2, the merchants'
// balances m:1, m:2 and the cashback pool cb:pool): grants of 2 to 6 at
// random regions, spends of 1 to 3, half of them with an idempotency key,
// and cashbacks of 1 to 3 from the pool (each spends the pool and a
// merchant's balance, which is never overdrawn, and credits a user's
// counter cu:1 to cu:3, one key per purchase); a third of the grants and spends go as one-event
// batches (POST /v1/events). Grants are small beside the spending, so the budgets
// run out again and again, while regions are cut apart too. A 409
// (budget_exhausted, rights_elsewhere) is a normal answer; a
// rights_elsewhere is tried again at the same region a moment later. A
// share of keyed spends and cashbacks (Config.RetryElsewhere), and every
// one whose answer was lost, is sent again, same key and amount, to
// another region. A grant or unkeyed spend whose answer was lost is not
// sent again: the model counts it as maybe applied, and so a keyed one no
// region acknowledged.
//
// Admins block and unblock the first Config.BlockUsers users at random
// regions (blocks.go), also while regions are cut apart. A blocked user's
// like refused with 403 user_blocked was not applied; a block whose answer
// was lost is retried at the same region until acknowledged.
//
// Every increment, and half the likes and unlikes, carries the client's
// own time of the event ("at", up to 3 s before it is sent, as an app
// that queues events sends them), the same in every attempt and resend of
// an increment, so the model knows the 1 s slot of each. A third of the
// increments go as one-event batches (POST /v1/events). The client's time
// orders a user's actions: late pairs (Config.LateWeight) send a like or
// unlike stamped now, then, at another region, the opposite action
// stamped 30 s earlier, which must lose everywhere.
//
// Users also toggle their likes (Config.ToggleWeight), each toggle under
// its own idempotency key and recorded with the state its answer said; a
// timed-out one is sent again, same key, to the same region until
// acknowledged, and an acknowledged one once more (a lost answer), which
// must answer duplicate:true and the same state. A share
// (Config.RetryElsewhere) is then sent with its key to another region.
//
// # Checks
//
// After the final heal and convergence, a run passes when:
//   - every region reads every counter as the sum of its applied
//     increments, and every item's count as the number of users whose last
//     action was a like (for a last concurrent pair, either action may win,
//     and the count must match the records) and whose final block flag is
//     not blocked, all with approx:false;
//   - every region holds, for every user blocked or unblocked, the flag of
//     the acknowledged block or unblock with the largest (stamp, replica);
//   - every region agrees on every user's record, and each record matches
//     the user's winning acknowledged action (no acknowledged write
//     lost): the latest by the client's time where actions carry one,
//     else the last sent (an action without a client time is placed
//     among those with one by its span, first send to last answer plus
//     how far a replica's clock may lead; where that leaves two
//     candidates, either may win);
//   - a toggle's key resent to the region that acknowledged it answers
//     duplicate:true and the same state;
//   - nothing counts twice;
//   - every region's list of an item's likers (GET /v1/likers/{item}) is
//     exactly the users whose records there say liked;
//   - no replica's own vector entry was ever seen to decrease, across
//     kill -9 and wipes (sampled through the run);
//   - every region's slots of every counter, and of the counters'
//     total, read at 1 s, 1 min and 1 h over the run, equal the model's
//     slot by slot (an increment resolved too late for its event time
//     may be in either of two slots, whose sum is exact); every region
//     reads the same slots of every item and of the likes' total, and
//     they sum to the model's count;
//   - trending over a window holding the run (2 h, if the run is shorter)
//     lists, in every region, the model's top counters and items with
//     their exact counts (ties in any order);
//   - every region answers every unique count (each key and the union of
//     all, over all time and the last 24 h) with the estimate of the
//     model's sketch of the acknowledged ids (a crdt.HLL built from them,
//     as a replica builds its own: identical registers give the identical
//     estimate), the same in every region, within 5 standard errors of
//     the number of distinct ids, from the sketches of exactly the
//     replicas that acknowledged adds, and not stale;
//   - every region reads each approximate counter alike, approx:true,
//     between the sums of the smallest and largest count each applied
//     increment can have kept (what its answers said it counted; within
//     bounds if an answer was lost), and within 6 times its error bound
//     of the true sum of the increments; its slots are compared
//     between regions and count in the counters' total;
//   - no region's view of a budget, sampled through the run, showed
//     remaining below 0 (or spent above granted), and no replica held
//     negative rights in its own view (local_rights); after the final
//     heal every region reads every budget alike, nothing unreconciled,
//     remaining ≥ 0, the rights (each ≥ 0) adding up to it, and within
//     the model's bounds: between the acknowledged grants less the
//     acknowledged spends (each idempotency key once) plus the maybe
//     spends, and the same plus the maybe grants (granted and spent may
//     both exceed the acknowledged amounts by the refunds of keys two
//     regions applied, bounded by the model), which for the merchants'
//     balances is their floor; the accounts conserve their sum (what
//     the merchants have left plus the users' credits is what was
//     granted to the merchants), each user within the model's bounds
//     (each acknowledged purchase once), and the
//     users' credits are what the pool's grants less its remaining say
//     it spent;
//   - every restarted region became ready;
//   - once numbering has settled (no like waits for a number, no lease is
//     held, every block is closed and its ranks taken), every milestone
//     rank up to the allocator's dense rank (the count of numbers used)
//     fired exactly once, and none above it: claimed in the KV,
//     published, and listed alike by every region, for a like the
//     workload did in the region that fired it, and no claim lost to
//     another like of the same rank (tally_milestones_lost_total is 0 in
//     every process).
//
// It measures how long after each heal every region holds what any region
// held, how long after the final heal every region reads the model value,
// restart-to-ready times, and the availability and latency of local writes
// while regions are cut apart. Run returns a Report; `tallyd chaos` prints
// it and writes it as JSON.
package chaos
