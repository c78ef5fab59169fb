package storage

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/shard"
)

// Registers (crdt.Register): the admin-written, globally replicated
// last-writer-wins registers, block flags (prefix 'f', by user) and event
// types (prefix 't', by name). Each is stored under b<B>/<prefix>/<name>
// in the anti-entropy segment RegisterSegment(prefix, name), so the
// digests and pages cover them like any replicated key. They are few (an
// admin writes them), so the store also keeps every committed one in
// memory: the writer asks for a user's flag on every like and for a key's
// type on every write, and a Pebble lookup there would cost more than the
// write.

// The key prefixes of the two kinds of register.
const (
	prefixFlag = 'f'
	prefixType = 't'
)

// RegisterSegment is the anti-entropy segment of the register name of the
// kind prefix: one of the global shard's, since every replica holds every
// register (the keys they bear on may be on any shard).
func RegisterSegment(prefix byte, name string) int {
	h := fnv32a(fnv32Offset, []byte{prefix, '/'})
	return shard.Global*SegmentsPerShard + int(fnv32a(h, name)%SegmentsPerShard)
}

// registers is the in-memory copy of one kind of register: every
// committed one, by name.
type registers[V crdt.RegisterValue[V]] struct {
	prefix byte
	what   string // names the kind in errors
	mu     sync.RWMutex
	all    map[string]crdt.Register[V] // protected by mu
	n      atomic.Int64                // len(all), read without mu
}

func newRegisters[V crdt.RegisterValue[V]](prefix byte, what string) *registers[V] {
	return &registers[V]{prefix: prefix, what: what, all: make(map[string]crdt.Register[V])}
}

func (rs *registers[V]) appendKey(dst []byte, name string) []byte {
	dst = appendSegmentPrefix(dst, RegisterSegment(rs.prefix, name))
	dst = append(dst, rs.prefix, '/')
	return append(dst, name...)
}

// get returns a committed register (ok false if it was never written). It
// reads memory only.
func (rs *registers[V]) get(name string) (crdt.Register[V], bool) {
	if rs.n.Load() == 0 { // the common case: none ever written
		return crdt.Register[V]{}, false
	}
	rs.mu.RLock()
	defer rs.mu.RUnlock()
	r, ok := rs.all[name]
	return r, ok
}

// list returns up to limit committed registers that keep accepts, in name
// order, after the name after ("" from the first). more reports whether
// any follow.
func (rs *registers[V]) list(after string, limit int, keep func(crdt.Register[V]) bool) (names []string, regs []crdt.Register[V], more bool) {
	rs.mu.RLock()
	for n, r := range rs.all {
		if n > after && keep(r) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	if len(names) > limit {
		names, more = names[:limit], true
	}
	regs = make([]crdt.Register[V], len(names))
	for i, n := range names {
		regs[i] = rs.all[n]
	}
	rs.mu.RUnlock()
	return names, regs, more
}

// load takes a stored register into memory (the open-time scan).
func (rs *registers[V]) load(key, val []byte) error {
	r, err := crdt.DecodeRegister[V](val)
	if err != nil {
		return fmt.Errorf("%s %q: %w", rs.what, key, err)
	}
	rs.all[string(key[7:])] = r // "b<B>/<prefix>/<name>"
	rs.n.Store(int64(len(rs.all)))
	return nil
}

// publish takes a committed batch's registers into memory.
func (rs *registers[V]) publish(written map[string]crdt.Register[V]) {
	if len(written) == 0 {
		return
	}
	rs.mu.Lock()
	for n, r := range written {
		rs.all[n] = r
	}
	rs.n.Store(int64(len(rs.all)))
	rs.mu.Unlock()
}

// putRegister writes a register of the kind rs into b, replacing old (the
// zero register if none), and notes it in written (the batch's map of
// that kind) for Commit to publish.
func putRegister[V crdt.RegisterValue[V]](b *Batch, rs *registers[V], written *map[string]crdt.Register[V], name string, old, r crdt.Register[V]) {
	b.kbuf = rs.appendKey(b.kbuf[:0], name)
	var oldb []byte
	if !old.IsZero() {
		b.obuf = crdt.AppendRegister(b.obuf[:0], old)
		oldb = b.obuf
	}
	b.buf = crdt.AppendRegister(b.buf[:0], r)
	b.digest(b.kbuf, oldb, b.buf)
	_ = b.b.Set(b.kbuf, b.buf, nil)
	if *written == nil {
		*written = make(map[string]crdt.Register[V])
	}
	(*written)[name] = r
}
