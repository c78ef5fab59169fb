package resp

import (
	"strings"

	"github.com/tidwall/redcon"

	"github.com/tally-dev/tally/httpapi"
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
		if err := httpapi.CheckID("item", item); err != nil {
			return "", err
		}
		var n int64
		for _, name := range s.cfg.Hot.Names(item) {
			rd, err := s.rep.Likes(name)
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
	if err := httpapi.CheckID("key", key); err != nil {
		return "", err
	}
	if ok, err := s.counterExists(key); err != nil || ok {
		return "string", err
	}
	u, err := s.rep.Uniques([]string{key})
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
	rd, err := s.rep.Counter(key)
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
			return errorf(httpapi.CodeShardNotHeld, "key %s is on shard %d, which this replica does not hold; "+
				"EXISTS and TYPE are answered only by a holder: send them to one (GET /v1/shards)", quote(key), sh)
		}
	}
	return nil
}

// EXISTS key [key ...]: how many of the keys exist, a key named twice
// counted twice, as Redis counts.
func cmdExists(s *Server, c redcon.Conn, _ *session, args [][]byte) error {
	if len(args) > MaxKeysPerCommand {
		return errorf(httpapi.CodeBadRequest, "%d keys in one EXISTS; at most %d", len(args), MaxKeysPerCommand)
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
