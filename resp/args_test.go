package resp

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/redcon"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
)

// answer is the error line a client would get for err: it must be one
// line with a known prefix and tally's code.
func answer(t *testing.T, err error) string {
	t.Helper()
	var re *replyError
	if errors.As(err, &re) {
		return re.Error()
	}
	code, msg, ok := frontdoor.Describe(err)
	if !ok {
		t.Fatalf("an argument error the HTTP API does not know: %v", err)
	}
	return (&replyError{prefix: "ERR", code: code, msg: msg}).Error()
}

// The argument parsing of this package (redcon parses the protocol): any
// bytes as key, user, id or amount either parse to what the replica takes
// or are refused with a one-line error carrying a code, never a panic.
func FuzzArgs(f *testing.F) {
	for _, s := range []string{"", "likes:", "likes:post1", "views:p", "a b", "likes:a/b", "5", "-5", "1099511627776",
		"1099511627777", "-9223372036854775808", "0x10", " 1", "\r\n", "likes:\xff", strings.Repeat("k", 129), "MULTI"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, arg []byte) {
		oneLine := func(err error) {
			t.Helper()
			line := answer(t, err)
			if strings.ContainsAny(line, "\r\n") || !strings.Contains(line, " (code ") {
				t.Fatalf("error reply %q", line)
			}
		}
		if key, err := counterKey(arg); err != nil {
			oneLine(err)
		} else if !crdt.ValidID(key) || key != string(arg) {
			t.Fatalf("counter key %q from %q", key, arg)
		}
		if item, err := likesItem(arg); err != nil {
			oneLine(err)
		} else if !crdt.ValidID(item) || LikesPrefix+item != string(arg) {
			t.Fatalf("item %q from %q", item, arg)
		}
		if users, err := userIDs([][]byte{arg, arg}); err != nil {
			oneLine(err)
		} else if len(users) != 1 || !crdt.ValidID(users[0]) {
			t.Fatalf("users %q from %q twice", users, arg)
		}
		if keys, err := uniqueKeys([][]byte{arg, []byte("k")}); err != nil {
			oneLine(err)
		} else if len(keys) < 1 || len(keys) > 2 || !crdt.ValidID(keys[0]) {
			t.Fatalf("keys %q from %q", keys, arg)
		}
		if ids, err := uniqueIDs([][]byte{arg}); err != nil {
			oneLine(err)
		} else if len(ids) != 1 || !crdt.ValidID(ids[0]) {
			t.Fatalf("ids %q from %q", ids, arg)
		}
		if by, err := parseBy(arg); err != nil {
			oneLine(err)
		} else if by > region.MaxBy || by < -region.MaxBy {
			t.Fatalf("by %d from %q", by, arg)
		} else if n, _ := strconv.ParseInt(string(arg), 10, 64); n != by {
			t.Fatalf("by %d from %q", by, arg)
		}
		name := commandName(redcon.Command{Args: [][]byte{arg}})
		if len(name) > 32 || strings.ContainsAny(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
			t.Fatalf("command name %q from %q", name, arg)
		}
		if q := quoteName(arg); strings.ContainsAny(q, "\r\n'") || len(q) > 32*3 {
			t.Fatalf("quoted name %q from %q", q, arg)
		}
	})
}

// Too many users, ids or keys in one command are refused before the
// replica sees them, as the HTTP API refuses them.
func TestArgumentCounts(t *testing.T) {
	many := func(n int) [][]byte {
		out := make([][]byte, n)
		for i := range out {
			out[i] = []byte("u" + strconv.Itoa(i))
		}
		return out
	}
	if _, err := userIDs(many(region.MaxUniqueIDs + 1)); err == nil || !strings.Contains(answer(t, err), "(code bad_request)") {
		t.Fatalf("too many users: %v", err)
	}
	if _, err := uniqueIDs(many(region.MaxUniqueIDs + 1)); err == nil {
		t.Fatal("too many ids accepted")
	}
	if _, err := uniqueKeys(many(region.MaxUniqueKeys + 1)); err == nil {
		t.Fatal("too many keys accepted")
	}
	if got, err := uniqueKeys([][]byte{[]byte("b"), []byte("a"), []byte("b")}); err != nil || strings.Join(got, ",") != "a,b" {
		t.Fatalf("keys: %v %v", got, err)
	}
}
