package storage

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/internal/base/ratelog"
)

// Durability says when a commit is acknowledged.
type Durability int

const (
	// DurabilitySync acknowledges a commit after its WAL fsync. The default.
	DurabilitySync Durability = iota
	// DurabilityNone acknowledges once the write is in the OS page cache: it
	// survives a process crash but not a power loss. Opt-in only.
	DurabilityNone
)

func (d Durability) String() string {
	if d == DurabilityNone {
		return "none"
	}
	return "fsync"
}

// ParseDurability maps "fsync" and "none" to a Durability.
func ParseDurability(s string) (Durability, error) {
	switch s {
	case "", "fsync", "sync":
		return DurabilitySync, nil
	case "none", "nosync":
		return DurabilityNone, nil
	}
	return 0, fmt.Errorf("storage: unknown durability %q (want fsync or none)", s)
}

// Config configures a Store.
type Config struct {
	// Dir is the Pebble directory. Required; created if missing.
	Dir string
	// Durability of commits. Default DurabilitySync.
	Durability Durability
	// CacheBytes is the block cache size, for sstable blocks. Default 64
	// MiB. (Pebble charges its memtables to the same cache; Open adds room
	// for them, see memTableSlots.)
	CacheBytes int64
	// MemTableBytes is the memtable size. Default 32 MiB.
	MemTableBytes uint64
	// RecordFilterBytes is the size of the in-memory filter over like-record
	// keys that lets a user's first like of an item skip the Pebble lookup
	// (see recordFilter): about 10 bits per record keeps false positives
	// near 2%, so the default 64 MiB serves ~50 million records well and
	// degrades smoothly (never incorrectly) beyond. It is allocated once,
	// at open. Negative disables the filter. Default 64 MiB.
	RecordFilterBytes int64
	// VectorFilterBytes is the size of the in-memory filter over vectors
	// (see the vector filter in filter.go) that lets the writer's first
	// touch of a vector that does not exist yet, such as a like's new
	// one-second slot, skip the Pebble read. Allocated once, at open;
	// negative disables it. Default 16 MiB (~13 million vectors at 10 bits
	// each; beyond, it degrades as the record filter does).
	VectorFilterBytes int64
	// WALMinSyncInterval delays a WAL fsync by up to this long so that more
	// commits share it. Default 0 (sync as soon as the previous sync ends).
	WALMinSyncInterval time.Duration
	// Logger receives Pebble's log lines. Default: a null logger.
	Logger hclog.Logger
	// FS overrides the filesystem; tests use a crashable in-memory FS.
	// Default: the OS filesystem.
	FS vfs.FS
	// Registerer receives the store's metrics (tally_storage_*: Pebble's
	// disk use, compaction debt, level 0, memtables, WAL and write stalls,
	// and the data directory's filesystem space), read at scrape time.
	// Default: none registered.
	Registerer prometheus.Registerer
}

// DefaultConfig returns a Config with every default filled in except Dir.
func DefaultConfig() Config {
	return Config{CacheBytes: 64 << 20, MemTableBytes: 32 << 20, RecordFilterBytes: 64 << 20, VectorFilterBytes: 16 << 20}
}

// Validate reports every problem with c at once.
func (c Config) Validate() error {
	var errs []error
	if c.Dir == "" {
		errs = append(errs, errors.New("storage: Dir is required"))
	}
	if c.Durability != DurabilitySync && c.Durability != DurabilityNone {
		errs = append(errs, fmt.Errorf("storage: unknown durability %d", c.Durability))
	}
	if c.CacheBytes < 0 {
		errs = append(errs, fmt.Errorf("storage: CacheBytes %d < 0", c.CacheBytes))
	}
	if c.WALMinSyncInterval < 0 {
		errs = append(errs, fmt.Errorf("storage: WALMinSyncInterval %s < 0", c.WALMinSyncInterval))
	}
	return errors.Join(errs...)
}

func (c *Config) ensureDefaults() {
	d := DefaultConfig()
	if c.CacheBytes == 0 {
		c.CacheBytes = d.CacheBytes
	}
	if c.MemTableBytes == 0 {
		c.MemTableBytes = d.MemTableBytes
	}
	if c.RecordFilterBytes == 0 {
		c.RecordFilterBytes = d.RecordFilterBytes
	}
	if c.VectorFilterBytes == 0 {
		c.VectorFilterBytes = d.VectorFilterBytes
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
}

// ErrClosed is returned by operations on a closed Store (operations that
// race with Close are the caller's bug).
var ErrClosed = errors.New("storage: closed")

// ErrFailed is returned by Commit once the store has failed: Pebble
// reported a fatal commit error (a WAL write or sync that failed, a full
// disk), after which its commit pipeline cannot continue and the failed
// batch may or may not be in the WAL; or a memtable flush failed (a full
// or failing disk), after which writes would pile up in memory and then
// stall; or a compaction found the disk full, after which level 0 fills
// and writes stall too. Either way the store refuses every later commit and Err says why:
// the process must restart (after the disk is fixed) and recover from the
// WAL.
var ErrFailed = errors.New("storage: failed; restart the replica")

// Store is a replica's Pebble database. Reads and Batch commits are safe for
// concurrent use; ordering between batches is the caller's business.
type Store struct {
	db  *pebble.DB
	wo  *pebble.WriteOptions
	dur Durability
	// closed turns the panics Pebble raises on a closed DB into ErrClosed.
	closed atomic.Bool
	// mmu: a metrics scrape holds it shared while it reads the DB, Close
	// exclusively while it closes the DB.
	mmu sync.RWMutex
	// reg is where the store's collector is registered (nil: nowhere).
	reg prometheus.Registerer
	// dir is the data directory on the OS filesystem, for its free
	// space; "" with Config.FS set.
	dir    string
	stalls *stalls
	// failure is the first failure (see ErrFailed); no commit runs after.
	// A pointer, so the event listener built before the Store can set it.
	failure *atomic.Pointer[error]
	// bgErrors logs Pebble's background errors at a bounded rate.
	bgErrors *ratelog.Limiter

	dmu     sync.Mutex // protects digests
	digests [Segments]uint64

	// filter holds every like-record key (nil: disabled). Its words are
	// atomic; see recordFilter for the invariant.
	filter *recordFilter
	// vfilter holds every vector with an entry in the store (nil:
	// disabled); see the vector filter in filter.go.
	vfilter *recordFilter

	dxPool sync.Pool // of *digestDelta, all zero

	logID   string        // see metaLogID
	logLast atomic.Uint64 // seq of the last committed event
	// logIDNew: logID is not stored yet; the first batch with events stores it.
	logIDNew atomic.Bool

	commits atomic.Uint64 // batches committed since open (see WriteStats)

	// A batch committed without an fsync of its own (commitLazy) is made
	// durable by the next commit that fsyncs the WAL: Pebble's WAL is in
	// commit order, so an fsync covers every write before it. syncBegun
	// counts the fsynced commits begun; syncDone is the highest count of
	// one that finished, so syncDone > m means a commit begun after
	// syncBegun read m has made everything before that durable
	// (WaitDurable). syncWake is closed and replaced, under syncMu, when
	// syncDone rises while syncWaiters > 0. lazyNeed is the least
	// syncDone that makes every lazy commit so far durable: 1 + syncBegun
	// as the last one finished.
	syncBegun   atomic.Uint64
	syncDone    atomic.Uint64
	lazyNeed    atomic.Uint64
	syncWaiters atomic.Int32
	syncMu      sync.Mutex
	syncWake    chan struct{}

	flags *registers[crdt.Block]    // every committed block flag, by user (registers.go)
	types *registers[crdt.TypeInfo] // every committed event type, by name
}

// memTableSlots is how many memtables the block cache makes room for:
// Pebble stops writes once MemTableStopWritesThreshold (memTableSlots-1)
// memtables wait to be flushed, and one more may be on its way to being
// recycled.
const memTableSlots = 3

// Open opens (creating if needed) the store in cfg.Dir.
func Open(cfg Config) (*Store, error) {
	cfg.ensureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Pebble reserves every memtable's size in the block cache. With a
	// cache of CacheBytes alone, two 32 MiB memtables (one filling, one
	// flushing: the normal state under write load) reserved all 64 MiB,
	// and no block was ever cached: every lookup the record filter let
	// through read and decompressed its blocks from the file again.
	cache := pebble.NewCache(cfg.CacheBytes + memTableSlots*int64(cfg.MemTableBytes))
	defer cache.Unref() // the DB holds its own reference
	opts := &pebble.Options{
		Cache:                       cache,
		MemTableSize:                cfg.MemTableBytes,
		MemTableStopWritesThreshold: memTableSlots - 1,
		FormatMajorVersion:          pebble.FormatNewest,
		Logger:                      pebbleLogger{cfg.Logger},
		FS:                          cfg.FS,
		L0CompactionThreshold:       2,
	}
	if cfg.WALMinSyncInterval > 0 {
		iv := cfg.WALMinSyncInterval
		opts.WALMinSyncInterval = func() time.Duration { return iv }
	}
	for i := range opts.Levels {
		// Most reads are point lookups of keys that do not exist yet (a
		// user's first like): a bloom filter answers those without I/O.
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	failure := new(atomic.Pointer[error])
	stalled := new(stalls)
	// While a disk is full Pebble retries a failed flush at once, again
	// and again, and reports each failure as a background error: hundreds
	// of lines a second. The first is logged, then one per interval.
	bgErrors := ratelog.New(ratelog.Config{Logger: cfg.Logger, Level: hclog.Error, Every: backgroundErrorEvery})
	fail := func(what string, cause error) {
		err := fmt.Errorf("%w: %s: %w", ErrFailed, what, cause)
		if failure.CompareAndSwap(nil, &err) {
			cfg.Logger.Error(what+" failed; the store stops taking writes", "error", cause)
		}
	}
	opts.EventListener = &pebble.EventListener{
		// A failed flush fails the store (see ErrFailed).
		FlushEnd: func(info pebble.FlushInfo) {
			if info.Err != nil && !emptyFlush(info) {
				fail("memtable flush", info.Err)
			}
		},
		// So does a compaction that finds the disk full. Flushes of
		// small memtables may still fit, but without compactions level 0
		// fills up, and Pebble then stalls every commit for good: the
		// replica would hang, answering 503 timeout with /healthz at 200.
		CompactionEnd: func(info pebble.CompactionInfo) {
			if info.Err != nil && errors.Is(info.Err, syscall.ENOSPC) {
				fail("compaction", info.Err)
			}
		},
		BackgroundError: func(err error) {
			bgErrors.Log("pebble background error", "error", err)
		},
		WriteStallBegin: stalled.begin,
		WriteStallEnd:   stalled.end,
	}
	db, err := pebble.Open(cfg.Dir, opts)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", cfg.Dir, err)
	}
	wo := pebble.Sync
	if cfg.Durability == DurabilityNone {
		wo = pebble.NoSync
	}
	s := &Store{db: db, wo: wo, dur: cfg.Durability, failure: failure, filter: newRecordFilter(cfg.RecordFilterBytes),
		vfilter: newRecordFilter(cfg.VectorFilterBytes),
		flags:   newRegisters[crdt.Block](prefixFlag, "flag"), types: newRegisters[crdt.TypeInfo](prefixType, "type"), bgErrors: bgErrors, stalls: stalled,
		syncWake: make(chan struct{})}
	if cfg.FS == nil {
		s.dir = cfg.Dir
	}
	s.dxPool.New = func() any { return new(digestDelta) }
	if err := s.migrateSegments(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open store %s: %w", cfg.Dir, err)
	}
	if err := s.loadDigests(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open store %s: %w", cfg.Dir, err)
	}
	if err := s.loadLog(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open store %s: %w", cfg.Dir, err)
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(collector{s}); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("open store %s: register metrics: %w", cfg.Dir, err)
		}
		s.reg = cfg.Registerer
	}
	return s, nil
}

// backgroundErrorEvery is the least time between two log lines for
// Pebble's background errors (see ratelog).
const backgroundErrorEvery = ratelog.DefaultEvery

// emptyFlush reports whether info is a flush that succeeded with nothing
// to write. Pebble reports it as an error, "pebble: empty table" (an
// unexported value, so only its text identifies it), with no output: it
// happens at every open that replays a WAL holding no batch, such as the
// one a clean close leaves when nothing was written since the open. It is
// not a failure; taking it for one failed every restart after a restart
// without writes (TestRestartWithoutWrites pins the text).
func emptyFlush(info pebble.FlushInfo) bool {
	return len(info.Output) == 0 && !info.Ingest && info.Err.Error() == "pebble: empty table"
}

// Err returns why the store failed (wrapping ErrFailed), or nil.
func (s *Store) Err() error {
	if p := s.failure.Load(); p != nil {
		return *p
	}
	return nil
}

// Durability reports the store's commit durability.
func (s *Store) Durability() Durability { return s.dur }

// Close flushes nothing extra (the WAL already holds every commit) and
// releases the database.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	if s.reg != nil {
		s.reg.Unregister(collector{s})
	}
	s.mmu.Lock() // no scrape reads the DB from here on
	defer s.mmu.Unlock()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	return nil
}

// get returns a copy of key's value, or nil, false if absent.
func (s *Store) get(key []byte) ([]byte, bool, error) {
	if s.closed.Load() {
		return nil, false, ErrClosed
	}
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	out := append([]byte(nil), v...)
	return out, true, closer.Close()
}

// Vector reads every replica's entry of one vector.
func (s *Store) Vector(k Kind, item string) (crdt.Vector, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("read %s vector %s: %w", k, item, ErrClosed)
	}
	if s.vfilter != nil && !s.vfilter.mayContainVector(k, item) {
		return nil, nil // certainly no entry: skip the seek
	}
	prefix := vectorPrefix(k, item)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, fmt.Errorf("read %s vector %s: %w", k, item, err)
	}
	var v crdt.Vector
	for it.First(); it.Valid(); it.Next() {
		replica := string(it.Key()[len(prefix):])
		e, err := crdt.DecodePN(it.Value())
		if err != nil {
			_ = it.Close()
			return nil, fmt.Errorf("read %s vector %s entry %s: %w", k, item, replica, err)
		}
		v = v.Set(replica, e) // keys iterate in replica order: appends
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("read %s vector %s: %w", k, item, err)
	}
	return v, nil
}

// LikeRecord reads one user's record; ok is false if there is none.
func (s *Store) LikeRecord(item, user string) (r *crdt.LikeRecord, ok bool, err error) {
	if s.filter != nil && !s.filter.mayContain(item, user) {
		if s.closed.Load() {
			return nil, false, wrapRead(ErrClosed, "like record", item, user)
		}
		return nil, false, nil
	}
	b, ok, err := s.get(recordKey(item, user))
	if err != nil || !ok {
		return nil, false, wrapRead(err, "like record", item, user)
	}
	r, err = crdt.DecodeLikeRecord(b)
	if err != nil {
		return nil, false, wrapRead(err, "like record", item, user)
	}
	return r, true, nil
}

// Meta reads a metadata value.
func (s *Store) Meta(name string) ([]byte, bool, error) {
	b, ok, err := s.get(metaKey(name))
	return b, ok, wrapRead(err, "meta", name)
}

// Markers calls fn for every record marked unreconciled, like records
// first, then keyed records and spends, each in key order, until fn
// returns false. k is the family of vectors the record counts in, which
// says its kind: Likes for a like record of (item, user), Counters for a
// keyed record of (counter key, idempotency key), Budgets for a spend of
// (budget key, idempotency key).
func (s *Store) Markers(fn func(k Kind, item, user string) bool) error {
	if s.closed.Load() {
		return fmt.Errorf("scan markers: %w", ErrClosed)
	}
	for _, p := range []byte{prefixMarker, prefixKeyedMarker} {
		prefix := []byte{p, '/'}
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
		if err != nil {
			return fmt.Errorf("scan markers: %w", err)
		}
		more := true
		for it.First(); it.Valid() && more; it.Next() {
			item, user, ok := strings.Cut(string(it.Key()[len(prefix):]), "/")
			switch {
			case !ok:
			case p == prefixKeyedMarker:
				k, key := keyedKind(item)
				more = fn(k, key, user)
			default:
				more = fn(Likes, item, user)
			}
		}
		if err := it.Close(); err != nil {
			return fmt.Errorf("scan markers: %w", err)
		}
		if !more {
			return nil
		}
	}
	return nil
}

func wrapRead(err error, what string, parts ...string) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("read %s %s: %w", what, strings.Join(parts, "/"), err)
}

// pebbleLogger routes Pebble's logging into hclog.
type pebbleLogger struct{ l hclog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...))
}

// Fatalf logs and panics with a pebbleFatal: Pebble calls it for errors it
// cannot continue after, and expects it not to return. On the committing
// goroutine, Store.commit turns the panic into ErrFailed, so the replica
// refuses writes and fails its health check; anywhere else (a flush or
// compaction goroutine) the panic ends the process with the message, which
// is the safe outcome: nothing acknowledged is lost, since acknowledged
// writes are in the fsynced WAL.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg)
	panic(pebbleFatal(msg))
}

// pebbleFatal is the panic value of pebbleLogger.Fatalf.
type pebbleFatal string

// commit commits a Pebble batch, turning a fatal commit error (Pebble's
// Fatalf on this goroutine) into ErrFailed and marking the store failed.
// Any other panic is not ours to handle and goes on.
func (s *Store) commit(b *pebble.Batch) (err error) {
	return s.commitWith(b, s.wo)
}

// commitLazy commits b without waiting for a WAL fsync of its own: it is
// durable once the next fsynced commit is (WaitDurable), and until then
// a power loss may take it. For writes whose loss costs only a repeat of
// work (a cursor, a rearrangement nothing has read yet), so that they do
// not add fsyncs in front of the writer's commits.
func (s *Store) commitLazy(b *pebble.Batch) error {
	if err := s.commitWith(b, pebble.NoSync); err != nil {
		return err
	}
	// Durable once a commit begun after this read has fsynced.
	need := s.syncBegun.Load() + 1
	for {
		m := s.lazyNeed.Load()
		if m >= need || s.lazyNeed.CompareAndSwap(m, need) {
			return nil
		}
	}
}

func (s *Store) commitWith(b *pebble.Batch, wo *pebble.WriteOptions) (err error) {
	defer func() {
		if r := recover(); r != nil {
			msg, ok := r.(pebbleFatal)
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("%w: %s", ErrFailed, string(msg))
			s.failure.CompareAndSwap(nil, &err)
		}
	}()
	var ticket uint64
	if wo.Sync {
		ticket = s.syncBegun.Add(1)
	}
	if err := b.Commit(wo); err != nil {
		return err
	}
	s.commits.Add(1)
	if wo.Sync {
		s.synced(ticket)
	}
	return nil
}

// synced records that the fsynced commit with this ticket finished.
func (s *Store) synced(ticket uint64) {
	for {
		done := s.syncDone.Load()
		if done >= ticket || s.syncDone.CompareAndSwap(done, ticket) {
			break
		}
	}
	if s.syncWaiters.Load() > 0 {
		s.syncMu.Lock()
		close(s.syncWake)
		s.syncWake = make(chan struct{})
		s.syncMu.Unlock()
	}
}

// Sync makes every write applied so far durable (a WAL fsync, shared with
// any concurrent commits).
func (s *Store) Sync() (err error) {
	if s.closed.Load() {
		return ErrClosed
	}
	defer func() {
		if r := recover(); r != nil {
			msg, ok := r.(pebbleFatal)
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("sync store: %w: %s", ErrFailed, string(msg))
			s.failure.CompareAndSwap(nil, &err)
		}
	}()
	ticket := s.syncBegun.Add(1)
	if err := s.db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("sync store: %w", err)
	}
	s.synced(ticket)
	return nil
}

// WaitDurable returns once every batch committed before the call is
// durable (only those committed without an fsync of their own, by
// MergeLogChunks and SetLogPublished, may not be yet): when the next
// fsynced commit (a writer's) finishes, or after at most wait with an
// fsync of its own. Under load the writer fsyncs every few milliseconds,
// so those batches ride on its fsyncs instead of adding their own;
// idle, they cost one fsync after wait. Under DurabilityNone it returns
// at once, as commits do.
func (s *Store) WaitDurable(wait time.Duration) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if !s.wo.Sync {
		return nil
	}
	// Every lazy commit so far is durable once a commit with a ticket
	// of at least need (begun after it) has finished.
	need := s.lazyNeed.Load()
	if s.syncDone.Load() >= need {
		return nil
	}
	s.syncWaiters.Add(1)
	defer s.syncWaiters.Add(-1)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		s.syncMu.Lock()
		wake := s.syncWake
		s.syncMu.Unlock()
		if s.syncDone.Load() >= need {
			return nil
		}
		select {
		case <-wake:
		case <-timer.C:
			return s.Sync()
		}
	}
}

var _ io.Closer = (*Store)(nil)
