package alloc

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/internal/localnet"
)

// startKV starts a real embedded nats-server with JetStream (fsync on every
// write) and opens the allocator's bucket on it.
func startKV(t *testing.T) (jetstream.KeyValue, *nats.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := localnet.DefaultConfig()
	cfg.Regions = []string{"us"}
	cfg.Dir = t.TempDir()
	c, err := localnet.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	nc, err := nats.Connect(c.ClientURL("us"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := OpenBucket(ctx, js, BucketConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return kv, nc
}

func testConfig(kv jetstream.KeyValue, leaseholder string) Config {
	return Config{
		KV: kv, Sequence: "likes", Replica: leaseholder,
		TTL: 300 * time.Millisecond, RenewEvery: 60 * time.Millisecond,
		Target: 100 * time.Millisecond, IdleRelease: 150 * time.Millisecond,
		MinBlock: 4, MaxBlock: 64, OpTimeout: time.Second,
	}
}

// ledger is the ground truth of the test: which replica used each number.
type ledger struct {
	mu   sync.Mutex
	used map[uint64]string
	dups []string
}

func (l *ledger) use(sp Span, who string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for n := sp.Start; n < sp.End; n++ {
		if prev, ok := l.used[n]; ok {
			l.dups = append(l.dups, fmt.Sprintf("%d by %s and %s", n, prev, who))
		}
		l.used[n] = who
	}
}

// replica simulates a tally replica's writer: it takes numbers, "commits"
// them with the leaseholder's snapshot (the durable state a restart gets back),
// and tells the leaseholder they are durable.
type replica struct {
	id       string
	h        *Leaseholder
	snapshot []byte // as committed
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	crashes  int
	died     bool // the writer crashed mid-batch
	steady   bool // the writer never crashes
}

func (r *replica) start(t *testing.T, kv jetstream.KeyValue, led *ledger, rng *rand.Rand, tweak func(*Config)) {
	t.Helper()
	cfg := testConfig(kv, r.id)
	cfg.Restored = r.snapshot
	if tweak != nil {
		tweak(&cfg)
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.Start()
	r.h = h
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.died = false
	seed := rng.Uint64()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		rng := rand.New(rand.NewPCG(seed, 1))
		for ctx.Err() == nil {
			sp, ok := h.Take(uint64(1 + rng.IntN(8)))
			if !ok {
				time.Sleep(2 * time.Millisecond)
				continue
			}
			if !r.steady && rng.IntN(50) == 0 {
				// Crash between taking and committing: the numbers were
				// never used, and the restart must not lose them.
				r.died = true
				return
			}
			led.use(sp, r.id)
			r.snapshot = h.Snapshot()
			h.Durable()
			time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
		}
	}()
}

// crash stops the writer and the leaseholder without giving anything back.
func (r *replica) crash() {
	r.cancel()
	r.wg.Wait()
	r.h.cancel()
	<-r.h.done
	r.crashes++
}

// stop stops the writer, then closes the leaseholder cleanly. A replica whose
// writer died mid-batch is down: it restarts first, as it would.
func (r *replica) stop(t *testing.T, kv jetstream.KeyValue, led *ledger, rng *rand.Rand) {
	r.cancel()
	r.wg.Wait()
	if r.died {
		r.crash()
		r.start(t, kv, led, rng, nil)
		r.cancel()
		r.wg.Wait()
		r.died = false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.h.Close(ctx); err != nil {
		t.Fatalf("close %s: %v", r.id, err)
	}
}

// drain checks, once every replica has closed, that every number is final
// and the numbers used are exactly the used parts of the closed blocks:
// none used twice, none used outside what its leaseholder reported, so each
// used number has its rank.
func drain(t *testing.T, kv jetstream.KeyValue, led *ledger) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := Read(ctx, kv, "likes")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Leases) != 0 || st.Dense.Pos != st.HWM {
		t.Fatalf("after every replica closed: leases %+v, dense %+v of hwm %d", st.Leases, st.Dense, st.HWM)
	}
	led.mu.Lock()
	defer led.mu.Unlock()
	if len(led.dups) > 0 {
		t.Fatalf("%d numbers used twice, e.g. %v", len(led.dups), led.dups[:min(5, len(led.dups))])
	}
	ranked := uint64(0)
	for _, c := range st.Closed {
		for n := c.Start; n < c.Used; n++ {
			if _, ok := led.used[n]; !ok {
				t.Fatalf("number %d of %+v counts as used, but nobody used it", n, c)
			}
			ranked++
		}
	}
	if ranked != st.Dense.Rank || uint64(len(led.used)) != ranked {
		t.Fatalf("%d numbers used, %d in closed blocks, dense rank %d", len(led.used), ranked, st.Dense.Rank)
	}
	t.Logf("%d numbers used and ranked, %d holes", ranked, st.Holes())
}

// TestHoldersHammerOneSequence: six replicas number from one sequence while
// they crash between take and commit and restart from their committed
// state, and while leaseholders' KV goroutines pause past the lease TTL.
func TestHoldersHammerOneSequence(t *testing.T) {
	kv, _ := startKV(t)
	led := &ledger{used: map[uint64]string{}}
	rng := rand.New(rand.NewPCG(42, 42))
	reps := make([]*replica, 6)
	for i := range reps {
		reps[i] = &replica{id: fmt.Sprintf("r%d", i)}
		reps[i].start(t, kv, led, rng, nil)
	}
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(time.Duration(50+rng.IntN(150)) * time.Millisecond)
		r := reps[rng.IntN(len(reps))]
		r.crash()
		r.start(t, kv, led, rng, nil)
	}
	for _, r := range reps {
		r.stop(t, kv, led, rng)
	}
	crashes := 0
	for _, r := range reps {
		crashes += r.crashes
	}
	t.Logf("%d crashes", crashes)
	drain(t, kv, led)
}

// TestPausedHolderIsFencedOff: a leaseholder whose KV goroutine is stuck (as in
// a GC pause, SIGSTOP of the lease loop, or a partition from the KV) stops
// numbering once its lease's TTL passes, though its writer keeps asking;
// when it comes back it renews and goes on, and nothing is used twice or
// skipped.
func TestPausedHolderIsFencedOff(t *testing.T) {
	kv, _ := startKV(t)
	led := &ledger{used: map[uint64]string{}}
	rng := rand.New(rand.NewPCG(7, 7))
	pause := make(chan chan struct{}, 1)
	tweak := func(c *Config) {
		c.beforeTick = func() {
			select {
			case resume := <-pause:
				<-resume
			default:
			}
		}
	}
	a, b := &replica{id: "a", steady: true}, &replica{id: "b", steady: true}
	a.start(t, kv, led, rng, tweak)
	b.start(t, kv, led, rng, nil)
	testkit.WaitFor(t, 20*time.Second, func() error { return took(a.h, 0) })
	// a's writer goes quiet holding a lease with numbers left, so that
	// only the fence can stop it from using them.
	a.cancel()
	a.wg.Wait()
	takeOne := func() {
		for {
			if sp, ok := a.h.Take(1); ok {
				led.use(sp, "a")
				a.h.Durable()
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	for {
		takeOne()
		if st := a.h.Status(); len(st.Leases) > 0 && st.Leases[0].Next < st.Leases[0].End {
			break
		}
	}

	resume := make(chan struct{})
	pause <- resume
	testkit.WaitFor(t, 20*time.Second, func() error { // the loop took it: paused from now on
		if len(pause) != 0 {
			return errors.New("the renewal loop has not taken the pause")
		}
		return nil
	})
	time.Sleep(a.h.cfg.TTL + 50*time.Millisecond)
	// Every lease the paused leaseholder has was renewed before the pause began,
	// so its deadline has passed: nothing may be handed out.
	if st := a.h.Status(); len(st.Leases) == 0 || st.Leases[0].Next == st.Leases[0].End {
		t.Fatalf("a has no numbers left to be fenced off from: %+v", st.Leases)
	}
	if sp, ok := a.h.Take(1); ok {
		t.Fatalf("took [%d,%d) after the pause began, past the TTL", sp.Start, sp.End)
	}
	takenDuringFence := a.h.Status().Taken
	close(resume)
	takeOne() // renewed: usable again
	if got := a.h.Status().Taken; got <= takenDuringFence {
		t.Fatalf("taken %d after resuming, want more than %d", got, takenDuringFence)
	}
	a.stop(t, kv, led, rng)
	b.stop(t, kv, led, rng)
	drain(t, kv, led)
}

// TestSilentHolderReclaimed: with ReclaimAfter set, a replica that dies
// for good does not hold its block forever: another frees the tail after
// its silence, and nothing is skipped.
func TestSilentHolderReclaimed(t *testing.T) {
	kv, _ := startKV(t)
	led := &ledger{used: map[uint64]string{}}
	rng := rand.New(rand.NewPCG(9, 9))
	tweak := func(c *Config) {
		c.ReclaimAfter = 600 * time.Millisecond
		c.IdleRelease = time.Hour
	}
	a, b := &replica{id: "a", steady: true}, &replica{id: "b", steady: true}
	a.start(t, kv, led, rng, tweak)
	b.start(t, kv, led, rng, tweak)
	testkit.WaitFor(t, 20*time.Second, func() error { return took(a.h, 20) })
	// a stops numbering, reports everything it used, and dies for good.
	a.cancel()
	a.wg.Wait()
	// Make sure a dies holding a lease with numbers left in it.
	for {
		sp, ok := a.h.Take(1)
		if !ok {
			time.Sleep(time.Millisecond)
			continue
		}
		led.use(sp, "a")
		a.h.Durable()
		if st := a.h.Status(); len(st.Leases) > 0 && st.Leases[len(st.Leases)-1].Next < st.Leases[len(st.Leases)-1].End {
			break
		}
	}
	a.h.cancel()
	<-a.h.done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.h.round(ctx, false); err != nil { // its last report
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, func() error {
		st, err := Read(ctx, kv, "likes")
		if err != nil {
			return err
		}
		for _, l := range st.Leases {
			if l.Leaseholder == "a" {
				return fmt.Errorf("a still holds lease %+v", l)
			}
		}
		return nil
	})
	// The KV shows the reclaim before b's round has counted it.
	testkit.WaitFor(t, 20*time.Second, func() error {
		if testutil.ToFloat64(b.h.metrics.reclaimed) < 1 {
			return errors.New("b has not counted the reclaim")
		}
		return nil
	})
	b.stop(t, kv, led, rng)
	drain(t, kv, led)
}

// took reports whether h has taken more than n numbers.
func took(h *Leaseholder, n uint64) error {
	if got := h.Status().Taken; got <= n {
		return fmt.Errorf("taken %d, want more than %d", got, n)
	}
	return nil
}

// lostReplyKV writes every Update, but once armed, holds back the answer
// of the next one until its caller gives up: a write whose outcome the
// leaseholder never learns, as when the connection drops after the KV applied
// it.
type lostReplyKV struct {
	KV
	armed  atomic.Bool
	landed chan struct{}
}

func (k *lostReplyKV) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	r, err := k.KV.Update(ctx, key, value, rev)
	if err != nil || !k.armed.CompareAndSwap(true, false) {
		return r, err
	}
	close(k.landed)
	<-ctx.Done()
	return 0, ctx.Err()
}

// TestCloseGivesBackALeaseWhoseAcquireWasCutOff: a leaseholder holding nothing
// is closed while the round acquiring its first lease waits for the KV's
// answer, and the acquire has landed. The leaseholder never learns of that
// lease; Close must still give it back, or it stays held by a replica that
// is gone until another leaseholder reclaims its tail. (The hammer test saw
// it: "after every replica closed: leases [{... Leaseholder:r0 ...}]".)
func TestCloseGivesBackALeaseWhoseAcquireWasCutOff(t *testing.T) {
	kv, _ := startKV(t)
	lost := &lostReplyKV{KV: kv, landed: make(chan struct{})}
	cfg := testConfig(kv, "a")
	cfg.KV = lost
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.Start()
	// A leaseholder nobody took from is idle: its rounds acquire nothing.
	testkit.WaitFor(t, 20*time.Second, func() error {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.kvOK.IsZero() {
			return errors.New("no round has reached the KV yet")
		}
		return nil
	})
	lost.armed.Store(true)
	if _, ok := h.Take(1); ok {
		t.Fatal("took a number before holding a lease")
	}
	select {
	case <-lost.landed:
	case <-time.After(20 * time.Second):
		t.Fatal("the leaseholder never acquired a lease")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	st, err := Read(ctx, kv, "likes")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Leases) != 0 {
		t.Fatalf("after close: leases %+v", st.Leases)
	}
}
