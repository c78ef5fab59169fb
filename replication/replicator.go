package replication

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/internal/base/buildtags"
	"github.com/tally-dev/tally/internal/base/failpoint"
	"github.com/tally-dev/tally/internal/base/ratelog"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

// Subjects: tally.delta.<region>.<replica> for the fast path and
// tally.ae.<replica>.{digests,page} for anti-entropy requests.
const (
	subjectDeltaPrefix = "tally.delta."
	subjectAEPrefix    = "tally.ae."
)

func deltaSubject(region, replica string) string {
	return subjectDeltaPrefix + token(region) + "." + token(replica)
}

func digestsSubject(replica string) string { return subjectAEPrefix + token(replica) + ".digests" }

func pageSubject(replica string) string { return subjectAEPrefix + token(replica) + ".page" }

// token makes an id safe as one NATS subject token: ids may hold '.', which
// would split the token, so it is replaced by '_' (':' and '@' are fine).
// Distinct ids could collide only if they differ in '.' vs '_' alone; the
// id inside each message is authoritative.
func token(id string) string { return SubjectToken(id) }

// SubjectToken makes an id safe as one NATS subject token ('.' becomes
// '_'), for every subject that names a region or replica.
func SubjectToken(id string) string { return strings.ReplaceAll(id, ".", "_") }

// Replicator runs one replica's replication: fast path out and in,
// anti-entropy, and recovery before writes are accepted.
type Replicator struct {
	cfg    Config
	self   string
	region string
	log    hclog.Logger
	m      *metrics

	mu    sync.Mutex // protects the peers' state (Config.Peers, and those AddPeers adds)
	peers map[string]*peer
	// peerSet is the set of peers' ids, replaced whole by AddPeers, so
	// the merge path (known, per entry) reads it without the lock.
	peerSet atomic.Pointer[map[string]bool]
	// retired: Config.Retired, whose state is taken only while a fresh
	// store recovers (authority.go, takesRetired).
	retired map[string]bool
	// fresh: the replica's store was empty at start (region.Replica.Fresh).
	fresh bool
	// seenRival is the incarnation of the last other process found using
	// our id (identity.go).
	seenRival atomic.Uint64
	// rivalDelta is the incarnation of the last other process seen
	// publishing deltas on our own subject (identity.go).
	rivalDelta atomic.Uint64
	// idMu guards the rival hello state (identity.go, judgeRival).
	idMu sync.Mutex
	// rivalHello is the last hello of another process naming our id.
	rivalHello *hello
	// rivalLogged is the incarnation whose hello was last logged.
	rivalLogged uint64
	// lastRefusalLog rate-limits the log line for refused messages.
	lastRefusalLog atomic.Int64
	// mergeFailed logs failed merges at a bounded rate: a stopped replica
	// (a full disk) fails every merge of every delta it receives.
	mergeFailed *ratelog.Limiter

	kick        chan struct{} // asks anti-entropy to run what is due now
	incarnation uint64        // random per process, sent in every delta
	recovered   atomic.Bool
	started     time.Time
	lastWaitLog time.Time // owned by the anti-entropy goroutine
	inbox       chan *Delta
	ownSubject  string // deltaSubject of this replica

	// confirmAt is when every peer is to be compared again, before the
	// next tick, because one came back with differences (zero: not
	// due); confirmedAt when the last such round was due, so there is at
	// most one per AntiEntropyInterval. Guarded by mu.
	confirmAt, confirmedAt time.Time

	cancel    context.CancelFunc
	wg        sync.WaitGroup
	unsubs    []func() error
	closeOnce sync.Once
	// subMu guards shardSubs and subsClosed (shardsubjects.go).
	subMu      sync.Mutex
	shardSubs  map[int]func() error
	peerSubs   map[string]func() error // by peer id: the own subjects followed (liveness.go)
	liveSubs   map[string]func() error // by region: the liveness summaries heard (liveness.go)
	subsClosed bool
	// hmu guards the message handlers against Close: a handler runs under
	// the read lock and only while handlersOff is false, and Close takes
	// the write lock after unsubscribing, so no handler still reads the
	// store (whose Close refuses open iterators) once Close returns.
	hmu         sync.RWMutex
	handlersOff bool

	faults *FaultyTransport // the chaos build's, wrapping cfg.Transport; else nil
}

// peer is what this replica knows of another. Guarded by Replicator.mu.
type peer struct {
	id, region string
	lastHeard  time.Time // of its last delta or heartbeat
	// liveAt is when its region's liveness summary last said it was
	// heard (liveness.go): how a replica knows of peers it does not follow.
	liveAt      time.Time
	lagMs       int64 // at the last message: transit time minus how far its clock is ahead of ours
	incarnation uint64
	lastSeq     map[int]uint64 // per subject (flusher.seq)
	lost        uint64
	root        uint64
	comparedAt  time.Time
	differing   int
	inSyncSince time.Time
	synced      bool // a full pull from it succeeded since start
	// fullAt: every difference with it as of then is pulled, but for
	// segments it was writing (shards.go, ShardSync). prevStart is when
	// the last comparison began and stablePulled whether its round pulled
	// every segment that differed at the one before with the peer's side
	// unchanged; both the anti-entropy goroutine's.
	fullAt       time.Time
	prevStart    time.Time
	stablePulled bool
	// segEqualAt is when each segment last compared equal with it (a
	// comparison begun then), allEqualAt when every one did (equal
	// roots); equal and allEqual are the last comparison's, owned by the
	// anti-entropy goroutine.
	segEqualAt [storage.Segments]time.Time
	allEqualAt time.Time
	// restartedAt is when a delta of a new incarnation of it was first
	// heard: comparisons begun before then do not count (ShardSync).
	restartedAt time.Time
	equal       []int
	allEqual    bool
	lastErr     string
	// attemptAt is when the last exchange with it began; retryAt, if not
	// zero, when the next one is due before the tick (a fast failure
	// retried, or the peer heard from again after a failure or silence).
	attemptAt, retryAt time.Time
	// prevDiff holds, for each segment that differed at the last
	// comparison, the peer's digest then. Owned by the anti-entropy
	// goroutine (not guarded by mu).
	prevDiff map[int]uint64
	// parts is whether it answers PartsRequests (partsYes) or not
	// (partsNo: it predates them, and its segments are pulled whole), as
	// found in incarnation partsInc; a restart may be an upgrade or a
	// downgrade, so then it is not known again.
	parts    partsSupport
	partsInc uint64
	// plainDiffs is set when, in incarnation plainDiffsInc, it answered
	// a DiffRequest naming its asker with nothing and one without with a
	// page: it predates them, and its differences are asked for whole.
	plainDiffs    bool
	plainDiffsInc uint64
}

// New builds a Replicator; Start runs it.
func New(cfg Config) (*Replicator, error) {
	cfg.ensureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Replicator{
		cfg:        cfg,
		self:       cfg.Replica.ID(),
		region:     cfg.Replica.Region(),
		log:        cfg.Logger.Named("replication"),
		m:          newMetrics(cfg.Registerer),
		peers:      make(map[string]*peer),
		inbox:      make(chan *Delta, 1024),
		ownSubject: deltaSubject(cfg.Replica.Region(), cfg.Replica.ID()),
		kick:       make(chan struct{}, 1),
		// Not a security token, only distinct per process run.
		incarnation: rand.Uint64() | 1,
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(peerCollector{r}); err != nil {
			return nil, fmt.Errorf("register peer metrics: %w", err)
		}
	}
	r.fresh = cfg.Replica.Fresh()
	r.mergeFailed = ratelog.New(ratelog.Config{Logger: r.log, Level: hclog.Warn})
	r.retired = make(map[string]bool, len(cfg.Retired))
	for _, id := range cfg.Retired {
		r.retired[id] = true
	}
	for _, id := range cfg.Peers {
		if id != r.self && !r.retired[id] {
			r.peers[id] = &peer{id: id, lastSeq: make(map[int]uint64)}
		}
	}
	r.storePeerSet()
	if buildtags.Chaos && !cfg.NetFaults.None() {
		r.faults = NewFaultyTransport(cfg.Transport, cfg.NetFaults)
		r.cfg.Transport = r.faults
		r.log.Warn("chaos build: injecting faults into published messages", "faults", cfg.NetFaults.String())
	}
	if r.gossipIncrements() {
		r.log.Warn("chaos build: deliberate bug on", "bug", failpoint.GossipIncrements)
	}
	return r, nil
}

// Start subscribes and starts the replicator's goroutines. They stop when
// ctx ends or Close is called.
func (r *Replicator) Start(ctx context.Context) error {
	ctx, r.cancel = context.WithCancel(ctx)
	if err := r.listen(); err != nil {
		return err
	}
	r.wg.Add(3)
	go r.runFlusher(ctx)
	go r.runMerger(ctx)
	go r.runAntiEntropy(ctx)
	return nil
}

// listen subscribes and answers requests; Start's goroutines, or a test
// driving the steps by hand, do the rest.
func (r *Replicator) listen() error {
	r.started = r.cfg.Now()
	t := r.cfg.Transport
	subs := []struct {
		subject string
		sub     func() (func() error, error)
	}{
		{r.deltaSubscription(), func() (func() error, error) { return t.Subscribe(r.deltaSubscription(), r.guard(r.receive)) }},
		{digestsSubject(r.self), func() (func() error, error) { return t.Respond(digestsSubject(r.self), r.guardReply(r.serveDigests)) }},
		{pageSubject(r.self), func() (func() error, error) { return t.Respond(pageSubject(r.self), r.guardReply(r.servePage)) }},
		{historySubject(r.self), func() (func() error, error) { return t.Respond(historySubject(r.self), r.guardReply(r.serveHistory)) }},
		{idSubject(r.self), func() (func() error, error) { return t.Subscribe(idSubject(r.self), r.guard(r.onHello)) }},
	}

	for _, s := range subs {
		unsub, err := s.sub()
		if err != nil {
			r.Close()
			return fmt.Errorf("start replication: %w", err)
		}
		r.unsubs = append(r.unsubs, unsub)
	}
	if err := r.followShards(); err != nil {
		r.Close()
		return fmt.Errorf("start replication: %w", err)
	}
	r.announce() // identity.go
	return nil
}

// Close stops every goroutine and unsubscribes. It is idempotent. It does
// not close the replica, the store or the transport.
func (r *Replicator) Close() {
	r.closeOnce.Do(func() {
		for _, u := range r.unsubs {
			_ = u()
		}
		r.closeShardSubs()
		// A handler the transport had already started may still run:
		// wait for it, and keep any later one out.
		r.hmu.Lock()
		r.handlersOff = true
		r.hmu.Unlock()
		if r.cancel != nil {
			r.cancel()
		}
		r.wg.Wait()
		if r.faults != nil {
			r.faults.Close()
		}
	})
}

// guard wraps a subscription handler so that it does nothing once Close
// has begun, and Close waits for it (see hmu).
func (r *Replicator) guard(h func(subject string, data []byte)) func(string, []byte) {
	return func(subject string, data []byte) {
		r.hmu.RLock()
		defer r.hmu.RUnlock()
		if !r.handlersOff {
			h(subject, data)
		}
	}
}

// guardReply is guard for a request handler; after Close it answers
// nothing (an empty reply, which requesters treat as failure).
func (r *Replicator) guardReply(h func(data []byte) []byte) func([]byte) []byte {
	return func(data []byte) []byte {
		r.hmu.RLock()
		defer r.hmu.RUnlock()
		if r.handlersOff {
			return nil
		}
		return h(data)
	}
}

// runFlusher publishes the outbox every FlushInterval, and a heartbeat when
// there was nothing to say for HeartbeatInterval.
func (r *Replicator) runFlusher(ctx context.Context) {
	defer r.wg.Done()
	tick := time.NewTicker(r.cfg.FlushInterval)
	defer tick.Stop()
	f := r.newFlusher()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r.flush(f)
	}
}

// flusher is the state of the flusher goroutine (or of a test that
// flushes by hand).
type flusher struct {
	// seq counts the messages published on each subject: the replica's
	// own subject (baseSubject) and, sharded, each shard's.
	seq      map[int]uint64
	lastSent time.Time // of the last message on the replica's own subject
	lastLive time.Time // of the last liveness summary (liveness.go)
	subject  string
	// gossipSent: the own entries as last published, for the chaos
	// build's gossip-increments bug.
	gossipSent map[outVec]crdt.PN
}

// baseSubject keys flusher.seq and peer.lastSeq for the replica's own
// subject, tally.delta.<region>.<replica>, beside the shard numbers.
const baseSubject = -1

func (r *Replicator) newFlusher() *flusher {
	return &flusher{subject: deltaSubject(r.region, r.self), seq: make(map[int]uint64), gossipSent: make(map[outVec]crdt.PN)}
}

// flush publishes what the outbox holds, or a heartbeat if nothing went out
// for HeartbeatInterval. Unsharded, everything goes on the replica's own
// subject; sharded, each shard's changes go on that shard's subject
// (shardSubjects.go), so that only its holders receive them, and the own
// subject carries a heartbeat every HeartbeatInterval, which the peers
// following it hear; the region's liveness summary, if this replica
// speaks for its region, goes out every liveInterval (liveness.go).
func (r *Replicator) flush(f *flusher) {
	vecs, recs, pages, asks := r.cfg.Outbox.take()
	if r.gossipIncrements() {
		chaosOutgoing(f.gossipSent, vecs)
	}
	now := r.cfg.Now()
	r.publishLiveness(f, now)
	idle := len(vecs) == 0 && len(recs) == 0 && len(pages) == 0 && len(asks) == 0
	beat := now.Sub(f.lastSent) >= r.cfg.HeartbeatInterval
	if idle && !beat {
		// Most ticks: nothing to send. The root folds every segment's
		// digest, so it is only taken for a message.
		return
	}
	root := r.cfg.Store.Root()
	if r.cfg.Shards != nil {
		if !idle {
			for _, g := range groupByShard(vecs, recs, pages, asks) {
				r.publish(f, g.shard, root, g.vecs, g.recs, g.pages, g.asks)
			}
		}
		if beat {
			r.publish(f, baseSubject, root, nil, nil, nil, nil)
			f.lastSent = now
		}
		return
	}
	r.publish(f, baseSubject, root, vecs, recs, pages, asks)
	f.lastSent = now
}

// publish sends changes on one subject (baseSubject or a shard's), in
// messages of at most MaxMessageBytes; always at least one message.
func (r *Replicator) publish(f *flusher, on int, root uint64, vecs []OwnEntry, recs []Record, pages []OwnPage, asks []Ask) {
	subject := f.subject
	if on != baseSubject {
		subject = shardDeltaSubject(f.subject, on)
	}
	msgs := r.split(vecs, recs, pages)
	// Asks ride in the last message, after this replica's own changes, so
	// a giver weighs them against our latest spends.
	msgs[len(msgs)-1].Asks = asks
	for _, msg := range msgs {
		f.seq[on]++
		msg.Replica, msg.Region, msg.Incarnation, msg.Seq, msg.SentAtMs, msg.Root = r.self, r.region, r.incarnation, f.seq[on], r.cfg.Replica.Now().UnixMilli(), root
		data := AppendDelta(nil, msg)
		if err := r.cfg.Transport.Publish(subject, data); err != nil {
			// Anti-entropy repairs what the fast path drops.
			r.m.publishErrors.Inc()
			r.log.Debug("publish failed", "error", err)
			continue
		}
		r.m.published.Inc()
		r.m.publishedBytes.Add(float64(len(data)))
	}
}

// split packs entries into messages of at most MaxMessageBytes (roughly:
// sizes are estimated from the encodings). Always at least one message.
func (r *Replicator) split(vecs []OwnEntry, recs []Record, pages []OwnPage) []*Delta {
	limit := r.cfg.MaxMessageBytes - 256
	out := []*Delta{{}}
	size := 0
	next := func(n int) *Delta {
		cur := out[len(out)-1]
		if size+n > limit && !cur.empty() {
			cur = &Delta{}
			out = append(out, cur)
			size = 0
		}
		size += n
		return cur
	}
	for _, v := range vecs {
		d := next(len(v.Item) + 24)
		d.Vectors = append(d.Vectors, v)
	}
	for _, rc := range recs {
		size := len(rc.wireName()) + len(rc.User) + 24 + len(rc.Rec.Contributions())*40
		if m, ok := rc.Rec.(*crdt.TypeMeta); ok {
			size += len(m.Origin) + len(m.Value.Owner) + len(m.Value.Status) + len(m.Value.Description)
		}
		d := next(size)
		d.Records = append(d.Records, rc)
	}
	for _, p := range pages {
		d := next(len(p.Name) + 2*p.Regs.Count() + 8)
		d.Sketches = append(d.Sketches, p)
	}
	return out
}

// receive runs on the transport's goroutine: decode, note the peer, queue
// for merging. It never blocks; a full inbox drops the message for
// anti-entropy to repair.
//
// A delta must arrive on its sender's own subject. With NATS permissions
// that let each region publish only on tally.delta.<region>.>, that makes
// the sender id authentic: no region can raise another replica's entries
// (docs/architecture.md, Guarantees 10).
func (r *Replicator) receive(subject string, data []byte) {
	if strings.HasSuffix(subject, liveSuffix) {
		return // a region's liveness summary (liveness.go): an unsharded replica follows every peer itself
	}
	// Our own messages come back (we subscribe to every delta): the
	// echo of one this process sent is dropped before its entries are
	// decoded, at a cost per message, not per change it carries.
	if sender, inc, ok := deltaSender(data); ok && inc == r.incarnation && string(sender) == r.self {
		if _, own := deltaSubjectOf(subject, r.ownSubject); own {
			return
		}
	}
	d, err := DecodeDelta(data)
	if err != nil {
		r.m.badMessages.Inc()
		r.log.Warn("dropping bad delta", "error", err)
		return
	}
	on, ok := deltaSubjectOf(subject, deltaSubject(d.Region, d.Replica))
	if !ok {
		r.m.badMessages.Inc()
		r.log.Warn("dropping delta published on another replica's subject", "subject", subject, "claims", d.Replica)
		return
	}
	if d.Replica == r.self {
		// Our own messages come back (we subscribe to every delta); a
		// sequence we did not send means another process runs with our
		// id, and the two would overwrite each other's entries.
		if d.Incarnation == r.incarnation {
			return
		}
		if r.seenRival.Swap(d.Incarnation) != d.Incarnation {
			r.m.ownIDConflicts.Inc()
			r.log.Error("another process publishes as this replica: replica ids must be unique", "replica", r.self, "seq", d.Seq)
			r.announce() // identity.go: the later of the two stops
		}
		r.sawRivalDelta(d.Incarnation)
		return
	}
	r.mu.Lock()
	p, known := r.peers[d.Replica]
	r.mu.Unlock()
	if !known && r.trustRelays() { // never outside a chaos build: merge it all
		select {
		case r.inbox <- d:
		default:
		}
		return
	}
	if !known {
		// Peers are configured, never discovered: whoever can publish
		// does not become a replica whose silence makes every read approx.
		r.refuse(refusedUnknownSender, "delta from a replica that is not a configured peer", "replica", d.Replica, "subject", subject)
		return
	}
	now := r.cfg.Now()
	// Both ends stamp with their replica's clock (region.Replica.Now), so
	// lag is transit time plus the difference of the two clocks.
	lag := r.cfg.Replica.Now().UnixMilli() - d.SentAtMs
	r.mu.Lock()
	// A peer heard again after silence (a healed partition, a restart) or
	// whose last exchange failed (a cut) may have missed any amount of
	// fast-path traffic: compare digests with it now rather than at the
	// next tick, but not sooner than soonDelay after the last attempt (a
	// one-way cut delivers its deltas while every exchange fails).
	back := r.staleDirectLocked(p, now) || p.lastErr != ""
	if back {
		due := now
		if next := p.attemptAt.Add(r.soonDelay()); next.After(due) {
			due = next
		}
		if p.retryAt.IsZero() || due.Before(p.retryAt) {
			p.retryAt = due
		}
	}
	p.region = d.Region
	p.lastHeard = now
	p.lagMs = lag
	p.root = d.Root
	if d.Incarnation != p.incarnation { // new peer, or it restarted: every Seq starts over
		if p.incarnation != 0 {
			// It restarted, perhaps on an empty data dir: what compared
			// equal with it before says nothing of what it holds now.
			p.restartedAt = now
		}
		p.incarnation = d.Incarnation
		clear(p.lastSeq)
	}
	// Seq counts per subject; a subject first heard of starts here.
	switch last, heard := p.lastSeq[on]; {
	case !heard:
		p.lastSeq[on] = d.Seq
	case d.Seq > last+1:
		p.lost += d.Seq - last - 1
		r.m.lostMessages.Add(float64(d.Seq - last - 1))
		p.lastSeq[on] = d.Seq
	case d.Seq > last:
		p.lastSeq[on] = d.Seq
	}
	r.mu.Unlock()
	if back {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
	r.m.received.Inc()
	if d.empty() {
		return
	}
	r.m.lag.Observe(float64(max(lag, 0)) / 1000)
	select {
	case r.inbox <- d:
	default:
		r.m.inboxDropped.Inc()
	}
}

// runMerger applies received deltas, several per writer request.
func (r *Replicator) runMerger(ctx context.Context) {
	defer r.wg.Done()
	for {
		var batch []*Delta
		select {
		case <-ctx.Done():
			return
		case d := <-r.inbox:
			batch = append(batch, d)
		}
		r.merge(ctx, r.takeQueued(batch, 64))
	}
}

// takeQueued appends to batch the deltas waiting in the inbox, without
// waiting for more, until batch holds max.
func (r *Replicator) takeQueued(batch []*Delta, max int) []*Delta {
	for len(batch) < max {
		select {
		case d := <-r.inbox:
			batch = append(batch, d)
		default:
			return batch
		}
	}
	return batch
}

// merge applies a batch of received deltas in one writer request. A delta
// speaks only for its sender: its own vector entries (the only kind it
// carries), its own contribution to each like record, and the register
// of records whose last action it took. The rest of a record is a relay,
// which the other replicas send themselves.
func (r *Replicator) merge(ctx context.Context, batch []*Delta) {
	var vecs []region.VectorMerge
	var recs []region.RecordMerge
	var pages []region.SketchMerge
	for _, d := range batch {
		for _, p := range d.Sketches {
			if r.holdsName(p.Name) {
				pages = append(pages, region.SketchMerge{Kind: p.Kind, Name: p.Name, Replica: d.Replica, Page: p.Page, Regs: *p.Regs})
			}
		}
		for _, e := range d.Vectors {
			if !r.holdsName(e.Item) {
				continue // a shard this replica does not hold
			}
			pn := e.PN
			if r.gossipIncrements() {
				pn = r.chaosIncoming(d.Replica, e)
			}
			vecs = append(vecs, region.VectorMerge{Kind: e.Kind, Item: e.Item, Vec: crdt.Vector{{Replica: d.Replica, PN: pn}}})
		}
		for _, rc := range d.Records {
			if !r.holdsName(rc.Item) {
				continue
			}
			rec, ok := r.vetRecord(d.Replica, rc.Rec, fastPath)
			if ok {
				recs = append(recs, region.RecordMerge{Item: rc.Item, User: rc.User, Rec: rec})
			}
		}
	}
	if err := r.cfg.Replica.Merge(ctx, vecs, recs); err != nil && ctx.Err() == nil {
		r.mergeFailed.Log("merge failed", "what", "changes", "error", err)
	}
	if err := r.cfg.Replica.MergeSketches(ctx, pages); err != nil && ctx.Err() == nil {
		r.mergeFailed.Log("merge failed", "what", "sketches", "error", err)
	}
	// Peers' asks for budget rights, after their changes are merged, so
	// what we give is measured against their latest spends and ours.
	var gives []region.RightsGive
	for _, d := range batch {
		for _, a := range d.Asks {
			if !r.holdsName(a.Key) {
				continue // rights to a budget are given by its shard's holders
			}
			gives = append(gives, region.RightsGive{Key: a.Key, To: d.Replica, Want: a.Want})
		}
	}
	if err := r.cfg.Replica.Budgets().GiveRights(ctx, gives); err != nil && ctx.Err() == nil {
		r.mergeFailed.Log("merge failed", "what", "budget rights asked", "error", err)
	}
}

// PeerStatus is one peer as this replica sees it.
type PeerStatus = api.PeerStatus

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// AddPeers makes ids peers while the replicator runs (a replica that
// joins the deployment: the shard maps list it) and returns those it
// added. Self and retired ids are not added, and a peer is never
// forgotten (Config.Peers). A peer added later is compared with and
// merged from like a configured one, but does not hold back recovery:
// that waits for Config.Peers.
func (r *Replicator) AddPeers(ids ...string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var added []string
	for _, id := range ids {
		if id == r.self || r.retired[id] || r.peers[id] != nil {
			continue
		}
		r.peers[id] = &peer{id: id, lastSeq: make(map[int]uint64)}
		added = append(added, id)
	}
	if len(added) > 0 {
		r.storePeerSet()
		r.log.Info("new peers: the deployment's shard maps list them", "peers", added)
	}
	return added
}

// storePeerSet publishes the peers' ids for known; with mu held (or
// before Start).
func (r *Replicator) storePeerSet() {
	set := make(map[string]bool, len(r.peers))
	for id := range r.peers {
		set[id] = true
	}
	r.peerSet.Store(&set)
}

// peerIDs are every known peer's ids, sorted.
func (r *Replicator) peerIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.peers))
}

// Peers reports every known peer, sorted by id.
func (r *Replicator) Peers() []PeerStatus {
	now := r.cfg.Now()
	r.mu.Lock()
	out := make([]PeerStatus, 0, len(r.peers))
	for _, p := range r.peers {
		recent := !p.comparedAt.IsZero() && now.Sub(p.comparedAt) <= 2*r.cfg.AntiEntropyInterval+r.cfg.RequestTimeout
		rg, _ := r.regionOfLocked(p)
		ps := PeerStatus{
			Replica: p.id, Region: rg, LastHeard: timePtr(heardLocked(p)), LagMs: p.lagMs,
			Stale: r.staleLocked(p, now), LostMessages: p.lost,
			InSync:            recent && p.lastErr == "" && p.differing == 0,
			DifferingSegments: p.differing, ComparedAt: timePtr(p.comparedAt), InSyncSince: timePtr(p.inSyncSince),
			Synced: p.synced, Error: p.lastErr,
		}
		if heard := heardLocked(p); !heard.IsZero() {
			ps.LastHeardAgoMs = now.Sub(heard).Milliseconds()
		} else {
			ps.LastHeardAgoMs = -1
		}
		out = append(out, ps)
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Replica < out[j].Replica })
	return out
}

// staleLocked reports whether p is unheard-from past PeerTimeout, by
// itself and by its region's summary.
func (r *Replicator) staleLocked(p *peer, now time.Time) bool {
	heard := heardLocked(p)
	return heard.IsZero() || now.Sub(heard) > r.cfg.PeerTimeout
}

// Stale reports whether some known peer is unheard-from past PeerTimeout,
// or this replica has not finished recovery: either way a count may move.
func (r *Replicator) Stale() bool {
	if !r.recovered.Load() {
		return true
	}
	now := r.cfg.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.peers {
		if r.staleLocked(p, now) {
			return true
		}
	}
	return false
}

// Convergence is this replica's view of whether it has converged: every
// peer fresh and its state matched at the last digest comparison, after
// recovery (GET /v1/convergence, RESP's INFO).
func (r *Replicator) Convergence() api.Convergence {
	out := api.Convergence{Replica: r.self, Recovered: r.Recovered(), Peers: r.Peers()}
	out.Converged = out.Recovered
	for _, p := range out.Peers {
		if !p.InSync || p.Stale {
			out.Converged = false
		}
	}
	return out
}

// Recovered reports whether start-up recovery finished and writes are
// accepted.
func (r *Replicator) Recovered() bool { return r.recovered.Load() }

// Pending is how many entries wait for the next flush.
func (r *Replicator) Pending() int { return r.cfg.Outbox.Len() }
