package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/shard"
)

// ShardsBucket is the JetStream KV bucket of the deployment's shard maps:
// one key per region (ShardMapKey), whose value is the region's map as
// shard.Map's MarshalJSON writes it, and whose revision is the map's
// version. The operator writes it (`tallyd admin shards assign`, and
// `tallyd local` when it starts); the replicas only read and watch it
// (package natsperm), each taking a region's map from it when present,
// from its config's shards block otherwise.
const ShardsBucket = "tally_shards"

// ShardMapKey is region's key in ShardsBucket: the region id, with the
// characters an id may hold and a key may not ('.', ':', '@'), and '='
// itself, written as =XX, so each region is one subject token and no two
// regions share a key.
func ShardMapKey(region string) string {
	var b strings.Builder
	for i := 0; i < len(region); i++ {
		switch c := region[i]; c {
		case '.', ':', '@', '=':
			fmt.Fprintf(&b, "=%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// OpenShardMaps opens the shard map bucket, creating it if absent where
// the allocator's bucket lives (cluster and replicas: the replicas'
// alloc_cluster and alloc_replicas). Only a user allowed to create
// streams can create it: the operator's.
func OpenShardMaps(ctx context.Context, js jetstream.JetStream, cluster string, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, ShardsBucket)
	if err == nil {
		return kv, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("open kv bucket %s: %w", ShardsBucket, err)
	}
	kc := jetstream.KeyValueConfig{
		Bucket:      ShardsBucket,
		Description: "tally shard maps: which replicas of each region hold each shard",
		History:     8, // the last maps of a region, for an operator looking back
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
	if cluster != "" {
		kc.Placement = &jetstream.Placement{Cluster: cluster}
	}
	kv, err = js.CreateKeyValue(ctx, kc)
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = js.KeyValue(ctx, ShardsBucket) // another writer was first
	}
	if err != nil {
		return nil, fmt.Errorf("create kv bucket %s: %w", ShardsBucket, err)
	}
	return kv, nil
}

// ShardMapStore is where the shard maps are stored, as PutShardMap,
// SeedShardMap and MoveShards read and write them: the shard map bucket
// (a jetstream.KeyValue, OpenShardMaps) in production; the scripts under
// testdata/shards use one in memory. Get answers jetstream.ErrKeyNotFound
// for a region with no map; Create and Update are compare-and-swap on the
// revision, as the bucket's.
type ShardMapStore interface {
	Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
	Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error)
	Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error)
}

var _ ShardMapStore = jetstream.KeyValue(nil)

// ReadShardMaps returns every region's map in the bucket, each with its
// revision, sorted by region.
func ReadShardMaps(ctx context.Context, kv jetstream.KeyValue) ([]shard.Map, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("read shard maps: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var out []shard.Map
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("read shard maps: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("read shard maps: the watch ended")
			}
			if e == nil { // every stored map is in
				slices.SortFunc(out, func(a, b shard.Map) int { return strings.Compare(a.Region, b.Region) })
				return out, nil
			}
			if e.Operation() != jetstream.KeyValuePut {
				continue
			}
			m, err := decodeShardMap(e)
			if err != nil {
				return nil, err
			}
			out = append(out, m)
		}
	}
}

// decodeShardMap is entry's map, with its revision; its region must be
// the one its key names.
func decodeShardMap(e jetstream.KeyValueEntry) (shard.Map, error) {
	m, err := shard.Decode(e.Value())
	if err != nil {
		return shard.Map{}, fmt.Errorf("shard map %s at revision %d: %w", e.Key(), e.Revision(), err)
	}
	if ShardMapKey(m.Region) != e.Key() {
		return shard.Map{}, fmt.Errorf("shard map %s at revision %d: it is region %s's", e.Key(), e.Revision(), m.Region)
	}
	m.Revision = e.Revision()
	return m, nil
}

// PutShardMap writes m as its region's map by compare-and-swap on
// revision: 0 creates it (refused if the region has one), any other
// revision updates it only if that is still the current one (refused
// when someone wrote since it was read). It returns m at its new
// revision.
func PutShardMap(ctx context.Context, kv ShardMapStore, m shard.Map, revision uint64) (shard.Map, error) {
	if err := m.Validate(); err != nil {
		return shard.Map{}, err
	}
	m.Revision = 0 // the stored value does not say its own revision
	b, err := m.MarshalJSON()
	if err != nil {
		return shard.Map{}, err
	}
	key := ShardMapKey(m.Region)
	if revision == 0 {
		m.Revision, err = kv.Create(ctx, key, b)
	} else {
		m.Revision, err = kv.Update(ctx, key, b, revision)
	}
	if err != nil {
		return shard.Map{}, fmt.Errorf("write shard map of %s at revision %d: %w", m.Region, revision, err)
	}
	return m, nil
}

// ErrShardMapDiffers: the bucket already holds another map of the region.
// The stored map is the truth: it changes only through a move
// (MoveShards), which joins, switches and settles, never in one write.
var ErrShardMapDiffers = errors.New("the stored shard map differs: it changes only through a move (tallyd admin shards move)")

// SeedShardMap stores m as its region's map if the bucket holds none
// (a config seeds an empty bucket, nothing more). It returns the stored
// map and whether it wrote: unchanged when the bucket already holds m,
// and ErrShardMapDiffers, with the stored map, when it holds another one,
// which it leaves alone. A map that was created meanwhile is refused by
// the create's compare-and-swap. Only a map that does not decode is
// replaced: no replica can follow it.
func SeedShardMap(ctx context.Context, kv ShardMapStore, m shard.Map) (shard.Map, bool, error) {
	var revision uint64
	e, err := kv.Get(ctx, ShardMapKey(m.Region))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound): // none yet, or deleted: create
	case err != nil:
		return shard.Map{}, false, fmt.Errorf("read shard map of %s: %w", m.Region, err)
	default:
		cur, err := decodeShardMap(e)
		if err == nil && cur.Equal(m) {
			return cur, false, nil
		}
		if err == nil {
			return cur, false, fmt.Errorf("%w: %s is at revision %d", ErrShardMapDiffers, m.Region, cur.Revision)
		}
		revision = e.Revision() // an undecodable map is replaced
	}
	stored, err := PutShardMap(ctx, kv, m, revision)
	return stored, err == nil, err
}

// shardMapReadTimeout bounds reading the shard map bucket when a replica
// starts: past it (JetStream out of reach) the replica starts from its
// config's maps and takes the bucket's when it can.
const shardMapReadTimeout = 5 * time.Second

// shardWatchRetry is how long the watch waits before opening the bucket
// again (absent, or out of reach).
const shardWatchRetry = 2 * time.Second

// shardWatch is a sharded replica's view of every region's shard map
// (replication.ShardView): each region's map from the shard map bucket
// when it holds one, from the config otherwise, following the bucket as
// it changes. A new map of its own region is a move (shard/move.go): the
// replica follows it at once, its replication keeping the shards it joins
// and leaves, and its serving (onOwn) the shards it holds.
type shardWatch struct {
	region, self string
	config       shard.Maps // the config's maps
	own          shard.Map  // this region's map in force; the watch's goroutine only, after start
	nc           *nats.Conn
	log          hclog.Logger

	ownMu sync.Mutex
	// onOwn serves by a new map of this region (the router's update).
	onOwn func(shard.Map) error
	// released reports whether this replica's entries of shards are at
	// every other replica keeping them, compared after since; onDrop
	// drops the data of shards this replica keeps no longer (node's
	// dropShards). drop is what takeOwn left to drop, after publish.
	released func(shards shard.Set, since time.Time) bool
	onDrop   func(ctx context.Context, shards shard.Set)
	drop     shard.Set
	// onLeave hands the budget rights of shards this replica stops
	// serving to their holders in the map (node's handOffShards); leave
	// is what takeOwn left to hand off, after publish.
	onLeave func(ctx context.Context, shards shard.Set, m shard.Map)
	leave   shard.Set
	// chaosDrop: the chaos build's bug delete-before-sync: a shard is
	// dropped as soon as this replica stops serving it.
	chaosDrop bool
	// onPeers hears every replica the maps list (the replicator's
	// AddPeers): a replica that joins a region becomes everyone's peer
	// when its region's map first lists it.
	onPeers func(ids ...string) []string
	// tookAt is when this replica took its region's map in force, on
	// now (time.Now; the replicator's clock, which ShardSync compares it
	// with).
	tookAt time.Time
	now    func() time.Time

	view   atomic.Pointer[shard.Maps]
	stored map[string]shard.Map // the bucket's maps by region; the watch's goroutine only, after start

	ctx  context.Context
	stop context.CancelFunc
	done chan struct{}
}

// startShardWatch reads the bucket's maps (bounded by
// shardMapReadTimeout) and follows the bucket on a goroutine until close.
// It fails if the bucket's map of this replica's region does not list it.
func startShardWatch(cfg Config, nc *nats.Conn, log hclog.Logger) (*shardWatch, error) {
	w, err := newShardWatch(cfg, nc, time.Now, log)
	if err != nil {
		return nil, err
	}
	kw, err := w.readAtStart()
	if err == nil {
		err = w.adopt()
	}
	if err != nil {
		if kw != nil {
			_ = kw.Stop()
		}
		w.stop()
		return nil, err
	}
	w.publish()
	go w.run(kw)
	return w, nil
}

// newShardWatch is a watch of the config's maps, nothing read yet; now
// is its clock.
func newShardWatch(cfg Config, nc *nats.Conn, now func() time.Time, log hclog.Logger) (*shardWatch, error) {
	config, own, err := cfg.shardMaps()
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	return &shardWatch{region: cfg.Region, self: cfg.Replica, config: config, own: own, nc: nc,
		log: log.Named("shardmaps"), stored: map[string]shard.Map{}, ctx: ctx, stop: stop, done: make(chan struct{}),
		now: now, tookAt: now()}, nil
}

// adopt takes the stored map of this replica's region, read at start,
// over the config's: the stored map is the truth. It fails if that map
// does not list this replica.
func (w *shardWatch) adopt() error {
	m, ok := w.stored[w.region]
	if !ok {
		w.log.Info("no stored shard map of this region: using the config's", "region", w.region)
		return nil
	}
	if held := m.Held(w.self); held.Len() == 0 {
		return fmt.Errorf("the shard map of region %s (bucket %s, revision %d) does not list this replica %s: assign the region's map again (tallyd admin shards assign)",
			w.region, ShardsBucket, m.Revision, w.self)
	}
	if !m.Equal(w.own) {
		w.log.Warn("the stored shard map of this region differs from the one the config computes; the stored one is used",
			"region", w.region, "revision", m.Revision, "copies", m.Copies, "replicas", m.Replicas(),
			"config_copies", w.own.Copies, "config_replicas", w.own.Replicas())
	}
	w.own = m
	return nil
}

// readAtStart reads the bucket's maps into stored and returns the watch
// that read them, to be followed; nil when the bucket is absent or out
// of reach (run opens it later).
func (w *shardWatch) readAtStart() (jetstream.KeyWatcher, error) {
	if !w.nc.IsConnected() {
		w.log.Warn("NATS not reachable yet: starting from the config's shard maps")
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(w.ctx, shardMapReadTimeout)
	defer cancel()
	kw, err := w.watch(ctx)
	if err != nil {
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			w.log.Info("no shard map bucket: using the config's maps", "bucket", ShardsBucket)
		} else {
			w.log.Warn("shard map bucket out of reach: starting from the config's maps", "bucket", ShardsBucket, "error", err)
		}
		return nil, nil
	}
	for {
		select {
		case <-ctx.Done():
			w.log.Warn("shard map bucket did not answer in time: starting from the config's maps for the regions not read yet",
				"bucket", ShardsBucket, "timeout", shardMapReadTimeout)
			return kw, nil
		case e, ok := <-kw.Updates():
			if !ok {
				return nil, nil
			}
			if e == nil {
				return kw, nil
			}
			if err := w.take(e); err != nil {
				w.log.Warn("ignoring a stored shard map", "error", err)
			}
		}
	}
}

// watch opens the bucket and watches every key, for as long as w runs
// (ctx bounds the opening only).
func (w *shardWatch) watch(ctx context.Context) (jetstream.KeyWatcher, error) {
	js, err := jetstream.New(w.nc)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, ShardsBucket)
	if err != nil {
		return nil, err
	}
	return kv.WatchAll(w.ctx)
}

// take records entry's map (or its deletion) in stored.
func (w *shardWatch) take(e jetstream.KeyValueEntry) error {
	if e.Operation() != jetstream.KeyValuePut {
		for r := range w.stored {
			if ShardMapKey(r) == e.Key() {
				delete(w.stored, r)
			}
		}
		return nil
	}
	m, err := decodeShardMap(e)
	if err != nil {
		return err
	}
	w.stored[m.Region] = m
	return nil
}

// publish makes the view: this region's map in force, and every other
// region's stored map, or the config's.
func (w *shardWatch) publish() {
	view := shard.Maps{w.own}
	seen := map[string]bool{w.region: true}
	for _, m := range w.config {
		if seen[m.Region] {
			continue
		}
		seen[m.Region] = true
		if s, ok := w.stored[m.Region]; ok {
			m = s
		}
		view = append(view, m)
	}
	for r, m := range w.stored { // regions the config does not list
		if !seen[r] {
			view = append(view, m)
		}
	}
	w.view.Store(&view)
	w.ownMu.Lock()
	add := w.onPeers
	w.ownMu.Unlock()
	if add != nil {
		add(view.Replicas()...)
	}
}

// peersBy sets what hears the replicas the maps list, and tells it those
// listed now.
func (w *shardWatch) peersBy(fn func(ids ...string) []string) {
	w.ownMu.Lock()
	w.onPeers = fn
	w.ownMu.Unlock()
	fn(w.view.Load().Replicas()...)
}

// Holds reports whether replica holds shard s in the current view.
func (w *shardWatch) Holds(replica string, s int) bool { return w.view.Load().Holds(replica, s) }

// RegionOf is the region whose map lists replica in the current view
// (replication.RegionView).
func (w *shardWatch) RegionOf(replica string) (string, bool) { return w.view.Load().RegionOf(replica) }

// Joins reports whether replica is taking shard s in a move, in the
// current view.
func (w *shardWatch) Joins(replica string, s int) bool { return w.view.Load().Joins(replica, s) }

// maps is the current view.
func (w *shardWatch) maps() shard.Maps { return slices.Clone(*w.view.Load()) }

// run follows the bucket until close: kw, then, whenever a watch ends or
// there was none, a new one.
func (w *shardWatch) run(kw jetstream.KeyWatcher) {
	defer close(w.done)
	var lastErr string
	for {
		if kw == nil {
			ctx, cancel := context.WithTimeout(w.ctx, shardMapReadTimeout)
			var err error
			kw, err = w.watch(ctx)
			cancel()
			if err != nil {
				if w.ctx.Err() != nil {
					return
				}
				if err.Error() != lastErr {
					lastErr = err.Error()
					w.log.Debug("shard map bucket not open yet; trying again", "bucket", ShardsBucket, "error", err)
				}
				kw = nil
				if !w.sleep(shardWatchRetry) {
					return
				}
				continue
			}
			lastErr = ""
		}
		w.follow(kw)
		_ = kw.Stop()
		kw = nil
		if !w.sleep(shardWatchRetry) {
			return
		}
	}
}

// follow applies kw's changes until it ends or w closes.
func (w *shardWatch) follow(kw jetstream.KeyWatcher) {
	for {
		select {
		case <-w.ctx.Done():
			return
		case e, ok := <-kw.Updates():
			if !ok {
				return
			}
			if e != nil {
				w.apply(e)
			}
		}
	}
}

// apply takes one change of the bucket into the view at once: another
// region's map, and a new map of this replica's own region (takeOwn).
func (w *shardWatch) apply(e jetstream.KeyValueEntry) {
	before := map[string]uint64{}
	for r, m := range w.stored {
		before[r] = m.Revision
	}
	if err := w.take(e); err != nil {
		w.log.Warn("ignoring a stored shard map", "error", err)
		return
	}
	w.changed(before)
}

// changed follows the stored maps, which were at the revisions before
// (by region) until the last change: a new map of this replica's own
// region is taken (takeOwn), then the view published and the shards
// this replica keeps no longer handed off and dropped.
func (w *shardWatch) changed(before map[string]uint64) {
	for r, m := range w.stored {
		if before[r] == m.Revision {
			continue // seen already (a watch opened again reads every map)
		}
		if r == w.region {
			if !m.Equal(w.own) {
				w.takeOwn(m)
			}
			continue
		}
		w.log.Info("shard map of another region changed: replication follows its holders", "region", r, "revision", m.Revision, "copies", m.Copies, "replicas", m.Replicas())
	}
	for r := range before {
		if _, ok := w.stored[r]; !ok && r != w.region {
			w.log.Info("shard map of another region deleted: back to the config's", "region", r)
		}
	}
	w.publish()
	// Replication keeps the dropped shards no longer: drop their data.
	w.ownMu.Lock()
	drop, onDrop, leave, onLeave, own := w.drop, w.onDrop, w.leave, w.onLeave, w.own
	w.drop, w.leave = shard.Set{}, shard.Set{}
	w.ownMu.Unlock()
	if leave.Len() > 0 && onLeave != nil {
		onLeave(w.ctx, leave, own)
	}
	if drop.Len() > 0 && onDrop != nil {
		onDrop(w.ctx, drop)
	}
}

// dropBy sets how this replica tells its entries of shards are at their
// holders, drops the shards it keeps no longer, and hands the budget
// rights of those it stops serving to their holders.
func (w *shardWatch) dropBy(released func(shard.Set, time.Time) bool, drop func(context.Context, shard.Set),
	leave func(context.Context, shard.Set, shard.Map), chaosDrop bool) {
	w.ownMu.Lock()
	defer w.ownMu.Unlock()
	w.released, w.onDrop, w.onLeave, w.chaosDrop = released, drop, leave, chaosDrop
}

// takeOwn follows a new map of this replica's region: replication keeps
// what it joins and leaves at once (publish), and serving follows what
// it holds. A map that leaves this replica nothing is refused: it would
// strand its entries.
func (w *shardWatch) takeOwn(m shard.Map) {
	keeps := m.Keeps(w.self)
	if !keeps.Has(shard.Global) {
		w.log.Error("the new shard map of this region does not list this replica: keeping the current one (assign the region's map again)",
			"region", w.region, "revision", m.Revision, "serving_revision", w.own.Revision)
		return
	}
	held, joining, leaving := m.Held(w.self), m.Joining(w.self), m.Leaving(w.self)
	dropped := shard.Dropped(w.own, m, w.self)
	left := shard.Served(w.own, m, w.self)
	if w.chaosDrop { // never outside a chaos build
		dropped = left
	}
	w.log.Info("the shard map of this region changed: following it",
		"region", w.region, "revision", m.Revision, "previous_revision", w.own.Revision,
		"serves", held.Len(), "joining", joining.Len(), "leaving", leaving.Len(), "dropping", dropped.Len())
	w.ownMu.Lock()
	defer w.ownMu.Unlock()
	// Rights of budgets it no longer takes spends of go to a holder now,
	// and again before the data is dropped (rights that came since).
	w.leave = left.Or(dropped)
	if dropped.Len() > 0 {
		// Whether its entries are at the holders, asked while the shards
		// are still kept and compared.
		if w.released != nil && w.released(dropped, w.tookAt) {
			w.drop = dropped
		} else {
			w.log.Error("the new shard map drops shards whose entries this replica has not seen at every holder: their data is kept (not served, not replicated); move them back to this replica, or let it release them before the map settles",
				"region", w.region, "revision", m.Revision, "shards", dropped.Ranges())
		}
	}
	w.own = m
	w.tookAt = w.now()
	if w.onOwn != nil {
		if err := w.onOwn(m); err != nil {
			w.log.Error("serving by the new shard map", "revision", m.Revision, "error", err)
		}
	}
}

// serveBy sets what follows a new map of this region (after the router
// exists: the watch starts first).
func (w *shardWatch) serveBy(fn func(shard.Map) error) {
	w.ownMu.Lock()
	defer w.ownMu.Unlock()
	w.onOwn = fn
}

// ownSince returns the region's map in force and when this replica took
// it.
func (w *shardWatch) ownSince() (shard.Map, time.Time) {
	w.ownMu.Lock()
	defer w.ownMu.Unlock()
	return w.ownView(), w.tookAt
}

// ownView is the region's map in the published view.
func (w *shardWatch) ownView() shard.Map { return (*w.view.Load())[0] }

// sleep waits d, or until close (false).
func (w *shardWatch) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-w.ctx.Done():
		return false
	}
}

// close stops the watch and waits for its goroutine.
func (w *shardWatch) close() {
	w.stop()
	<-w.done
}
