package region

import (
	"hash/maphash"
	"sync"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

type vkey struct {
	kind storage.Kind
	item string
}

const cacheShards = 64

// cache holds committed vectors of hot items. Only the writer goroutine
// inserts, replaces or evicts, always after a commit, so a value in the cache
// is never older than what the writer last committed for that item.
type cache struct {
	seed   maphash.Seed
	limit  int // per shard
	shards [cacheShards]cacheShard
}

type cacheShard struct {
	mu sync.RWMutex // protects m
	m  map[vkey]crdt.Vector
}

func newCache(items int) *cache {
	c := &cache{seed: maphash.MakeSeed(), limit: max(1, items/cacheShards)}
	for i := range c.shards {
		c.shards[i].m = make(map[vkey]crdt.Vector)
	}
	return c
}

func (c *cache) shard(k vkey) *cacheShard {
	return &c.shards[maphash.String(c.seed, k.item)%cacheShards]
}

// get returns a private copy of the cached vector.
func (c *cache) get(k vkey) (crdt.Vector, bool) {
	s := c.shard(k)
	s.mu.RLock()
	v, ok := s.m[k]
	if ok {
		v = v.Clone()
	}
	s.mu.RUnlock()
	return v, ok
}

// peek returns the cached vector itself, for the writer, which is the only
// goroutine that changes cached vectors and so may read them without a copy.
func (c *cache) peek(k vkey) (crdt.Vector, bool) {
	s := c.shard(k)
	s.mu.RLock()
	v, ok := s.m[k]
	s.mu.RUnlock()
	return v, ok
}

// put stores v (which the cache now owns), evicting arbitrary other entries
// of the shard if it is full. Writer only.
func (c *cache) put(k vkey, v crdt.Vector) {
	s := c.shard(k)
	s.mu.Lock()
	if _, ok := s.m[k]; !ok && len(s.m) >= c.limit {
		for old := range s.m { // map order is random enough for eviction
			delete(s.m, old)
			if len(s.m) < c.limit {
				break
			}
		}
	}
	s.m[k] = v
	s.mu.Unlock()
}

// dropIf evicts every entry whose key matches. Writer only.
func (c *cache) dropIf(match func(vkey) bool) {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		for k := range sh.m {
			if match(k) {
				delete(sh.m, k)
			}
		}
		sh.mu.Unlock()
	}
}

// len is how many vectors the cache holds: at most max(1,
// items/cacheShards) per shard, so at most Config.CacheItems once that is
// cacheShards or more.
func (c *cache) len() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.RLock()
		n += len(sh.m)
		sh.mu.RUnlock()
	}
	return n
}
