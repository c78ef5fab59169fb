// The data commands: counters (INCR, DECR, GET, MGET), likes (SADD, SREM,
// STOGGLE, SISMEMBER, SCARD) and uniques (PFADD, PFCOUNT).

package resp

import (
	"context"
	"math"
	"strconv"

	"github.com/tidwall/redcon"

	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
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
	rd, err := s.rep.Counters().Get(key)
	if err != nil {
		return err
	}
	if len(rd.Vector) == 0 {
		sess.writeNull(c)
		return nil
	}
	c.WriteBulkString(strconv.FormatInt(rd.Value, 10))
	return nil
}

// MaxKeysPerCommand bounds the keys of MGET and EXISTS.
const MaxKeysPerCommand = region.MaxUniqueKeys

// MGET key [key ...]: each counter's value, nil for one never
// incremented.
func cmdMGet(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	if len(args) > MaxKeysPerCommand {
		return errorf(frontdoor.CodeBadRequest, "%d keys in one MGET; at most %d", len(args), MaxKeysPerCommand)
	}
	reads := make([]region.Read, len(args))
	for i, a := range args {
		key, err := counterKey(a)
		if err != nil {
			return err
		}
		if reads[i], err = s.rep.Counters().Get(key); err != nil {
			return err
		}
	}
	c.WriteArray(len(reads))
	for _, rd := range reads {
		if len(rd.Vector) == 0 {
			sess.writeNull(c)
			continue
		}
		c.WriteBulkString(strconv.FormatInt(rd.Value, 10))
	}
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
	liked, err := s.rep.Likes().Liked(s.cfg.Hot.Name(item, users[0]), users[0])
	if err != nil {
		return err
	}
	c.WriteInt(boolInt(liked))
	return nil
}

func cmdCard(s *Server, c redcon.Conn, _ *session, args [][]byte) error {
	item, err := likesItem(args[0])
	if err != nil {
		return err
	}
	var n int64
	for _, name := range s.cfg.Hot.Names(item) { // every part of a split item, all held here (route)
		rd, err := s.rep.Likes().Count(name)
		if err != nil {
			return err
		}
		n += rd.Value
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

// PFCOUNT key [key ...]: the distinct ids of the union of the keys.
func cmdPFCount(s *Server, c redcon.Conn, _ *session, args [][]byte) error {
	keys, err := uniqueKeys(args)
	if err != nil {
		return err
	}
	rd, err := s.rep.Uniques().Read(keys)
	if err != nil {
		return err
	}
	c.WriteInt64(int64(math.Round(rd.Estimate)))
	return nil
}
