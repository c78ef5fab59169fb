// The parsing of command arguments: keys, like items, ids and amounts.

package resp

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
)

// counterKey is a counter key: an id as the HTTP API takes it.
func counterKey(arg []byte) (string, error) {
	key := string(arg)
	return key, frontdoor.CheckID("key", key)
}

// likesItem is the item of a set key, likes:<item>.
func likesItem(arg []byte) (string, error) {
	key := string(arg)
	item, ok := strings.CutPrefix(key, LikesPrefix)
	if !ok {
		return "", errorf(frontdoor.CodeBadID, "set key %s does not start with %q; sets are likes: SADD %s<item> <user>",
			quote(key), LikesPrefix, LikesPrefix)
	}
	return item, frontdoor.CheckID("item", item)
}

// idArgs are a command's ids of one kind (what: "user", "key", "id"), each
// checked as the HTTP API checks it, at most max of them.
func idArgs(args [][]byte, what, plural string, max int) ([]string, error) {
	if len(args) > max {
		return nil, errorf(frontdoor.CodeBadRequest, "%d %s in one command; at most %d", len(args), plural, max)
	}
	ids := make([]string, len(args))
	for i, a := range args {
		ids[i] = string(a)
		if err := frontdoor.CheckID(what, ids[i]); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// userIDs are the users of SADD, SREM, SISMEMBER: ids, in order, each
// once.
func userIDs(args [][]byte) ([]string, error) {
	users, err := idArgs(args, "user", "users", region.MaxUniqueIDs)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(users))
	return slices.DeleteFunc(users, func(u string) bool {
		dup := seen[u]
		seen[u] = true
		return dup
	}), nil
}

// uniqueKeys are PF* keys: ids, sorted, duplicates dropped (a union of a
// key with itself is the key).
func uniqueKeys(args [][]byte) ([]string, error) {
	keys, err := idArgs(args, "key", "keys", region.MaxUniqueKeys)
	if err != nil {
		return nil, err
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

func uniqueIDs(args [][]byte) ([]string, error) {
	return idArgs(args, "id", "ids", region.MaxUniqueIDs)
}

// parseBy is INCRBY's amount: a decimal int64 within region.MaxBy.
func parseBy(arg []byte) (int64, error) {
	by, err := strconv.ParseInt(string(arg), 10, 64)
	if err != nil {
		return 0, errorf(frontdoor.CodeBadBy, "value is not an integer or out of range")
	}
	return by, frontdoor.CheckBy(by)
}

// quote shows a key in an error, cut to a readable length.
func quote(v string) string {
	const max = 64
	if len(v) > max {
		return fmt.Sprintf("%q... (%d bytes)", v[:max], len(v))
	}
	return fmt.Sprintf("%q", v)
}
