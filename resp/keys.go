package resp

import (
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/tidwall/redcon"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/shard"
)

// The keyspace as Redis clients see it. A key may name three things:
// likes:<item> is a set (the item's likers), any other key a counter
// and a unique count, which are separate spaces (INCR x and PFADD x
// touch different things). A key exists if it was ever written and, for
// a set, has members: a counter once incremented exists even at 0, as a
// Redis string "0" would; a set whose likers all unliked is empty, and
// Redis has no empty sets.

// keyKind is what a key names here: "set", "string" (a counter or a
// unique count) or "none".
func (s *Server) keyKind(key string) (string, error) {
	if item, ok := strings.CutPrefix(key, LikesPrefix); ok {
		if err := frontdoor.CheckID("item", item); err != nil {
			return "", err
		}
		var n int64
		for _, name := range s.cfg.Hot.Names(item) {
			rd, err := s.rep.Likes().Count(name)
			if err != nil {
				return "", err
			}
			n += rd.Value
		}
		if n > 0 {
			return "set", nil
		}
		return "none", nil
	}
	if err := frontdoor.CheckID("key", key); err != nil {
		return "", err
	}
	if ok, err := s.counterExists(key); err != nil || ok {
		return "string", err
	}
	u, err := s.rep.Uniques().Read([]string{key})
	if err != nil {
		return "", err
	}
	if len(u.Replicas) > 0 {
		return "string", nil
	}
	return "none", nil
}

// counterExists reports whether any replica ever incremented the
// counter key, as this replica knows it.
func (s *Server) counterExists(key string) (bool, error) {
	rd, err := s.rep.Counters().Get(key)
	return len(rd.Vector) > 0, err
}

// heldHere refuses a key command (EXISTS, TYPE) whose key is on a shard
// this replica does not hold, in a sharded region: these commands are
// answered where they arrive, never forwarded.
func (s *Server) heldHere(key string) error {
	if s.cfg.Shards == nil {
		return nil
	}
	names := []string{key}
	if item, ok := strings.CutPrefix(key, LikesPrefix); ok {
		names = s.cfg.Hot.Names(item)
	}
	for _, n := range names {
		if sh := shard.Of(n); !s.cfg.Shards.Holds(sh) {
			return errorf(frontdoor.CodeShardNotHeld, "key %s is on shard %d, which this replica does not hold; "+
				"EXISTS and TYPE are answered only by a holder: send them to one (GET /v1/shards)", quote(key), sh)
		}
	}
	return nil
}

// EXISTS key [key ...]: how many of the keys exist, a key named twice
// counted twice, as Redis counts.
func cmdExists(s *Server, c redcon.Conn, _ *session, args [][]byte) error {
	if len(args) > MaxKeysPerCommand {
		return errorf(frontdoor.CodeBadRequest, "%d keys in one EXISTS; at most %d", len(args), MaxKeysPerCommand)
	}
	n := 0
	for _, a := range args {
		if err := s.heldHere(string(a)); err != nil {
			return err
		}
		kind, err := s.keyKind(string(a))
		if err != nil {
			return err
		}
		if kind != "none" {
			n++
		}
	}
	c.WriteInt(n)
	return nil
}

// TYPE key: set, string or none.
func cmdType(s *Server, c redcon.Conn, _ *session, args [][]byte) error {
	if err := s.heldHere(string(args[0])); err != nil {
		return err
	}
	kind, err := s.keyKind(string(args[0]))
	if err != nil {
		return err
	}
	c.WriteString(kind)
	return nil
}

// SCAN lists the counters, then the sets, by pages of the replica's
// store: each page reads COUNT keys or scanSegments of the store's
// segments, whichever comes first, so a page may be empty before the
// end, as in Redis. Unique counts are not listed: their sketches are
// stored by page, with no per-key entry to list, so SCAN and DBSIZE
// see counters and sets only.
const scanSegments = 256

// scanPhase is a kind of key SCAN lists, and TYPE's name of its keys.
type scanPhase struct {
	kind region.Kind
	typ  string
}

// scanPhases are what SCAN lists, in order.
func scanPhases() [2]scanPhase {
	return [2]scanPhase{{region.KindCounters, "string"}, {region.KindLikes, "set"}}
}

// scanKey is the key an item of phase p is listed as, "" for none: a
// set without members, a part of a split item other than the first one
// written (which stands for the item).
func (s *Server) scanKey(p int, item string, v crdt.Vector) (string, error) {
	counters := scanPhases()[p].kind == region.KindCounters
	if base, k, ok := crdt.SplitPart(item); ok && !counters {
		if s.cfg.Hot.Parts(base) == 0 {
			return "", nil
		}
		for j := range k { // listed at its first part written
			rd, err := s.rep.Likes().Count(crdt.PartName(base, j))
			if err != nil || len(rd.Vector) > 0 {
				return "", err
			}
		}
		kind, err := s.keyKind(LikesPrefix + base)
		if err != nil || kind == "none" {
			return "", err
		}
		return LikesPrefix + base, nil
	}
	switch {
	case !crdt.ValidID(item): // no key of a client's (a part of a counter)
		return "", nil
	case counters:
		return item, nil
	case v.Value() <= 0:
		return "", nil
	}
	return LikesPrefix + item, nil
}

// errScanSharded refuses SCAN and DBSIZE in a sharded region, where the
// keyspace is spread over the region's replicas.
func (s *Server) errScanSharded(name string) error {
	if s.cfg.Shards == nil {
		return nil
	}
	return errorf(frontdoor.CodeBadRequest, "%s is not served in a sharded region: each replica holds some shards' keys only, "+
		"so no one replica can list or count them all", strings.ToUpper(name))
}

// SCAN cursor [MATCH pattern] [COUNT n] [TYPE string|set]: one page of
// keys, [next cursor, [keys]], the cursor "0" after the last page. The
// cursor is opaque and remembered by this replica, as SSCAN's.
func cmdKeyScan(s *Server, c redcon.Conn, _ *session, args [][]byte) error {
	if err := s.errScanSharded("scan"); err != nil {
		return err
	}
	sa, err := parseScanArgs("SCAN", args[0], args[1:], true)
	if err != nil {
		return err
	}
	cur, count, match, typ := sa.cursor, sa.count, sa.match, sa.typ
	phase, seg, after := 0, 0, ""
	if cur != 0 {
		at, ok := s.cursors.get(cur, "") // "<phase> <segment> <after>"
		if f := strings.SplitN(at, " ", 3); ok && len(f) == 3 {
			phase, _ = strconv.Atoi(f[0])
			seg, _ = strconv.Atoi(f[1])
			after = f[2]
		} else {
			return errorf(frontdoor.CodeBadRequest, "cursor %d is unknown here: a replica remembers the cursors it gave out (its last %d); scan again from 0", cur, MaxCursors)
		}
	}
	phases := scanPhases()
	// skip passes the phases whose keys TYPE does not want.
	skip := func() {
		for phase < len(phases) && typ != "" && typ != phases[phase].typ {
			phase, seg, after = phase+1, 0, ""
		}
	}
	var keys []string
	read, segs := 0, 0
	for skip(); phase < len(phases) && read < count && segs < scanSegments; skip() {
		var ferr error
		from := seg
		seg, after, err = s.rep.ScanItems(phases[phase].kind, seg, after, scanSegments-segs, func(item string, v crdt.Vector) bool {
			read++
			key, err := s.scanKey(phase, item, v)
			if err != nil {
				ferr = err
				return false
			}
			if ok, _ := path.Match(match, key); key != "" && (match == "" || ok) {
				keys = append(keys, key)
			}
			return read < count
		})
		if err == nil {
			err = ferr
		}
		if err != nil {
			return err
		}
		segs += max(seg-from, 1) // the segments read, or the one it stopped in
		if seg >= region.Segments {
			phase, seg, after = phase+1, 0, ""
		}
	}
	next := uint64(0)
	if phase < len(phases) {
		next = s.cursors.put("", fmt.Sprintf("%d %d %s", phase, seg, after))
	}
	c.WriteArray(2)
	c.WriteBulkString(strconv.FormatUint(next, 10))
	c.WriteArray(len(keys))
	for _, k := range keys {
		c.WriteBulkString(k)
	}
	return nil
}

// DBSIZE: the counters and sets of this replica. There is no count kept:
// it reads every key, so its cost grows with the keyspace (Redis's is
// constant); unique counts are not counted (see SCAN).
func cmdDBSize(s *Server, c redcon.Conn, _ *session, _ [][]byte) error {
	if err := s.errScanSharded("dbsize"); err != nil {
		return err
	}
	n := int64(0)
	for p, ph := range scanPhases() {
		var ferr error
		_, _, err := s.rep.ScanItems(ph.kind, 0, "", region.Segments, func(item string, v crdt.Vector) bool {
			key, err := s.scanKey(p, item, v)
			if err != nil {
				ferr = err
				return false
			}
			if key != "" {
				n++
			}
			return true
		})
		if err == nil {
			err = ferr
		}
		if err != nil {
			return err
		}
	}
	c.WriteInt64(n)
	return nil
}

// scanArgs are a SCAN's or SSCAN's cursor and options.
type scanArgs struct {
	cursor     uint64
	count      int
	match, typ string
}

// parseScanArgs reads a scan's cursor and its MATCH and COUNT options,
// and TYPE where withType (SCAN): one parser for both commands.
func parseScanArgs(name string, cursor []byte, opts [][]byte, withType bool) (scanArgs, error) {
	cur, err := strconv.ParseUint(string(cursor), 10, 64)
	if err != nil {
		return scanArgs{}, errorf(frontdoor.CodeBadRequest, "invalid cursor")
	}
	sa := scanArgs{cursor: cur, count: DefaultScanCount}
	for ; len(opts) > 0; opts = opts[2:] {
		if len(opts) < 2 {
			return scanArgs{}, errorf(frontdoor.CodeBadRequest, "syntax error")
		}
		switch o := strings.ToLower(string(opts[0])); {
		case o == "count":
			n, err := strconv.Atoi(string(opts[1]))
			if err != nil || n < 1 {
				return scanArgs{}, errorf(frontdoor.CodeBadRequest, "syntax error: COUNT wants a whole number >= 1")
			}
			sa.count = min(n, MaxScanCount)
		case o == "match":
			sa.match = string(opts[1])
			if _, err := path.Match(sa.match, ""); err != nil {
				return scanArgs{}, errorf(frontdoor.CodeBadRequest, "MATCH pattern %s is malformed", quote(sa.match))
			}
		case o == "type" && withType:
			sa.typ = strings.ToLower(string(opts[1]))
		case withType:
			return scanArgs{}, errorf(frontdoor.CodeBadRequest, "syntax error: %s takes MATCH, COUNT and TYPE", name)
		default:
			return scanArgs{}, errorf(frontdoor.CodeBadRequest, "syntax error: %s takes MATCH and COUNT", name)
		}
	}
	return sa, nil
}
