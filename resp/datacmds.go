// The data commands: counters (INCR, DECR, GET, MGET), likes (SADD, SREM,
// STOGGLE, SISMEMBER, SCARD) and uniques (PFADD, PFCOUNT).

package resp

import (
	"context"
	"strconv"

	"github.com/tidwall/redcon"

	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/route"
)

// writeCtx bounds a write's wait for its durable commit.
func (s *Server) writeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.stop, s.cfg.RequestTimeout)
}

// INCR, DECR key; INCRBY, DECRBY key n: the counter's value after.
func prepIncr(negate, withBy bool) func(*Server, [][]byte) (pending, error) {
	return func(_ *Server, args [][]byte) (pending, error) {
		key, err := counterKey(args[0])
		if err != nil {
			return pending{}, err
		}
		by := int64(1)
		if withBy {
			if by, err = parseBy(args[1]); err != nil {
				return pending{}, err
			}
		}
		if negate {
			by = -by // |by| <= region.MaxBy: cannot overflow
		}
		return pending{ops: []region.Op{{Kind: region.OpIncr, Item: key, By: by}}, reply: func(c redcon.Conn, res []region.Result) error {
			if res[0].Err != nil {
				return res[0].Err
			}
			c.WriteInt64(res[0].Value)
			return nil
		}}, nil
	}
}

// GET key: the counter's value as Redis answers it, a decimal bulk
// string; nil for a counter never incremented (at 0 after increments,
// "0"), as Redis answers a key never set.
func cmdGet(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	key, err := counterKey(args[0])
	if err != nil {
		return err
	}
	rs, err := s.read(key, []route.Op{{Kind: route.OpGet, Key: key}})
	if err != nil {
		return err
	}
	writeCounter(c, sess, rs[0])
	return nil
}

// writeCounter answers an OpGet's result: nil for a counter never
// written.
func writeCounter(c redcon.Conn, sess *session, r route.Result) {
	if !r.Found {
		sess.writeNull(c)
		return
	}
	c.WriteBulkString(strconv.FormatInt(r.Value, 10))
}

// writeCounters answers MGET's results, in order.
func writeCounters(c redcon.Conn, sess *session, rs []route.Result) {
	c.WriteArray(len(rs))
	for _, r := range rs {
		writeCounter(c, sess, r)
	}
}

// MaxKeysPerCommand bounds the keys of MGET and EXISTS.
const MaxKeysPerCommand = region.MaxUniqueKeys

// MGET key [key ...]: each counter's value, nil for one never
// incremented (keys on shards not all held here: mgetSpread).
func cmdMGet(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	if len(args) > MaxKeysPerCommand {
		return errorf(frontdoor.CodeBadRequest, "%d keys in one MGET; at most %d", len(args), MaxKeysPerCommand)
	}
	ops := make([]route.Op, len(args))
	for i, a := range args {
		key, err := counterKey(a)
		if err != nil {
			return err
		}
		ops[i] = route.Op{Kind: route.OpGet, Key: key}
	}
	rs, err := route.Read(s.rep, ops)
	if err != nil {
		return err
	}
	writeCounters(c, sess, rs)
	return nil
}

// SADD / SREM likes:<item> <user> [user ...]: like or unlike, all users in
// one durable commit; the reply counts the users whose state changed.
func prepLike(liked bool) func(*Server, [][]byte) (pending, error) {
	kind := region.OpUnlike
	if liked {
		kind = region.OpLike
	}
	return func(s *Server, args [][]byte) (pending, error) {
		item, err := likesItem(args[0])
		if err != nil {
			return pending{}, err
		}
		users, err := userIDs(args[1:])
		if err != nil {
			return pending{}, err
		}
		ops := make([]region.Op, len(users))
		for i, u := range users {
			ops[i] = region.Op{Kind: kind, Item: s.cfg.Hot.Name(item, u), User: u} // a split item's: the user's part
		}
		return pending{ops: ops, users: users, reply: func(c redcon.Conn, res []region.Result) error {
			changed := 0
			for _, r := range res {
				if r.Err != nil {
					return r.Err
				}
				if r.Changed {
					changed++
				}
			}
			c.WriteInt(changed)
			return nil
		}}, nil
	}
}

// STOGGLE likes:<item> user [idempotency_key]: flip the user's like in
// one step of the writer (POST /v1/likes/{item}/{user}/toggle); the reply
// is the new state, 1 liked or 0, as SISMEMBER would answer it (a retry
// with the key: the state the toggle decided).
func prepToggle(s *Server, args [][]byte) (pending, error) {
	if len(args) > 3 {
		return pending{}, errorf(frontdoor.CodeBadRequest, "wrong number of arguments for 'stoggle' command: STOGGLE %s<item> <user> [idempotency_key]", LikesPrefix)
	}
	item, err := likesItem(args[0])
	if err != nil {
		return pending{}, err
	}
	user := string(args[1])
	if err := frontdoor.CheckID("user", user); err != nil {
		return pending{}, err
	}
	var idem string
	if len(args) == 3 {
		idem = string(args[2])
		if err := frontdoor.CheckID("idempotency_key", idem); err != nil {
			return pending{}, err
		}
	}
	op := region.Op{Kind: region.OpToggle, Item: s.cfg.Hot.Name(item, user), User: user, IdemKey: idem} // a split item's: the user's part
	return pending{ops: []region.Op{op}, users: []string{user}, reply: func(c redcon.Conn, res []region.Result) error {
		if res[0].Err != nil {
			return res[0].Err
		}
		c.WriteInt(boolInt(res[0].Liked))
		return nil
	}}, nil
}

func cmdIsMember(s *Server, c redcon.Conn, _ *session, args [][]byte) error {
	item, err := likesItem(args[0])
	if err != nil {
		return err
	}
	users, err := userIDs(args[1:])
	if err != nil {
		return err
	}
	name := s.cfg.Hot.Name(item, users[0]) // a split item's: the user's part
	rs, err := s.read(name, []route.Op{{Kind: route.OpLiked, Key: name, User: users[0]}})
	if err != nil {
		return err
	}
	c.WriteInt(boolInt(rs[0].Liked))
	return nil
}

func cmdCard(s *Server, c redcon.Conn, _ *session, args [][]byte) error {
	item, err := likesItem(args[0])
	if err != nil {
		return err
	}
	names := s.cfg.Hot.Names(item) // every part of a split item, all on one shard (route)
	ops := make([]route.Op, len(names))
	for i, name := range names {
		ops[i] = route.Op{Kind: route.OpLikeCount, Key: name}
	}
	rs, err := s.read(names[0], ops)
	if err != nil {
		return err
	}
	var n int64
	for _, r := range rs {
		n += r.Value
	}
	c.WriteInt64(n)
	return nil
}

// PFADD key id [id ...]: 1 if the key's sketch changed, as Redis answers.
func prepPFAdd(_ *Server, args [][]byte) (pending, error) {
	key, err := uniqueKeys(args[:1])
	if err != nil {
		return pending{}, err
	}
	ids, err := uniqueIDs(args[1:])
	if err != nil {
		return pending{}, err
	}
	return pending{ops: []region.Op{{Kind: region.OpUniques, Item: key[0], IDs: ids}}, reply: func(c redcon.Conn, res []region.Result) error {
		if res[0].Err != nil {
			return res[0].Err
		}
		c.WriteInt(boolInt(res[0].Changed))
		return nil
	}}, nil
}

// PFCOUNT key [key ...]: the distinct ids of the union of the keys
// (keys on several shards not all held here: spreadRead).
func cmdPFCount(s *Server, c redcon.Conn, _ *session, args [][]byte) error {
	keys, err := uniqueKeys(args)
	if err != nil {
		return err
	}
	rs, err := s.read(keys[0], []route.Op{{Kind: route.OpUniqueCount, List: keys}})
	if err != nil {
		return err
	}
	c.WriteInt64(rs[0].Value)
	return nil
}
