// Package storage keeps a replica's state in Pebble: one key per (vector,
// replica) entry, one per like record and keyed record, the event log,
// reconciliation markers, the numbering queues and replica metadata.
//
// # Durability
//
// A Batch commits with a WAL fsync (pebble.Sync) unless the store was opened
// with DurabilityNone, an explicit opt-in. Pebble's commit pipeline lets
// concurrent syncing commits share one fsync; the region package adds its own
// group commit on top, since it must order writes to a replica's own entries.
// Two writes of the event publisher's bookkeeping, MergeLogChunks and
// SetLogPublished, commit without an fsync of their own and become
// durable with the next commit that fsyncs (or Store.WaitDurable), so
// that they put no fsync in front of the writer's.
//
// # Key layout
//
// Ids never contain '/', so '/' separates key parts and a prefix scan of
// "b<B>/v/l/<item>/" sees exactly one item. Replicated state lives under
// "b<B>/", where <B> is the entry's anti-entropy segment in three hex
// digits (VectorSegment of the item, RecordSegment of item and user; the
// 'b' stays from when segments were called buckets), so one segment is one
// contiguous key range that anti-entropy can page through. The store
// keeps a digest per segment (XOR of entry hashes), updated on every commit.
//
//	b<B>/v/l/<item>/<replica>  crdt.PN     likes vector entry of one replica
//	b<B>/v/c/<key>/<replica>   crdt.PN     counter vector entry of one replica
//	b<B>/v/L/<item>#<w>.<start>.<keep>/<replica>
//	                           crdt.PN     a slot of an item's likes (crdt.Slot);
//	                                       <B> hashes only the item, so a series is one range
//	b<B>/v/C/<key>#.../<replica> crdt.PN   a slot of a counter
//	b<B>/r/<item>/<user>       LikeRecord  one user's like record
//	b<B>/k/<key>/<idem>        KeyedRecord a keyed record: one idempotency key of a counter
//	b<B>/k/~<key>/<idem>       Spend       one idempotency key of a budget's spends
//	                                       (crdt.SpendName)
//	b<B>/f/<user>              crdt.Flag   a user's block flag; <B> is FlagSegment(user), and
//	                                       the store keeps every flag in memory too
//	b<B>/t/<name>              TypeMeta    an event type's metadata; <B> is TypeSegment(name),
//	                                       and the store keeps every type in memory too
//	x/<item>/<user>            (empty)     like record whose excess is not yet zero
//	w/<key>/<idem>             (empty)     keyed record (or spend, ~<key>) whose excess is not yet zero
//	e/<16 hex ms>/<key>/<idem> (empty)     a keyed record (or spend, ~<key>) by its register's wall
//	                                       time, for expiry
//	u/<16 hex ms>/<kind>/<slot>   (empty)  a slot by its expiry, for the sweeper
//	i/<key>/<idem>             IdemValue   an older version's per-replica idempotency key,
//	                                       converted to a keyed record at open
//	y/<item>/<user>            uvarint     the like index: HLC of a liked pair, by item
//	z/<user>/<item>            uvarint     the same, by user
//	q/<sequence>/<16 hex ord>  CountedLike a counted event waiting for its numbers
//	l/<sequence>/<16 hex n>    CountedLike the event that took numbers from n, until their ranks are known
//	n/<sequence>/<16 hex n>    CountedLike a milestone claim intent, settled once claimed
//	g/<16 hex seq>             events      the event log: a chunk of up to LogChunk events of one commit
//	h/<item>/<user>/<16 hex seq> action    a like or unlike this replica accepted (the like history)
//	m/<name>                   bytes       replica metadata: replica, region,
//	                                       accepted-writes, hlc-max, seq/<sequence>,
//	                                       log-id, log-published
//
// Remote entries are stored as absolute values and merged by max before they
// are written; nothing is ever stored as a sum of deltas.
package storage
