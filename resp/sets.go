package resp

import (
	"container/list"
	"hash/maphash"
	"path"
	"strconv"
	"sync"

	"github.com/tidwall/redcon"

	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/route"
)

// The members of a set likes:<item> are the item's likers, read from the
// replica's like index: SMEMBERS answers a whole set up to
// region.MaxAllLikers, SSCAN any set by page.

// SSCAN's COUNT: its default, and the most one page reads.
const (
	DefaultScanCount = 10
	MaxScanCount     = region.MaxListLimit
)

// MaxCursors bounds the SSCAN cursors a Server remembers.
const MaxCursors = 16384

// errSplitMembers refuses to list a split item's members: its parts'
// lists would have to be merged.
func errSplitMembers(item string) error {
	return errorf(frontdoor.CodeBadRequest, "%s is split into parts (hot): list its likers over HTTP, GET /v1/likers/%s, which merges the parts", quote(item), item)
}

// SMEMBERS likes:<item>: every liker, refused above region.MaxAllLikers.
func cmdMembers(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	item, err := likesItem(args[0])
	if err != nil {
		return err
	}
	if s.cfg.Hot.Parts(item) > 0 {
		return errSplitMembers(item)
	}
	rs, err := s.read(item, []route.Op{{Kind: route.OpAllLikers, Key: item, By: region.MaxAllLikers}})
	if err != nil {
		return err
	}
	users := rs[0].Users
	if rs[0].More {
		return errorf(frontdoor.CodeBadRequest, "%s has more than %d members, the most SMEMBERS answers; read them with SSCAN %s <cursor> [COUNT n]",
			quote(string(args[0])), region.MaxAllLikers, quote(string(args[0])))
	}
	sess.writeSetLen(c, len(users))
	for _, u := range users {
		c.WriteBulkString(u)
	}
	return nil
}

// SSCAN likes:<item> cursor [MATCH pattern] [COUNT n]: one page of
// likers in id order, as Redis answers it: [next cursor, [members]], the
// cursor "0" after the last page. COUNT is how many likers the page reads
// (default 10, at most 1000); MATCH filters those, so a page may be
// empty before the end. The cursor is opaque: the Server remembers where
// each one it gave out stopped (its last MaxCursors), so a scan resumes
// on any connection to the same replica (the one the client is connected
// to, wherever the item's likers are read); any other cursor is refused.
// As in Redis, a user who likes the item throughout a scan is listed, one
// who likes or unlikes it meanwhile may or may not be.
func cmdScan(s *Server, c redcon.Conn, _ *session, args [][]byte) error {
	item, err := likesItem(args[0])
	if err != nil {
		return err
	}
	if s.cfg.Hot.Parts(item) > 0 {
		return errSplitMembers(item)
	}
	sa, err := parseScanArgs("SSCAN", args[1], args[2:], false)
	if err != nil {
		return err
	}
	cur, count, match := sa.cursor, sa.count, sa.match
	after := ""
	if cur != 0 {
		var ok bool
		if after, ok = s.cursors.get(cur, item); !ok {
			return errorf(frontdoor.CodeBadRequest, "cursor %d is unknown here: a replica remembers the cursors it gave out (its last %d) "+
				"for the key they scan; scan again from 0", cur, MaxCursors)
		}
	}
	rs, err := s.read(item, []route.Op{{Kind: route.OpLikers, Key: item, User: after, By: int64(count)}})
	if err != nil {
		return err
	}
	page := rs[0].Users
	next := uint64(0)
	if rs[0].More && len(page) > 0 {
		next = s.cursors.put(item, page[len(page)-1])
	}
	users := make([]string, 0, len(page))
	for _, u := range page {
		if ok, _ := path.Match(match, u); match == "" || ok {
			users = append(users, u)
		}
	}
	c.WriteArray(2)
	c.WriteBulkString(strconv.FormatUint(next, 10))
	c.WriteArray(len(users))
	for _, u := range users {
		c.WriteBulkString(u)
	}
	return nil
}

// cursors remember where each SSCAN page stopped, under the cursor it
// answered, the least recently used forgotten past max. A cursor is a
// seeded hash of the item and the last user listed, so a retried page
// gives the same next cursor and takes no second entry.
type cursors struct {
	seed maphash.Seed
	max  int

	mu  sync.Mutex
	m   map[uint64]*list.Element // of *cursor
	lru list.List                // most recently used first
}

type cursor struct {
	id          uint64
	item, after string
}

func newCursors(limit int) *cursors {
	return &cursors{seed: maphash.MakeSeed(), max: limit, m: map[uint64]*list.Element{}}
}

// put remembers that a scan of item stopped after user after, and returns
// its cursor (never 0, the start and end of a scan).
func (cs *cursors) put(item, after string) uint64 {
	var h maphash.Hash
	h.SetSeed(cs.seed)
	h.WriteString(item)
	h.WriteByte(0)
	h.WriteString(after)
	id := max(h.Sum64()>>1, 1) // within int64 for clients that parse it signed
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if e, ok := cs.m[id]; ok {
		e.Value = &cursor{id: id, item: item, after: after}
		cs.lru.MoveToFront(e)
		return id
	}
	cs.m[id] = cs.lru.PushFront(&cursor{id: id, item: item, after: after})
	for len(cs.m) > cs.max {
		old := cs.lru.Back()
		delete(cs.m, cs.lru.Remove(old).(*cursor).id)
	}
	return id
}

// get is where the scan of item under cursor id stopped; ok is false for
// a cursor forgotten, never given, or given for another item.
func (cs *cursors) get(id uint64, item string) (after string, ok bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	e, ok := cs.m[id]
	if !ok {
		return "", false
	}
	c := e.Value.(*cursor)
	if c.item != item {
		return "", false
	}
	cs.lru.MoveToFront(e)
	return c.after, true
}
