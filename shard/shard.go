// Package shard says which shard a key lives on and which replicas of a
// region hold each shard: the shard function, and the region's shard map
// with its assignment (every shard held by Copies replicas). It is pure:
// no I/O, clock or logging; the map is kept in JetStream KV by node.
//
// A deployment has Count shards, fixed at build time (as Redis Cluster's
// 16,384 hash slots are). Every key hashes to one shard by its base key
// (crdt.BaseKey: a slot or budget inbox lives with its key), so a like
// record and its item's vector entries share a shard and dedup and count
// stay one atomic commit. Counters and their idempotency keys, windows,
// sketches, budgets and their spends hash by their key the same way.
//
// One shard, Global, is held by every replica of every region: the block
// flags (a user's flag must be seen by every shard holding the user's
// likes) and the family totals (slots of the empty key, written by every
// like of any item).
package shard

import (
	"strings"

	"github.com/tally-dev/tally/crdt"
)

// Count is how many shards the key space is cut into; shard numbers are
// 0..Count-1, Global among them.
const Count = 1024

// Global is the shard every replica holds.
const Global = Count - 1

// keyed is how many shards keys hash over: every shard but Global.
const keyed = Count - 1

// FlagItem is the record item a block flag travels under (region's
// BlockRecordItem); its records live on Global.
const FlagItem = "!"

// TypeItem is the record item an event type's metadata travels under
// (region's TypeRecordItem); its records live on Global.
const TypeItem = "!t"

// Of returns the shard of a vector or record name: a like's item, a
// counter's key, a slot ("<key>#..."), a budget inbox ("<key>~<to>"), a
// spend ("~<key>"), a sketch's name. Names whose base key is empty (family
// totals), FlagItem or TypeItem live on Global.
func Of(name string) int {
	name = strings.TrimPrefix(name, "~") // a spend: crdt.SpendName
	base := crdt.BaseKey(name)
	if base == "" || base == FlagItem || base == TypeItem {
		return Global
	}
	return int(Hash(base) % keyed)
}

// Hash is 32-bit FNV-1a, written out so that hashing allocates nothing.
// Every replica must shard keys identically: it must keep computing
// exactly FNV-1a.
func Hash(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}
