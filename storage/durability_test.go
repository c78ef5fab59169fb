package storage

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tally-dev/tally/crdt"
)

// A workload batch: four keys of four families, all derived from one id, so
// that after a crash the batch can be checked for being all there or not
// there at all.
func fillWorkload(b *Batch, id string, n uint64) {
	item, user := "item-"+id, "u-"+id
	b.PutLikeRecord(item, user, nil, workloadRecord(id, n))
	b.PutVectorEntry(Likes, item, "r-"+id, crdt.PN{}, crdt.PN{P: n + 1})
	b.PutKeyedRecord("ctr", id, nil, keyedSample(int64(n), int64(n)*3+1))
	b.SetMarker(Likes, item, user, true)
}

func workloadRecord(id string, n uint64) *crdt.LikeRecord {
	return &crdt.LikeRecord{
		Liked:   true,
		HLC:     crdt.MakeHLC(int64(n)+1, 1),
		Origin:  "r-" + id,
		Contrib: crdt.Vector{{Replica: "r-" + id, PN: crdt.PN{P: n + 1}}},
	}
}

// workloadKeys reports how many of the four keys of batch id are present
// (with exactly the values written); any read error is fatal.
func workloadKeys(t testing.TB, s *Store, id string, n uint64) int {
	t.Helper()
	item, user := "item-"+id, "u-"+id
	found := 0
	r, ok, err := s.LikeRecord(item, user)
	if err != nil {
		t.Fatalf("id %s: %v", id, err)
	}
	if ok {
		if !r.Equal(workloadRecord(id, n)) {
			t.Errorf("id %s: record %+v", id, r)
		}
		found++
	}
	v, err := s.Vector(Likes, item)
	if err != nil {
		t.Fatalf("id %s: %v", id, err)
	}
	if len(v) > 0 {
		if want := (crdt.Vector{{Replica: "r-" + id, PN: crdt.PN{P: n + 1}}}); !v.Equal(want) {
			t.Errorf("id %s: vector %+v, want %+v", id, v, want)
		}
		found++
	}
	kr, ok, err := s.KeyedRecord("ctr", id)
	if err != nil {
		t.Fatalf("id %s: %v", id, err)
	}
	if ok {
		if !kr.Equal(keyedSample(int64(n), int64(n)*3+1)) {
			t.Errorf("id %s: keyed record %+v", id, kr)
		}
		found++
	}
	if markerSet(t, s, item, user) {
		found++
	}
	return found
}

func markerSet(t testing.TB, s *Store, item, user string) bool {
	t.Helper()
	// Markers has no point lookup and scanning all of them per id would be
	// quadratic, so peek at the key directly.
	_, ok, err := s.get(markerKey(item, user))
	if err != nil {
		t.Fatalf("marker %s/%s: %v", item, user, err)
	}
	return ok
}

type ackLog struct {
	mu    sync.Mutex
	acked map[string]uint64 // id -> n, for every batch whose Commit returned nil
	tried map[string]uint64 // id -> n, for every batch Commit was called on
}

func newAckLog() *ackLog {
	return &ackLog{acked: map[string]uint64{}, tried: map[string]uint64{}}
}

func (l *ackLog) snapshot() map[string]uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]uint64, len(l.acked))
	for k, v := range l.acked {
		out[k] = v
	}
	return out
}

// runWriters starts g goroutines each committing per batches, recording
// them in log. wait blocks until all are done; done is closed then.
func runWriters(t testing.TB, s *Store, g, per int, log *ackLog) (wait func(), done <-chan struct{}) {
	var wg sync.WaitGroup
	for w := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				id := fmt.Sprintf("g%d-%d", w, i)
				n := uint64(w*per + i)
				b := s.NewBatch()
				fillWorkload(b, id, n)
				log.mu.Lock()
				log.tried[id] = n
				log.mu.Unlock()
				err := b.Commit()
				b.Close()
				if err != nil {
					t.Errorf("commit %s: %v", id, err)
					return
				}
				log.mu.Lock()
				log.acked[id] = n
				log.mu.Unlock()
			}
		}()
	}
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	return func() { <-ch }, ch
}

// reopenClone opens the store held by a crash clone.
func reopenClone(t *testing.T, fs vfs.FS) *Store {
	t.Helper()
	s, err := Open(Config{Dir: "/db", FS: fs})
	if err != nil {
		t.Fatalf("reopen after crash: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// checkCrash asserts, on a store reopened after a crash, that every acked
// batch is fully present and every other batch tried is all-or-nothing. It
// returns how many acked batches are missing (only > 0 if t has failed,
// unless allowLoss).
func checkCrash(t *testing.T, s *Store, acked, tried map[string]uint64, allowLoss bool) (lost, present int) {
	t.Helper()
	for id, n := range tried {
		k := workloadKeys(t, s, id, n)
		if k != 0 && k != 4 {
			t.Errorf("batch %s torn by the crash: %d of 4 keys present", id, k)
		}
		if k == 4 {
			present++
		}
		if _, ok := acked[id]; ok && k != 4 {
			lost++
			if !allowLoss && lost <= 10 {
				t.Errorf("acknowledged batch %s lost by the crash (%d of 4 keys present)", id, k)
			}
		}
	}
	return lost, present
}

func openCrashable(t *testing.T, d Durability) (*vfs.MemFS, *Store) {
	t.Helper()
	fs := vfs.NewCrashableMem()
	s, err := Open(Config{Dir: "/db", FS: fs, Durability: d})
	if err != nil {
		t.Fatal(err)
	}
	// Closed only after every CrashClone: Close would flush the memtable and
	// sync, hiding exactly the loss the test looks for.
	t.Cleanup(func() { s.Close() })
	return fs, s
}

// With fsync durability, a power loss keeps every acknowledged batch, whole,
// even when it strikes while commits are in flight.
func TestPowerLossKeepsAckedBatches(t *testing.T) {
	const writers, per = 8, 150
	fs, s := openCrashable(t, DurabilitySync)
	log := newAckLog()
	wait, done := runWriters(t, s, writers, per, log)

	// Crash #1: mid-flight. Every ack recorded before the snapshot happened
	// before the clone; commits in flight may land either way but not torn.
	for {
		log.mu.Lock()
		n := len(log.acked)
		log.mu.Unlock()
		if n >= writers*per/3 {
			break
		}
		select {
		case <-done:
			t.Fatalf("writers finished with only %d acks", n)
		case <-time.After(time.Millisecond):
		}
	}
	ackedMid := log.snapshot()
	midFS := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})

	wait()
	if t.Failed() {
		return
	}
	// Crash #2: quiescent, with the store still open (not Closed).
	endFS := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	// Crash #3: same moment, but a random half of the unsynced blocks made
	// it to disk (torn WAL tail).
	rng := rand.New(rand.NewPCG(1, 2))
	tornFS := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rng})

	origRoot := s.Root()
	log.mu.Lock()
	tried, ackedEnd := log.tried, log.acked
	log.mu.Unlock()
	if len(ackedEnd) != writers*per {
		t.Fatalf("acked %d batches, want %d", len(ackedEnd), writers*per)
	}

	for _, tc := range []struct {
		name  string
		fs    vfs.FS
		acked map[string]uint64
	}{
		{"mid-flight", midFS, ackedMid},
		{"quiescent", endFS, ackedEnd},
		{"torn-tail", tornFS, ackedEnd},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := reopenClone(t, tc.fs)
			lost, present := checkCrash(t, s, tc.acked, tried, false)
			if lost > 0 {
				t.Errorf("%d of %d acknowledged batches lost", lost, len(tc.acked))
			}
			t.Logf("acked before crash %d, present after %d of %d tried", len(tc.acked), present, len(tried))
			if tc.name == "quiescent" {
				// Nothing was lost, so the digests (scanned at reopen)
				// are the running store's (kept commit by commit).
				if got, want := s.Root(), origRoot; got != want {
					t.Errorf("digest root after crash %x, before %x", got, want)
				}
			}
			// The reopened store works.
			commit(t, s, func(b *Batch) { b.PutMeta("after-crash", []byte{1}) })
		})
	}
}

// Negative control: the same crash with DurabilityNone loses acknowledged
// batches. If this ever passes with no loss, the test above proves nothing.
func TestPowerLossLosesUnsyncedBatches(t *testing.T) {
	const writers, per = 8, 50
	fs, s := openCrashable(t, DurabilityNone)
	log := newAckLog()
	wait, _ := runWriters(t, s, writers, per, log)
	wait()
	if t.Failed() {
		return
	}
	// The writes are visible to the running store.
	if k := workloadKeys(t, s, "g0-0", 0); k != 4 {
		t.Fatalf("before crash: %d of 4 keys of g0-0", k)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	s2 := reopenClone(t, crashed)
	lost, _ := checkCrash(t, s2, log.acked, log.tried, true)
	if lost == 0 {
		t.Fatalf("DurabilityNone: all %d acknowledged batches survived the power loss; the crash test cannot see lost writes", len(log.acked))
	}
	t.Logf("DurabilityNone: %d of %d acknowledged batches lost, as expected", lost, len(log.acked))
}

// Store.Sync makes earlier DurabilityNone commits survive a power loss.
func TestSyncMakesNoneDurable(t *testing.T) {
	fs, s := openCrashable(t, DurabilityNone)
	log := newAckLog()
	wait, _ := runWriters(t, s, 4, 25, log)
	wait()
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	s2 := reopenClone(t, crashed)
	if lost, _ := checkCrash(t, s2, log.acked, log.tried, false); lost > 0 {
		t.Errorf("%d of %d batches lost despite Sync", lost, len(log.acked))
	}
}

// A merge of the event log's chunks and the publisher's cursor are
// committed without an fsync of their own: a power loss before the next
// fsync takes them back, and WaitDurable brings that fsync, its own when
// no other commit comes, or rides on a writer's commit that does.
func TestWaitDurableCoversLazyCommits(t *testing.T) {
	fs, s := openCrashable(t, DurabilitySync)
	logCommit := func() {
		commit(t, s, func(b *Batch) {
			b.LogEvent(eventSamples[0])
			b.LogEvent(eventSamples[1])
		})
	}
	sizes := func(s *Store) (out []int) {
		t.Helper()
		if err := s.ScanChunks(0, func(events []Event) bool {
			out = append(out, len(events))
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	crashSizes := func() []int {
		t.Helper()
		return sizes(reopenClone(t, fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})))
	}
	for range 3 {
		logCommit()
	}
	if _, err := s.MergeLogChunks(0); err != nil {
		t.Fatal(err)
	}
	if got := sizes(s); !slices.Equal(got, []int{6}) {
		t.Fatalf("chunks after the merge: %v", got)
	}
	// Negative control: the merge alone did not fsync.
	if got := crashSizes(); !slices.Equal(got, []int{2, 2, 2}) {
		t.Fatalf("chunks after a power loss right after the merge: %v, want the unmerged 2, 2, 2", got)
	}
	// No commit comes: WaitDurable fsyncs itself.
	if err := s.WaitDurable(0); err != nil {
		t.Fatal(err)
	}
	if got := crashSizes(); !slices.Equal(got, []int{6}) {
		t.Fatalf("chunks after WaitDurable and a power loss: %v", got)
	}

	// A writer's commit after the lazy one makes it durable, and wakes
	// a WaitDurable that would otherwise wait for an hour.
	if err := s.SetLogPublished(6, 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.WaitDurable(time.Hour) }()
	for s.syncWaiters.Load() == 0 {
		runtime.Gosched()
	}
	logCommit()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s2 := reopenClone(t, fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0}))
	if p, err := s2.LogPublished(); err != nil || p != 6 {
		t.Fatalf("published after the writer's commit and a power loss: %d, %v; want 6", p, err)
	}
	// Nothing lazy is pending: WaitDurable returns at once.
	if err := s.WaitDurable(time.Hour); err != nil {
		t.Fatal(err)
	}
}
