package resp_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/region"
)

// SMEMBERS and SSCAN answer a set's members, the item's likers, over
// RESP2 and RESP3; SSCAN's pages cover the set, resume on another
// connection, filter with MATCH.
func TestMembersAndScan(t *testing.T) {
	n := startNode(t, nil)
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			ctx := context.Background()
			c := client(t, n, proto, "")
			key := fmt.Sprintf("likes:scan%d", proto)
			var want []string
			for i := range 25 {
				want = append(want, fmt.Sprintf("u%02d", i))
			}
			if err := c.SAdd(ctx, key, want).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.SAdd(ctx, key, "x").Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.SRem(ctx, key, "x").Err(); err != nil {
				t.Fatal(err)
			}
			got, err := c.SMembers(ctx, key).Result()
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("SMEMBERS: %v %v", got, err)
			}
			if got, err := c.SMembers(ctx, "likes:none").Result(); err != nil || len(got) != 0 {
				t.Fatalf("SMEMBERS of an empty set: %v %v", got, err)
			}

			// Pages of 10 alternating between two connections.
			other := client(t, n, proto, "")
			var scanned []string
			cursor, pages := uint64(0), 0
			for {
				conn := []*redis.Client{c, other}[pages%2]
				page, next, err := conn.SScan(ctx, key, cursor, "", 10).Result()
				if err != nil {
					t.Fatalf("SSCAN page %d: %v", pages, err)
				}
				scanned = append(scanned, page...)
				pages++
				if next == 0 {
					break
				}
				// A page retried gives the same next cursor.
				if _, again, err := conn.SScan(ctx, key, cursor, "", 10).Result(); err != nil || again != next {
					t.Fatalf("SSCAN page %d again: cursor %d, first %d, %v", pages, again, next, err)
				}
				cursor = next
			}
			if !slices.Equal(scanned, want) || pages != 3 {
				t.Fatalf("SSCAN in %d pages: %v", pages, scanned)
			}
			var matched []string
			iter := c.SScan(ctx, key, 0, "u1*", 7).Iterator()
			for iter.Next(ctx) {
				matched = append(matched, iter.Val())
			}
			if iter.Err() != nil || fmt.Sprint(matched) != "[u10 u11 u12 u13 u14 u15 u16 u17 u18 u19]" {
				t.Fatalf("SSCAN MATCH u1*: %v %v", matched, iter.Err())
			}
			if page, next, err := c.SScan(ctx, key, 0, "", 5000).Result(); err != nil || next != 0 || len(page) != 25 {
				t.Fatalf("SSCAN COUNT 5000: %d members, cursor %d, %v", len(page), next, err)
			}
		})
	}
}

func TestScanErrors(t *testing.T) {
	n := startNode(t, nil)
	ctx := context.Background()
	c := client(t, n, 2, "")
	if err := c.SAdd(ctx, "likes:a", "u1", "u2", "u3").Err(); err != nil {
		t.Fatal(err)
	}
	_, cursor, err := c.SScan(ctx, "likes:a", 0, "", 1).Result()
	if err != nil || cursor == 0 {
		t.Fatalf("first page: cursor %d %v", cursor, err)
	}
	cases := []struct {
		args         []any
		prefix, code string
	}{
		{[]any{"SSCAN", "likes:b", cursor}, "ERR cursor " + fmt.Sprint(cursor) + " is unknown here", "bad_request"},
		{[]any{"SSCAN", "likes:a", 12345}, "ERR cursor 12345 is unknown here", "bad_request"},
		{[]any{"SSCAN", "likes:a", "x"}, "ERR invalid cursor", "bad_request"},
		{[]any{"SSCAN", "likes:a", 0, "COUNT", 0}, "ERR syntax error", "bad_request"},
		{[]any{"SSCAN", "likes:a", 0, "COUNT"}, "ERR syntax error", "bad_request"},
		{[]any{"SSCAN", "likes:a", 0, "NOVALUES", "x"}, "ERR syntax error", "bad_request"},
		{[]any{"SSCAN", "likes:a", 0, "MATCH", "[a"}, "ERR MATCH pattern", "bad_request"},
		{[]any{"SSCAN", "a", 0}, `ERR set key "a" does not start with "likes:"`, "bad_id"},
		{[]any{"SMEMBERS", "a"}, `ERR set key "a" does not start with "likes:"`, "bad_id"},
	}
	for _, tc := range cases {
		wantErr(t, c.Do(ctx, tc.args...).Err(), tc.prefix, tc.code)
	}
}

// SMEMBERS answers at most region.MaxAllLikers members and points a
// larger set to SSCAN.
func TestMembersCap(t *testing.T) {
	n := startNode(t, nil)
	ctx := context.Background()
	c := client(t, n, 2, "")
	users := make([]any, region.MaxAllLikers)
	for i := range users {
		users[i] = fmt.Sprintf("u%05d", i)
	}
	if err := c.SAdd(ctx, "likes:big", users...).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.SMembers(ctx, "likes:big").Result(); err != nil || len(got) != region.MaxAllLikers {
		t.Fatalf("SMEMBERS of %d: %d %v", region.MaxAllLikers, len(got), err)
	}
	if err := c.SAdd(ctx, "likes:big", "one-more").Err(); err != nil {
		t.Fatal(err)
	}
	err := c.SMembers(ctx, "likes:big").Err()
	wantErr(t, err, `ERR "likes:big" has more than 10000 members`, "bad_request")
	if !strings.Contains(err.Error(), "SSCAN") {
		t.Fatalf("the error does not point to SSCAN: %v", err)
	}
	if v, err := c.Ping(ctx).Result(); err != nil || v != "PONG" {
		t.Fatalf("after the refusal: %q %v", v, err)
	}
}

// rawReplies sends cmds (inline commands) on a new connection, then PING,
// and returns every byte answered up to and without PING's +PONG.
func rawReplies(t *testing.T, addr string, cmds ...string) string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte(strings.Join(append(cmds, "PING"), "\r\n") + "\r\n")); err != nil {
		t.Fatal(err)
	}
	var got []byte
	buf := make([]byte, 4096)
	for !strings.HasSuffix(string(got), "+PONG\r\n") {
		k, err := conn.Read(buf)
		got = append(got, buf[:k]...)
		if err != nil {
			t.Fatalf("read %q: %v", got, err)
		}
	}
	return strings.TrimSuffix(string(got), "+PONG\r\n")
}

// HELLO 3 switches a connection to RESP3 frames where they differ from
// RESP2's: a map for HELLO, null as _, a set for SMEMBERS, a verbatim
// string for INFO. HELLO 2 (or no HELLO) keeps RESP2's.
func TestRESP3Frames(t *testing.T) {
	n := startNode(t, nil)
	if err := client(t, n, 2, "").SAdd(context.Background(), "likes:f", "alice").Err(); err != nil {
		t.Fatal(err)
	}
	// id is the connection's CLIENT ID: connections are numbered from 1
	// as accepted (the client above took 1).
	hello := func(proto, id string) string {
		return "$6\r\nserver\r\n$5\r\ntally\r\n$7\r\nversion\r\n$4\r\ntest\r\n$5\r\nproto\r\n:" + proto + "\r\n" +
			"$2\r\nid\r\n:" + id + "\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"
	}
	addr := n.RESPAddr().String()
	if got, want := rawReplies(t, addr, "HELLO 3", "CLIENT GETNAME", "SMEMBERS likes:f", "SSCAN likes:f 0"),
		"%7\r\n"+hello("3", "2")+"_\r\n~1\r\n$5\r\nalice\r\n*2\r\n$1\r\n0\r\n*1\r\n$5\r\nalice\r\n"; got != want {
		t.Fatalf("RESP3:\n got %q\nwant %q", got, want)
	}
	if got, want := rawReplies(t, addr, "HELLO 2", "CLIENT GETNAME", "SMEMBERS likes:f"),
		"*14\r\n"+hello("2", "3")+"$-1\r\n*1\r\n$5\r\nalice\r\n"; got != want {
		t.Fatalf("RESP2:\n got %q\nwant %q", got, want)
	}
	if got := rawReplies(t, addr, "HELLO 3", "INFO"); !strings.Contains(got, "\r\n=") || !strings.Contains(got, "txt:# Server\r\n") {
		t.Fatalf("RESP3 INFO is not a verbatim text: %q", got)
	}
	if got := rawReplies(t, addr, "INFO"); !strings.HasPrefix(got, "$") || strings.Contains(got, "txt:") {
		t.Fatalf("RESP2 INFO is not a bulk string: %q", got)
	}
	// A RESP3 connection goes back to RESP2 with HELLO 2.
	if got := rawReplies(t, addr, "HELLO 3", "HELLO 2", "CLIENT GETNAME"); !strings.HasSuffix(got, "$-1\r\n") {
		t.Fatalf("HELLO 3, HELLO 2: %q", got)
	}
}
