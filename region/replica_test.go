package region

import (
	"context"
	"errors"
	"fmt"
	"github.com/tally-dev/tally/internal/base/testkit"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// openReplica opens a replica on a real Pebble dir; closing is registered
// with t.Cleanup and may also be done early by the returned func.
func openReplica(t *testing.T, dir, id string, mut func(*Config)) (*Replica, func()) {
	t.Helper()
	return openReplicaStore(t, storage.Config{Dir: dir}, id, mut)
}

// openReplicaStore is openReplica on a store opened with scfg.
func openReplicaStore(t *testing.T, scfg storage.Config, id string, mut func(*Config)) (*Replica, func()) {
	t.Helper()
	st, err := storage.Open(scfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Region: "test", Replica: id, Store: st}
	if mut != nil {
		mut(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		_ = st.Close()
		t.Fatal(err)
	}
	var once sync.Once
	closeFn := func() {
		once.Do(func() {
			if err := r.Close(); err != nil {
				t.Error(err)
			}
			if err := st.Close(); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(closeFn)
	return r, closeFn
}

// Ops whose caller has given up before the writer takes them are not
// applied: a client that timed out and retried elsewhere must not see its
// first attempt land after its later actions. Before the writer checked,
// about half of these likes applied (Do's queueing raced the deadline).
func TestOpsPastTheirDeadlineAreNotApplied(t *testing.T) {
	r, _ := openReplica(t, t.TempDir(), "a", nil)
	gone, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	for i := range 100 {
		if _, err := r.Likes().Like(gone, "post", fmt.Sprintf("u%d", i)); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("like %d past its deadline answered %v", i, err)
		}
	}
	if _, err := r.Likes().Like(context.Background(), "post", "last"); err != nil {
		t.Fatal(err)
	}
	if got := mustLikes(t, r, "post"); got.Value != 1 {
		t.Fatalf("the item counts %d, want 1: likes past their deadline were applied", got.Value)
	}
}

func mustLikes(t *testing.T, r *Replica, item string) Read {
	t.Helper()
	rd, err := r.Likes().Count(item)
	if err != nil {
		t.Fatal(err)
	}
	return rd
}

func TestLikeUnlikeIdempotent(t *testing.T) {
	r, _ := openReplica(t, t.TempDir(), "a", nil)
	ctx := context.Background()
	steps := []struct {
		like    bool
		user    string
		changed bool
		count   int64
	}{
		{true, "u1", true, 1},
		{true, "u1", false, 1}, // liking twice counts once
		{true, "u2", true, 2},
		{false, "u1", true, 1},
		{false, "u1", false, 1}, // unliking twice too
		{false, "u3", false, 1}, // unlike of a never-liked user
		{true, "u1", true, 2},
	}
	for i, s := range steps {
		var res Result
		var err error
		if s.like {
			res, err = r.Likes().Like(ctx, "post", s.user)
		} else {
			res, err = r.Likes().Unlike(ctx, "post", s.user)
		}
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if res.Changed != s.changed || res.Value != s.count || res.Liked != s.like {
			t.Fatalf("step %d: got %+v, want changed=%v count=%d liked=%v", i, res, s.changed, s.count, s.like)
		}
	}
	if got := mustLikes(t, r, "post"); got.Value != 2 || got.Vector.Get("a") != (crdt.PN{P: 3, N: 1}) {
		t.Fatalf("read %+v", got)
	}
	for user, want := range map[string]bool{"u1": true, "u2": true, "u3": false, "nobody": false} {
		if got, err := r.Likes().Liked("post", user); err != nil || got != want {
			t.Fatalf("Liked(%s) = %v, %v; want %v", user, got, err, want)
		}
	}
}

func TestConcurrentLikesExactAndDurable(t *testing.T) {
	dir := t.TempDir()
	r, closeR := openReplica(t, dir, "a", nil)
	ctx := context.Background()
	const users, workers = 1000, 16
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := w; u < users; u += workers {
				// Every user likes twice: a retry must not count again.
				for range 2 {
					if _, err := r.Likes().Like(ctx, "hot", fmt.Sprintf("user%d", u)); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := mustLikes(t, r, "hot").Value; got != users {
		t.Fatalf("count %d, want %d", got, users)
	}
	closeR()

	r2, _ := openReplica(t, dir, "a", nil)
	if got := mustLikes(t, r2, "hot").Value; got != users {
		t.Fatalf("after reopen: count %d, want %d", got, users)
	}
	for u := range 10 {
		if _, err := r2.Likes().Unlike(ctx, "hot", fmt.Sprintf("user%d", u)); err != nil {
			t.Fatal(err)
		}
	}
	if got := mustLikes(t, r2, "hot").Value; got != users-10 {
		t.Fatalf("after unlikes: count %d, want %d", got, users-10)
	}
}

func TestIncrIdempotencyKey(t *testing.T) {
	r, _ := openReplica(t, t.TempDir(), "a", nil)
	ctx := context.Background()
	// Many concurrent retries of one keyed increment count once.
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.Counters().Incr(ctx, "views", 5, "req-1"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	res, err := r.Counters().Incr(ctx, "views", 5, "req-1")
	if err != nil || !res.Duplicate || res.Value != 5 {
		t.Fatalf("retry: %+v %v", res, err)
	}
	if _, err := r.Counters().Incr(ctx, "views", 6, "req-1"); !errors.Is(err, ErrIdempotencyMismatch) {
		t.Fatalf("the key reused for another amount: %v", err)
	}
	if res, err = r.Counters().Incr(ctx, "views", -2, ""); err != nil || res.Value != 3 {
		t.Fatalf("decrement: %+v %v", res, err)
	}
	rd, err := r.Counters().Get("views")
	if err != nil || rd.Value != 3 || rd.Vector.Get("a") != (crdt.PN{P: 5, N: 2}) {
		t.Fatalf("read %+v %v", rd, err)
	}
}

func TestBatchOpsOneCommitInOrder(t *testing.T) {
	r, _ := openReplica(t, t.TempDir(), "a", nil)
	ops := []Op{
		{Kind: OpLike, Item: "i", User: "u"},
		{Kind: OpLike, Item: "i", User: "u"},
		{Kind: OpUnlike, Item: "i", User: "u"},
		{Kind: OpIncr, Item: "c", By: 2, IdemKey: "k"},
		{Kind: OpIncr, Item: "c", By: 2, IdemKey: "k"},
		{Kind: OpIncr, Item: "bad/id", By: 1},
		{Kind: OpIncr, Item: "c", By: MaxBy + 1},
	}
	res, err := r.Do(context.Background(), ops)
	if err != nil {
		t.Fatal(err)
	}
	want := []Result{
		{Liked: true, Changed: true, Value: 1},
		{Liked: true, Changed: false, Value: 1},
		{Liked: false, Changed: true, Value: 0},
		{Value: 2},
		{Value: 2, Duplicate: true},
	}
	for i, w := range want {
		if res[i] != w {
			t.Errorf("op %d: got %+v want %+v", i, res[i], w)
		}
	}
	for _, i := range []int{5, 6} {
		if !errors.Is(res[i].Err, ErrInvalid) {
			t.Errorf("op %d: err %v, want ErrInvalid", i, res[i].Err)
		}
	}
}

// TestOverflowRefused: an own entry grows at most to EntryCap. At the
// cap, what would pass it is refused with ErrOverflow and nothing else
// changes; the cap rises with the clock, so the key takes increments
// again as time passes (#27: a fixed cap, once reached, refused every
// increment of the key for good).
func TestOverflowRefused(t *testing.T) {
	clock := testkit.NewClock(time.UnixMilli(EntryEpochMs)) // cap FreeEntry
	r, _ := openReplica(t, t.TempDir(), "a", func(c *Config) { c.Now = clock.Now })
	ctx := context.Background()
	ops := make([]Op, FreeEntry/MaxBy+1)
	for i := range ops {
		ops[i] = Op{Kind: OpIncr, Item: "big", By: MaxBy}
	}
	res, err := r.Do(ctx, ops)
	if err != nil {
		t.Fatal(err)
	}
	for i, res := range res[:len(res)-1] {
		if res.Err != nil {
			t.Fatalf("op %d: %v", i, res.Err)
		}
	}
	if last := res[len(res)-1]; !errors.Is(last.Err, ErrOverflow) {
		t.Fatalf("last op: %+v, want ErrOverflow", last)
	}
	one := func(by int64) Result {
		t.Helper()
		res, err := r.Do(ctx, []Op{{Kind: OpIncr, Item: "big", By: by}})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	if res := one(1); !errors.Is(res.Err, ErrOverflow) {
		t.Fatalf("+1 at the cap: %+v, want ErrOverflow", res)
	}
	if res := one(-1); res.Err != nil || res.Value != FreeEntry-1 {
		t.Fatalf("-1 at the cap: %+v, want value %d", res, int64(FreeEntry-1))
	}
	// One millisecond later the cap is EntryRatePerMs higher: exactly that
	// much more fits, and no more.
	clock.Advance(time.Millisecond)
	if res := one(EntryRatePerMs); res.Err != nil || res.Value != FreeEntry+EntryRatePerMs-1 {
		t.Fatalf("+%d a millisecond later: %+v", EntryRatePerMs, res)
	}
	if res := one(1); !errors.Is(res.Err, ErrOverflow) {
		t.Fatalf("+1 past the risen cap: %+v, want ErrOverflow", res)
	}
	clock.Advance(time.Millisecond)
	if res := one(1); res.Err != nil {
		t.Fatalf("+1 after the cap rose again: %+v", res)
	}
	if rd, _ := r.Counters().Get("big"); rd.Value != FreeEntry+EntryRatePerMs {
		t.Fatalf("value %d, want %d", rd.Value, int64(FreeEntry+EntryRatePerMs))
	}
}

// TestEntryCap: the cap never falls, starts at FreeEntry, rises by
// exactly EntryRatePerMs a millisecond until it reaches MaxEntry, and gets
// there no sooner than 2160.
func TestEntryCap(t *testing.T) {
	if got := EntryCap(0); got != FreeEntry {
		t.Fatalf("EntryCap(0) = %d", got)
	}
	if got := EntryCap(math.MaxInt64); got != MaxEntry {
		t.Fatalf("EntryCap(max) = %d", got)
	}
	y2160 := time.Date(2160, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	if got := EntryCap(y2160); got >= MaxEntry {
		t.Fatalf("EntryCap(2160) = %d, already MaxEntry", got)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		a := EntryEpochMs - 1<<40 + rng.Int64N(1<<44) // before the epoch to past MaxEntry
		if rng.IntN(4) == 0 {
			a = EntryEpochMs - 1<<20 + rng.Int64N(1<<21) // near the epoch
		}
		d := rng.Int64N(1 << 20)
		ca, cb := EntryCap(a), EntryCap(a+d)
		if ca < FreeEntry || cb > MaxEntry || cb < ca {
			t.Fatalf("EntryCap(%d) = %d, EntryCap(%d) = %d", a, ca, a+d, cb)
		}
		if a >= EntryEpochMs && cb < MaxEntry && cb-ca != uint64(d)*EntryRatePerMs {
			t.Fatalf("EntryCap rose by %d over %d ms", cb-ca, d)
		}
	}
}

func TestHoldWritesAndClose(t *testing.T) {
	r, closeR := openReplica(t, t.TempDir(), "a", func(c *Config) { c.HoldWrites = true })
	ctx := context.Background()
	if _, err := r.Likes().Like(ctx, "i", "u"); !errors.Is(err, ErrNotReady) {
		t.Fatalf("held: %v", err)
	}
	if rd := mustLikes(t, r, "i"); rd.Value != 0 {
		t.Fatalf("held write changed state: %+v", rd)
	}
	r.AcceptWrites()
	if _, err := r.Likes().Like(ctx, "i", "u"); err != nil {
		t.Fatal(err)
	}
	closeR()
	if r.Accepting() {
		t.Fatal("a closed replica says it accepts writes")
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := r.Likes().Like(ctx, "i", "v"); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

func TestDataDirBelongsToReplica(t *testing.T) {
	dir := t.TempDir()
	_, closeR := openReplica(t, dir, "a", nil)
	closeR()
	st, err := storage.Open(storage.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := New(Config{Region: "test", Replica: "b", Store: st}); err == nil {
		t.Fatal("opened replica b on replica a's data")
	}
}

func TestClockNeverGoesBackAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	now := time.UnixMilli(1_000_000_000)
	clock := func() time.Time { return now }
	r, closeR := openReplica(t, dir, "a", func(c *Config) { c.Now = clock })
	if _, err := r.Likes().Like(context.Background(), "i", "u"); err != nil {
		t.Fatal(err)
	}
	first, _, _ := r.Likes().Record("i", "u")
	closeR()

	now = now.Add(-time.Hour) // the wall clock jumped back while we were down
	r2, _ := openReplica(t, dir, "a", func(c *Config) { c.Now = clock })
	if _, err := r2.Likes().Unlike(context.Background(), "i", "u"); err != nil {
		t.Fatal(err)
	}
	second, _, _ := r2.Likes().Record("i", "u")
	if second.HLC <= first.HLC {
		t.Fatalf("hlc went back: %v then %v", first.HLC, second.HLC)
	}
	if rd := mustLikes(t, r2, "i"); rd.Value != 0 {
		t.Fatalf("unlike after restart lost to the earlier like: count %d", rd.Value)
	}
}

// A replica that was held and never accepted writes is still fresh after a
// restart (its recovery may have been cut short); once it accepted writes,
// it is not.
func TestFreshUntilFirstAcceptedWrite(t *testing.T) {
	dir := t.TempDir()
	held := func(c *Config) { c.HoldWrites = true }
	r, closeR := openReplica(t, dir, "a", held)
	if !r.Fresh() {
		t.Fatal("new store not fresh")
	}
	closeR() // killed while recovering
	r, closeR = openReplica(t, dir, "a", held)
	if !r.Fresh() {
		t.Fatal("a store that never accepted writes came back as not fresh")
	}
	r.AcceptWrites()
	closeR()
	r, _ = openReplica(t, dir, "a", held)
	if r.Fresh() {
		t.Fatal("a store that accepted writes came back as fresh")
	}
}
