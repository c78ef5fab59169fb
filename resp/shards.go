package resp

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/tidwall/redcon"

	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/route"
	"github.com/tally-dev/tally/shard"
)

// Shards is a sharded region's routing for RESP (node implements it over
// NATS, as it does httpapi.Shards).
type Shards interface {
	// Holds reports whether this replica holds shard s.
	Holds(s int) bool
	// Forward runs a command (its arguments, name first) at a holder of
	// shard s in this region, for a client whose AUTH opened role here
	// (its token stays here) and who speaks protocol version proto, and
	// returns the holder's reply as RESP bytes.
	Forward(ctx context.Context, s int, args [][]byte, role route.Role, proto int) ([]byte, error)
}

// In a sharded region a command goes to a holder of its key's shard, as
// an HTTP request does: a replica not holding it forwards the command
// once and writes the holder's reply as it came. A command of several
// keys (MGET, PFCOUNT) runs where all its keys' shards are held, at a
// holder of their one shard, or is refused with CROSSSLOT, as Redis
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

// spread is where route sends a read of keys on several shards not all
// held here (MGET, PFCOUNT): every shard's part asked of a holder, and
// the answers put together (spreadRead).
const spread = -2

// route says where cmd runs: here (-1), forwarded to a holder of shard s,
// or spread over the holders of several shards; or refused.
func (s *Server) route(sess *session, name string, args [][]byte) (int, error) {
	if s.cfg.Shards == nil || sess.forwarded {
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
	case one:
		return shards[0], nil
	case name == "mget" || name == "pfcount" && s.cfg.Union != nil:
		return spread, nil
	}
	msg := "keys of several shards, not all held by this replica: send one key per command"
	if name != "mget" && name != "pfcount" {
		msg = "a set of an item split into parts (hot) on several shards, not all held by this replica: " +
			"send one user per SADD/SREM, and read its count or members over HTTP (GET /v1/likes/{item}, /v1/likers/{item}), which gathers the parts"
	}
	return 0, &replyError{prefix: "CROSSSLOT", code: frontdoor.CodeShardNotHeld, msg: msg}
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

// mgetSpread is MGET of keys on several shards: the keys of each shard
// not held here in one MGET to a holder of that shard, those held here
// read here, all at once; the values are answered in the keys' order.
func (s *Server) mgetSpread(c redcon.Conn, sess *session, keys [][]byte) error {
	if len(keys) > region.MaxUniqueKeys {
		return errorf(frontdoor.CodeBadRequest, "%d keys in one MGET; at most %d", len(keys), region.MaxUniqueKeys)
	}
	byShard := map[int][]int{} // shard (-1: held here) -> indexes of its keys
	for i, k := range keys {
		if _, err := counterKey(k); err != nil {
			return err
		}
		sh := shard.Of(string(k))
		if s.cfg.Shards.Holds(sh) {
			sh = -1
		}
		byShard[sh] = append(byShard[sh], i)
	}
	values := make([][]byte, len(keys)) // each value as RESP
	errs := make(chan error, len(byShard))
	ctx, cancel := s.writeCtx()
	defer cancel()
	for sh, idx := range byShard {
		args := make([][]byte, 0, len(idx)+1)
		args = append(args, []byte("MGET"))
		for _, i := range idx {
			args = append(args, keys[i])
		}
		go func() {
			var reply []byte
			var err error
			if sh < 0 {
				reply = s.Exec(args, route.Role(sess.role), sess.resp)
			} else if reply, err = s.cfg.Shards.Forward(ctx, sh, args, route.Role(sess.role), sess.resp); err != nil {
				err = forwardError(sh, err)
			}
			if err == nil {
				err = splitArray(reply, values, idx)
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
	c.WriteArray(len(values))
	for _, v := range values {
		c.WriteRaw(v)
	}
	return nil
}

// splitArray puts the elements of reply, an array of len(idx) values,
// into values at idx; an error reply is returned as the error.
func splitArray(reply []byte, values [][]byte, idx []int) error {
	n, r := redcon.ReadNextRESP(reply)
	switch {
	case n == 0:
		return errorf(frontdoor.CodeInternal, "a holder answered MGET with no complete reply")
	case r.Type == redcon.Error:
		return &rawError{line: string(r.Data)}
	case r.Type != redcon.Array || r.Count != len(idx):
		return errorf(frontdoor.CodeInternal, "a holder answered MGET of %d keys with %d values", len(idx), r.Count)
	}
	k := 0
	r.ForEach(func(e redcon.RESP) bool {
		values[idx[k]] = e.Raw
		k++
		return true
	})
	return nil
}

// rawError is an error reply a holder gave, answered as it came.
type rawError struct{ line string }

func (e *rawError) Error() string { return e.line }

// forwardError is the answer to a command a holder did not take.
func forwardError(sh int, err error) error {
	if errors.Is(err, route.ErrNoHolder) {
		return errorf(frontdoor.CodeShardUnavailable, "no replica of this region holding shard %d is up; nothing was applied", sh)
	}
	return errorf(frontdoor.CodeTimeout, "the replica holding shard %d did not answer in time: a write may or may not have applied (%v)", sh, err)
}

// forward runs cmd at a holder of shard sh and writes its reply.
func (s *Server) forward(c redcon.Conn, sess *session, sh int, cmd redcon.Command) error {
	ctx, cancel := s.writeCtx()
	defer cancel()
	reply, err := s.cfg.Shards.Forward(ctx, sh, cmd.Args, route.Role(sess.role), sess.resp)
	if err != nil {
		return forwardError(sh, err)
	}
	c.WriteRaw(reply)
	return nil
}

// Exec runs one command forwarded by another replica of the region, a
// holder of its key's shard being this one, for a client whose AUTH
// opened r there and who speaks protocol proto, and returns the reply.
// It was authenticated and limited where it arrived, not here.
func (s *Server) Exec(args [][]byte, r route.Role, proto int) []byte {
	sess := &session{resp: proto, addr: "forwarded", forwarded: true, role: role(r)}
	if sess.role > roleAdmin {
		sess.role = roleNone
	}
	c := &bufConn{}
	s.serveOne(c, sess, redcon.Command{Args: args})
	return c.buf
}

// bufConn is the redcon.Conn of a forwarded command: the reply is kept.
type bufConn struct {
	buf []byte
	ctx any
}

func (c *bufConn) RemoteAddr() string             { return "forwarded" }
func (c *bufConn) Close() error                   { return nil }
func (c *bufConn) WriteError(msg string)          { c.buf = redcon.AppendError(c.buf, msg) }
func (c *bufConn) WriteString(str string)         { c.buf = redcon.AppendString(c.buf, str) }
func (c *bufConn) WriteBulk(bulk []byte)          { c.buf = redcon.AppendBulk(c.buf, bulk) }
func (c *bufConn) WriteBulkString(bulk string)    { c.buf = redcon.AppendBulkString(c.buf, bulk) }
func (c *bufConn) WriteInt(num int)               { c.buf = redcon.AppendInt(c.buf, int64(num)) }
func (c *bufConn) WriteInt64(num int64)           { c.buf = redcon.AppendInt(c.buf, num) }
func (c *bufConn) WriteUint64(num uint64)         { c.buf = redcon.AppendUint(c.buf, num) }
func (c *bufConn) WriteArray(count int)           { c.buf = redcon.AppendArray(c.buf, count) }
func (c *bufConn) WriteNull()                     { c.buf = redcon.AppendNull(c.buf) }
func (c *bufConn) WriteRaw(data []byte)           { c.buf = append(c.buf, data...) }
func (c *bufConn) WriteAny(v any)                 { c.buf = redcon.AppendAny(c.buf, v) }
func (c *bufConn) Context() any                   { return c.ctx }
func (c *bufConn) SetContext(v any)               { c.ctx = v }
func (c *bufConn) SetReadBuffer(int)              {}
func (c *bufConn) Detach() redcon.DetachedConn    { panic("resp: a forwarded command cannot detach") }
func (c *bufConn) ReadPipeline() []redcon.Command { return nil }
func (c *bufConn) PeekPipeline() []redcon.Command { return nil }
func (c *bufConn) WriteBulkFrom(n int64, rb io.Reader) {
	b, _ := io.ReadAll(io.LimitReader(rb, n))
	c.buf = redcon.AppendBulk(c.buf, b)
}
func (c *bufConn) NetConn() net.Conn { return nil }

// here reports whether a pipelined command runs on this replica (not
// forwarded), so it may join a run of writes committed together.
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
