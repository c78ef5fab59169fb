package resp

import (
	"context"
	"errors"
	"strings"

	"github.com/tidwall/redcon"

	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/route"
	"github.com/tally-dev/tally/shard"
)

// Shards is a sharded region's routing for RESP (node implements it over
// NATS, as it does httpapi.Shards). A command is parsed, checked and
// authenticated here, at the entry replica; only its typed operations
// travel, never its RESP bytes, its client's role or token.
type Shards interface {
	// Holds reports whether this replica holds shard s.
	Holds(s int) bool
	// Apply runs ops, all of keys on shard s, at a holder of s, sent
	// typed, and returns their results in order. An error wrapping
	// route.ErrNoHolder: nothing was applied; any other: maybe applied.
	Apply(ctx context.Context, s int, ops []region.Op) ([]region.Result, error)
	// Read answers reads (route.OpKind.Read), all of keys on shard s, at
	// a holder of s, as route.Read answers them here.
	Read(ctx context.Context, s int, ops []route.Op) ([]route.Result, error)
}

// In a sharded region a command of keys on a shard this replica does not
// hold is run at a holder, as an HTTP request of one key is: its writes
// (Shards.Apply) or reads (Shards.Read) go typed to a holder, once, and
// the reply is rendered here from their results, as the command renders
// its own replica's. A command of several keys (MGET, PFCOUNT) reads each
// shard's keys at a holder of it; any other command whose keys are on
// several shards not all held here is refused with CROSSSLOT, as Redis
// Cluster refuses keys of several hash slots.

// keyShards are the shards of a command's keys; nil for a command
// without keys, or whose keys do not parse (its own checks answer). A
// set command of an item split into parts (Config.Hot) has the shards of
// its users' parts (SADD, SREM, SISMEMBER) or of every part.
func keyShards(hot shard.Hot, name string, args [][]byte) []int {
	var names []string
	switch name {
	case "incr", "decr", "incrby", "decrby", "get", "pfadd":
		if len(args) > 1 {
			names = []string{string(args[1])}
		}
	case "sadd", "srem", "stoggle", "sismember", "scard", "smembers", "sscan":
		if len(args) > 1 {
			item, ok := strings.CutPrefix(string(args[1]), LikesPrefix)
			if !ok {
				return nil
			}
			names = []string{item}
			if hot.Parts(item) > 0 {
				names = names[:0]
				switch name {
				case "sadd", "srem", "sismember":
					for _, u := range args[2:] {
						names = append(names, hot.Name(item, string(u)))
					}
				case "stoggle": // one user, then its idempotency key
					if len(args) > 2 {
						names = append(names, hot.Name(item, string(args[2])))
					}
				default:
					names = hot.Names(item)
				}
			}
		}
	case "mget", "pfcount":
		for _, a := range args[1:] {
			names = append(names, string(a))
		}
	}
	var out []int
	for _, n := range names {
		out = append(out, shard.Of(n))
	}
	return out
}

// spread is where route sends a read of keys on several shards, or on
// one not held here (MGET), or on several (PFCOUNT): spreadRead.
const spread = -2

// route says where cmd runs: here (-1, its handler sending its keys'
// operations to a holder of their one shard when it is not held here,
// at), or spread over the holders of several shards; or refused.
func (s *Server) route(name string, args [][]byte) (int, error) {
	if s.cfg.Shards == nil {
		return -1, nil
	}
	shards := keyShards(s.cfg.Hot, name, args)
	held, one := true, true
	for _, sh := range shards {
		held = held && s.cfg.Shards.Holds(sh)
		one = one && sh == shards[0]
	}
	switch {
	case held:
		return -1, nil
	case name == "mget":
		return spread, nil
	case one:
		return -1, nil
	case name == "pfcount" && s.cfg.Union != nil:
		return spread, nil
	}
	msg := "keys of several shards, not all held by this replica: send one key per command"
	if name != "mget" && name != "pfcount" {
		msg = "a set of an item split into parts (hot) on several shards, not all held by this replica: " +
			"send one user per SADD/SREM, and read its count or members over HTTP (GET /v1/likes/{item}, /v1/likers/{item}), which gathers the parts"
	}
	return 0, &replyError{prefix: "CROSSSLOT", code: frontdoor.CodeShardNotHeld, msg: msg}
}

// at is the shard a holder of which runs operations of key name: -1 when
// this replica does (unsharded, or holding it).
func (s *Server) at(name string) int {
	if s.cfg.Shards == nil {
		return -1
	}
	if sh := shard.Of(name); !s.cfg.Shards.Holds(sh) {
		return sh
	}
	return -1
}

// commit runs a write's ops, all of keys on one shard (route), with this
// replica's writer when it holds the shard, else at a holder of it.
func (s *Server) commit(ctx context.Context, ops []region.Op) ([]region.Result, error) {
	sh := -1
	if len(ops) > 0 {
		sh = s.at(ops[0].Item)
	}
	if sh < 0 {
		return s.rep.Do(ctx, ops)
	}
	res, err := s.cfg.Shards.Apply(ctx, sh, ops)
	if err != nil {
		return nil, forwardError(sh, err)
	}
	return res, nil
}

// read answers reads (route.OpKind.Read) of keys on shard of name, here
// when this replica holds it, else at a holder of it.
func (s *Server) read(name string, ops []route.Op) ([]route.Result, error) {
	return s.readAt(s.at(name), ops)
}

// readAt answers reads of keys on shard sh at a holder of it, or here
// (sh -1).
func (s *Server) readAt(sh int, ops []route.Op) ([]route.Result, error) {
	if sh < 0 {
		return route.Read(s.rep, ops)
	}
	ctx, cancel := s.writeCtx()
	defer cancel()
	rs, err := s.cfg.Shards.Read(ctx, sh, ops)
	switch {
	case err != nil && frontdoor.Known(err) != nil:
		return nil, err // the holder's answer: a bad key, a read it refused
	case err != nil:
		return nil, forwardError(sh, err)
	case len(rs) != len(ops):
		return nil, errorf(frontdoor.CodeInternal, "the holder of shard %d answered %d reads with %d results", sh, len(ops), len(rs))
	}
	return rs, nil
}

// spreadRead answers a read of keys on several shards (route's spread).
func (s *Server) spreadRead(c redcon.Conn, sess *session, name string, cmd redcon.Command) error {
	if name == "pfcount" {
		keys, err := uniqueKeys(cmd.Args[1:])
		if err != nil {
			return err
		}
		ctx, cancel := s.writeCtx()
		defer cancel()
		u, err := s.cfg.Union(ctx, keys)
		if err != nil {
			return err
		}
		if u.Partial {
			return errorf(frontdoor.CodeShardUnavailable, "no replica holding %d of the keys' shards answered: the union would count short", u.MissingShards)
		}
		c.WriteInt64(u.Estimate)
		return nil
	}
	return s.mgetSpread(c, sess, cmd.Args[1:])
}

// mgetSpread is MGET of keys on shards not all held here: the keys of
// each shard not held here read at a holder of that shard in one
// request, those held here read here, all at once; the values are
// answered in the keys' order.
func (s *Server) mgetSpread(c redcon.Conn, sess *session, keys [][]byte) error {
	if len(keys) > MaxKeysPerCommand {
		return errorf(frontdoor.CodeBadRequest, "%d keys in one MGET; at most %d", len(keys), MaxKeysPerCommand)
	}
	byShard := map[int][]int{} // shard (-1: held here) -> indexes of its keys
	for i, k := range keys {
		key, err := counterKey(k)
		if err != nil {
			return err
		}
		sh := s.at(key)
		byShard[sh] = append(byShard[sh], i)
	}
	values := make([]route.Result, len(keys))
	errs := make(chan error, len(byShard))
	for sh, idx := range byShard {
		ops := make([]route.Op, len(idx))
		for j, i := range idx {
			ops[j] = route.Op{Kind: route.OpGet, Key: string(keys[i])}
		}
		go func() {
			rs, err := s.readAt(sh, ops)
			if err == nil {
				for j, i := range idx {
					values[i] = rs[j]
				}
			}
			errs <- err
		}()
	}
	var first error
	for range byShard {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return first
	}
	writeCounters(c, sess, values)
	return nil
}

// forwardError is the answer to a command a holder did not take.
func forwardError(sh int, err error) error {
	if errors.Is(err, route.ErrNoHolder) {
		return errorf(frontdoor.CodeShardUnavailable, "no replica of this region holding shard %d is up; nothing was applied", sh)
	}
	return errorf(frontdoor.CodeTimeout, "the replica holding shard %d did not answer in time: a write may or may not have applied (%v)", sh, err)
}

// here reports whether a command's keys are all on shards this replica
// holds, so a pipelined write may join a run committed together with
// this replica's writer, and a transaction may queue it.
func (s *Server) here(cmd redcon.Command) bool {
	if s.cfg.Shards == nil {
		return true
	}
	for _, sh := range keyShards(s.cfg.Hot, commandName(cmd), cmd.Args) {
		if !s.cfg.Shards.Holds(sh) {
			return false
		}
	}
	return true
}
