// Package region is a replica's state machine: it applies likes, unlikes,
// increments and remote merges to the replica's state, persists them
// through storage, and answers reads with per-replica vectors. (A region
// is a geography, a replica one copy of the state with its own id, a node
// one tallyd process: docs/architecture.md, "Words".)
//
// # One writer
//
// Every change goes through a single writer goroutine. It takes whatever
// operations are queued (up to Config.MaxBatch), applies them in order to an
// overlay of the state they touch, writes the result as one storage batch,
// commits it with an fsync, and only then publishes the new values to
// readers, acknowledges the callers and hands the changes to replication.
//
// Why not let callers commit concurrently and rely on Pebble's own group
// commit? A replica stores absolute values of its own entries (P[self] = 41,
// then 42). Two concurrent commits may reach the WAL in either order, and a
// later 41 would overwrite 42; worse, a commit of 42 could become durable
// while the record of the 42nd like is not. A single writer keeps WAL order
// equal to apply order, one batch is atomic, and the fsync is still shared by
// every operation in the batch, so throughput grows with load instead of
// paying one fsync per request.
//
// # Faces
//
// Replica's own methods are its lifecycle (AcceptWrites, Stop, Close...),
// its clock, and the surface replication uses (Do, Apply, Merge,
// MergeSketches, ScanItems). Each data type is a face: a small value over
// the same *Replica, so over the same writer, whose methods live in that
// data type's file: Likes (likes.go), Lists (likers.go), Counters
// (counters.go), Uniques (uniques.go), Budgets (budgets.go, handoff.go),
// Windows (windows.go, trending.go), Numbers (numbering.go) and Admin
// (event types, the block list, audit, backup, expiry and shard drops).
// A face costs nothing to take: r.Likes().Count(item).
//
// # What readers see
//
// Readers see only committed state: hot vectors from an in-memory cache that
// only the writer fills (after each commit), everything else from Pebble. A
// value a reader sees is therefore durable.
//
// # Remote state
//
// Remote entries arrive as absolute values (MergeVector, MergeRecord) and
// are merged by max. A merged like record may make this replica the winner
// of a conflicting record; the reconciliation rule of package crdt then runs
// in the same batch, adjusting this replica's own entries.
//
// # Block list
//
// A user's block flag (crdt.Flag, blocks.go) changes what the winner of
// each of the user's like records aims for: a blocked user's like counts
// 0. When a flag's blocked state changes here, the writer reconciles in
// the same batch every record of the user it is the winner of and re-marks
// the others; a blocked user's likes and unlikes are refused (ErrBlocked).
//
// # Time windows
//
// Every change of an own entry is also booked, in the same batch, into the
// key's slots (windows.go), at the event's time or, for a
// reconciliation, at the winning action's. Trending (trending.go) takes
// candidates from local Space-Saving sketches fed by each commit and
// re-scores them exactly from the slots.
//
// # Approximate counters
//
// Counters under a prefix with an ApproxRule (Config.Approx) count an
// increment in steps that grow with the counter (approx.go): an increment
// of 1 counts as the step with probability 1/step, so a hot counter writes
// one entry per step increments. The coins come from a random source the
// writer goroutine owns (Config.Seed). An increment that counts nothing
// writes nothing, and a group commit that writes nothing is not committed.
// The count is unbiased, and its standard deviation is at most the rule's
// Error times the counter's magnitude (CounterStd), across any number of
// replicas. Likes are never approximate.
package region
