package region

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tally-dev/tally/storage"
)

// approxCfg sets an approximate rule for "hot:" (target 10%) and a fixed
// seed, and collects the replica's commits.
func approxCfg(box *mailbox) func(*Config) {
	return func(c *Config) {
		c.Approx = []ApproxRule{{Prefix: "hot:", Error: 0.1}}
		c.Seed = 42
		c.EventLog = true
		if box != nil {
			c.OnCommit = box.onCommit
		}
	}
}

func commits(t *testing.T, r *Replica) uint64 {
	t.Helper()
	ws, err := r.store.WriteStats()
	if err != nil {
		t.Fatal(err)
	}
	return ws.Commits
}

// ownChanges counts the own-entry changes of key handed to replication.
func ownChanges(box *mailbox, key string) int {
	n := 0
	for _, c := range box.take() {
		for _, v := range c.Vectors {
			if v.Kind == storage.Counters && v.Item == key {
				n++
			}
		}
	}
	return n
}

// The same single increments, one request at a time, on an exact counter
// and on an approximate one: the approximate one commits, fsyncs and hands
// replication a fraction of them, and its reads say so with a bound the
// value is within; the exact one is exact and says nothing new.
func TestApproxCounterWritesFewerBatches(t *testing.T) {
	box := &mailbox{}
	r, _ := openReplica(t, t.TempDir(), "a", approxCfg(box))
	ctx := context.Background()
	const n = 3000
	run := func(key string) (uint64, int) {
		before := commits(t, r)
		box.take()
		for range n {
			res, err := r.Counters().Incr(ctx, key, 1, "")
			if err != nil {
				t.Fatal(err)
			}
			if res.Approx != (key != "exact") {
				t.Fatalf("%s: result %+v", key, res)
			}
		}
		return commits(t, r) - before, ownChanges(box, key)
	}
	exactCommits, exactEntries := run("exact")
	approxCommits, approxEntries := run("hot:a")
	t.Logf("%d increments: exact %d commits, %d replicated entries; approx %d commits, %d entries",
		n, exactCommits, exactEntries, approxCommits, approxEntries)
	if exactCommits != n || exactEntries != n {
		t.Fatalf("exact: %d commits and %d entries for %d increments", exactCommits, exactEntries, n)
	}
	// 2/a exact increments (a = 0.02), then 1/a per doubling: about 350.
	if approxCommits > n/5 || approxEntries > n/5 || approxCommits == 0 {
		t.Fatalf("approx: %d commits and %d entries for %d increments, want a fraction", approxCommits, approxEntries, n)
	}
	if changed := testutil.ToFloat64(r.metrics.ownChanged); changed < float64(exactEntries+approxEntries) {
		t.Fatalf("tally_own_entries_changed_total %v, below the %d counter entries handed over", changed, exactEntries+approxEntries)
	}
	written := testutil.ToFloat64(r.metrics.approxWritten)
	skipped := testutil.ToFloat64(r.metrics.approxSkipped)
	if written+skipped != n || written != float64(approxCommits) {
		t.Fatalf("metrics: %v written, %v skipped; %d commits", written, skipped, approxCommits)
	}

	ex, err := r.Counters().Get("exact")
	if err != nil || ex.Value != n || ex.ApproxError != 0 {
		t.Fatalf("exact read: %+v, %v", ex, err)
	}
	ap, err := r.Counters().Get("hot:a")
	if err != nil || ap.ApproxError != 0.1 {
		t.Fatalf("approx read: %+v, %v", ap, err)
	}
	std := CounterStd(ap.ApproxError, ap.Vector)
	if math.Abs(std-0.1*float64(ap.Value)) > 1e-6 || math.Abs(float64(ap.Value-n)) > 3*std {
		t.Fatalf("approx value %d, std bound %v; sent %d", ap.Value, std, n)
	}
	// Slots book what was counted: the last hour adds up to the
	// counter.
	now := time.Now().UnixMilli()
	win, err := r.Windows().Of(storage.Counters, "hot:a", now-time.Hour.Milliseconds(), now+1000)
	if err != nil || win.Sum().Value() != ap.Value {
		t.Fatalf("window of the approx counter: %d, %v; counter %d", win.Sum().Value(), err, ap.Value)
	}
	// The log adds up to the entry (the audit passes).
	if rep, err := r.Admin().Audit(storage.Counters, "hot:a"); err != nil || !rep.OK() {
		t.Fatalf("audit: %+v, %v", rep, err)
	}
}

// A group commit whose approximate increments all count nothing writes
// nothing and is not committed (no fsync); one where any counts commits
// once. Likes are never approximate, whatever the rules say.
func TestApproxBatchThatCountsNothingSkipsTheCommit(t *testing.T) {
	r, _ := openReplica(t, t.TempDir(), "a", func(c *Config) {
		approxCfg(nil)(c)
		c.Approx = append(c.Approx, ApproxRule{Prefix: "", Error: 0.5})
	})
	ctx := context.Background()
	if _, err := r.Counters().Incr(ctx, "hot:a", 1_000_000, ""); err != nil { // exact: the step was 1
		t.Fatal(err)
	}
	ops := make([]Op, 10)
	for i := range ops {
		ops[i] = Op{Kind: OpIncr, Item: "hot:a", By: 1}
	}
	skippedAll, wrote := 0, 0
	for range 40 {
		before := commits(t, r)
		res, err := r.Do(ctx, ops)
		if err != nil {
			t.Fatal(err)
		}
		counted := int64(0)
		for _, x := range res {
			if x.Err != nil || !x.Approx || x.Counted%16384 != 0 {
				t.Fatalf("result %+v", x)
			}
			counted += x.Counted
		}
		got := commits(t, r) - before
		switch {
		case counted == 0 && got != 0:
			t.Fatalf("a batch that counted nothing committed %d times", got)
		case counted != 0 && got != 1:
			t.Fatalf("a batch that counted %d committed %d times", counted, got)
		case counted == 0:
			skippedAll++
		default:
			wrote++
		}
	}
	if skippedAll == 0 {
		t.Fatal("no batch counted nothing: at step 16384 nearly all should")
	}
	for i := range 5 {
		res, err := r.Likes().Like(ctx, "post", string(rune('a'+i)))
		if err != nil || res.Value != int64(i+1) {
			t.Fatalf("like %d: %+v, %v", i, res, err)
		}
	}
	if rd := mustLikes(t, r, "post"); rd.ApproxError != 0 || rd.Value != 5 {
		t.Fatalf("likes read %+v", rd)
	}
}

// A keyed increment of an approximate counter flips its coin once: a retry
// (here or at a replica that has the key) is a duplicate of that decision,
// whatever it was, even nothing; a different amount under the same key is
// refused. Decrements grow the N side in steps. A restart keeps the value
// and the keys.
func TestApproxKeyedOnceAndRestart(t *testing.T) {
	dir := t.TempDir()
	r, closeR := openReplica(t, dir, "a", approxCfg(nil))
	ctx := context.Background()
	if _, err := r.Counters().Incr(ctx, "hot:k", 1000, ""); err != nil { // step 1 here; 16 after (0.02 · 1000 = 20)
		t.Fatal(err)
	}
	zero, some := 0, 0
	for i := range 300 {
		key := "req-" + string(rune('A'+i/26)) + string(rune('a'+i%26))
		first, err := r.Counters().Incr(ctx, "hot:k", 1, key)
		if err != nil || !first.Approx || first.Duplicate || first.Counted%16 != 0 {
			t.Fatalf("first %s: %+v, %v", key, first, err)
		}
		if first.Counted == 0 {
			zero++
		} else {
			some++
		}
		again, err := r.Counters().Incr(ctx, "hot:k", 1, key)
		if err != nil || !again.Duplicate || again.Counted != 0 || again.Value != first.Value {
			t.Fatalf("retry of %s: %+v, %v after %+v", key, again, err, first)
		}
		if _, err := r.Counters().Incr(ctx, "hot:k", 2, key); !errors.Is(err, ErrIdempotencyMismatch) {
			t.Fatalf("reuse of %s with another amount: %v", key, err)
		}
		rec, ok, err := r.store.KeyedRecord("hot:k", key)
		if err != nil || !ok || rec.Requested() != 1 || rec.Amount != first.Counted || rec.Excess() != 0 {
			t.Fatalf("record of %s: %+v, %v, %v", key, rec, ok, err)
		}
	}
	if zero == 0 || some == 0 {
		t.Fatalf("%d keyed increments counted nothing, %d a step: want both", zero, some)
	}
	for range 2000 {
		if _, err := r.Counters().Incr(ctx, "hot:k", -1, ""); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := r.Counters().Get("hot:k")
	if own := before.Vector.Get("a"); own.N == 0 || own.N%16 != 0 || own.N == 2000 {
		t.Fatalf("decrements: own entry %+v, want N in steps of 16 or more", own)
	}
	closeR()
	r2, _ := openReplica(t, dir, "a", approxCfg(nil))
	after, err := r2.Counters().Get("hot:k")
	if err != nil || after.Value != before.Value || !after.Vector.Equal(before.Vector) {
		t.Fatalf("after restart %+v, %v; before %+v", after, err, before)
	}
	if res, err := r2.Counters().Incr(ctx, "hot:k", 1, "req-Aa"); err != nil || !res.Duplicate {
		t.Fatalf("a retry after restart: %+v, %v", res, err)
	}
}

// Two replicas apply one key of an approximate counter unaware of each
// other: after the exchange both count the later application's decision,
// once, and both remember the client's amount.
func TestApproxKeyedAcrossReplicas(t *testing.T) {
	boxA, boxB, clock := &mailbox{}, &mailbox{}, &stepClock{}
	a, _ := openReplica(t, t.TempDir(), "A", func(c *Config) { approxCfg(boxA)(c); c.Now = clock.now })
	b, _ := openReplica(t, t.TempDir(), "B", func(c *Config) { approxCfg(boxB)(c); c.Now, c.Seed = clock.now, 43 })
	ctx := context.Background()
	if _, err := a.Counters().Incr(ctx, "hot:x", 1_000_000, ""); err != nil {
		t.Fatal(err)
	}
	exchange(t, a, b, boxA, boxB)
	ra, err := a.Counters().Incr(ctx, "hot:x", 3, "req-1")
	if err != nil {
		t.Fatal(err)
	}
	rb, err := b.Counters().Incr(ctx, "hot:x", 3, "req-1") // unaware of A's
	if err != nil || rb.Duplicate {
		t.Fatalf("B: %+v, %v", rb, err)
	}
	exchange(t, a, b, boxA, boxB)
	for _, r := range []*Replica{a, b} {
		rd, err := r.Counters().Get("hot:x")
		if err != nil || rd.Unreconciled != 0 || rd.Value != 1_000_000+rb.Counted {
			t.Fatalf("%s: %+v, %v; A counted %d, B (later) %d", r.ID(), rd, err, ra.Counted, rb.Counted)
		}
		rec, _, _ := r.store.KeyedRecord("hot:x", "req-1")
		if rec.Requested() != 3 || rec.Amount != rb.Counted || rec.Origin != "B" {
			t.Fatalf("%s record %+v", r.ID(), rec)
		}
	}
}
