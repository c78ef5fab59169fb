package resp_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/node"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/resp"
	"github.com/tally-dev/tally/route"
	"github.com/tally-dev/tally/shard"
)

// get is a counter's value over RESP.
func get(t *testing.T, c *redis.Client, key string) int64 {
	t.Helper()
	v, err := c.Get(context.Background(), key).Int64()
	if err != nil && err != redis.Nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return v
}

// A transaction's writes are answered in order, as one array, and all
// applied.
func TestTransactionAppliesAll(t *testing.T) {
	n := startNode(t, nil)
	ctx := context.Background()
	for _, proto := range []int{2, 3} {
		c := client(t, n, proto, "")
		key, item := fmt.Sprint("tx:a", proto), fmt.Sprint("likes:tx", proto)
		cmds, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Incr(ctx, key)
			p.IncrBy(ctx, key, 5)
			p.SAdd(ctx, item, "alice", "bob")
			p.PFAdd(ctx, fmt.Sprint("tx:u", proto), "x", "y")
			p.Decr(ctx, key)
			return nil
		})
		if err != nil || len(cmds) != 5 {
			t.Fatalf("RESP%d: TxPipelined: %d answers, %v", proto, len(cmds), err)
		}
		want := []int64{1, 6, 2, 1, 5}
		for i, w := range want {
			if v := cmds[i].(*redis.IntCmd).Val(); v != w {
				t.Fatalf("RESP%d: command %d answered %d, want %d", proto, i, v, w)
			}
		}
		if v := get(t, c, key); v != 5 {
			t.Fatalf("RESP%d: after EXEC, GET %d", proto, v)
		}
		if v, err := c.SCard(ctx, item).Result(); err != nil || v != 2 {
			t.Fatalf("RESP%d: SCARD %d %v", proto, v, err)
		}
	}
}

// rawConn speaks RESP by hand, one inline command and one reply line at
// a time (enough for status, error and integer replies).
type rawConn struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawConn{t: t, c: c, r: bufio.NewReader(c)}
}

// do sends an inline command and returns the first line of its reply.
func (r *rawConn) do(cmd string) string {
	r.t.Helper()
	if _, err := fmt.Fprintf(r.c, "%s\r\n", cmd); err != nil {
		r.t.Fatal(err)
	}
	return r.line()
}

func (r *rawConn) line() string {
	r.t.Helper()
	l, err := r.r.ReadString('\n')
	if err != nil {
		r.t.Fatalf("read: %q %v", l, err)
	}
	return strings.TrimRight(l, "\r\n")
}

// A command refused while queueing (unknown, wrong arity, bad arguments,
// a read) aborts the transaction: EXEC answers EXECABORT and nothing of
// it is applied, the commands queued before the refusal included.
func TestTransactionAbortAppliesNothing(t *testing.T) {
	n := startNode(t, nil)
	ctx := context.Background()
	c := client(t, n, 2, "")
	refused := []struct {
		cmd, reply string
	}{
		{"NOSUCH x", "-ERR unknown command 'NOSUCH'"},
		{"INCRBY tx:k", "-ERR wrong number of arguments for 'incrby' command"},
		{"INCRBY tx:k x", "-ERR value is not an integer"},
		{"SADD post alice", `-ERR set key "post" does not start with "likes:"`},
		{"GET tx:k", "-ERR GET cannot be queued in a transaction"},
		{"EXPIRE tx:k 10", "-ERR EXPIRE is not supported"},
	}
	for _, tc := range refused {
		r := dialRaw(t, n.RESPAddr().String())
		if got := r.do("MULTI"); got != "+OK" {
			t.Fatalf("MULTI: %q", got)
		}
		if got := r.do("INCR tx:k"); got != "+QUEUED" {
			t.Fatalf("INCR: %q", got)
		}
		if got := r.do(tc.cmd); !strings.HasPrefix(got, tc.reply) {
			t.Fatalf("%s queued: %q, want %q", tc.cmd, got, tc.reply)
		}
		if got := r.do("SADD likes:tx alice"); got != "+QUEUED" {
			t.Fatalf("SADD after a refusal: %q", got)
		}
		if got := r.do("EXEC"); !strings.HasPrefix(got, "-EXECABORT Transaction discarded because of previous errors") {
			t.Fatalf("EXEC after %s: %q", tc.cmd, got)
		}
		// The connection is out of the transaction: a write runs at once.
		if got := r.do("INCR tx:other"); !strings.HasPrefix(got, ":") {
			t.Fatalf("INCR after EXECABORT: %q", got)
		}
	}
	if v := get(t, c, "tx:k"); v != 0 {
		t.Fatalf("aborted transactions applied INCR tx:k: %d", v)
	}
	if v, err := c.SCard(ctx, "likes:tx").Result(); err != nil || v != 0 {
		t.Fatalf("aborted transactions applied SADD: %d %v", v, err)
	}

	// go-redis reports the abort, and nothing was applied.
	_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, "tx:k")
		p.Do(ctx, "INCRBY", "tx:k", "nine")
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "value is not an integer") {
		t.Fatalf("TxPipelined with a bad command: %v", err)
	}
	if v := get(t, c, "tx:k"); v != 0 {
		t.Fatalf("TxPipelined with a bad command applied INCR: %d", v)
	}
}

// DISCARD drops what was queued; MULTI, EXEC and DISCARD out of place
// and WATCH get Redis's errors.
func TestTransactionDiscardAndMisuse(t *testing.T) {
	n := startNode(t, nil)
	c := client(t, n, 2, "")
	r := dialRaw(t, n.RESPAddr().String())
	steps := []struct{ cmd, reply string }{
		{"EXEC", "-ERR EXEC without MULTI"},
		{"DISCARD", "-ERR DISCARD without MULTI"},
		{"WATCH tx:d", "-ERR WATCH is not supported"},
		{"UNWATCH", "+OK"},
		{"MULTI", "+OK"},
		{"MULTI", "-ERR MULTI calls can not be nested"},
		{"WATCH tx:d", "-ERR WATCH inside MULTI is not allowed"},
		{"INCR tx:d", "+QUEUED"},
		{"DISCARD", "+OK"},
		{"EXEC", "-ERR EXEC without MULTI"},
		{"MULTI", "+OK"},
		{"EXEC", "*0"},
	}
	for _, st := range steps {
		if got := r.do(st.cmd); !strings.HasPrefix(got, st.reply) {
			t.Fatalf("%s: %q, want %q", st.cmd, got, st.reply)
		}
	}
	if v := get(t, c, "tx:d"); v != 0 {
		t.Fatalf("a discarded INCR was applied: %d", v)
	}
}

// The rate limits are taken at EXEC: one refusal refuses the whole
// transaction, and nothing of it is applied.
func TestTransactionRateLimitAppliesNothing(t *testing.T) {
	limit, err := node.ParseLimit("write=user:0.001,user_burst:1")
	if err != nil {
		t.Fatal(err)
	}
	n := startNode(t, func(c *node.Config) { c.Limits = []node.LimitConfig{limit} })
	ctx := context.Background()
	c := client(t, n, 2, "")
	_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, "tx:r")
		p.SAdd(ctx, "likes:a", "alice")
		p.SAdd(ctx, "likes:b", "alice") // alice's second write: over her limit
		return nil
	})
	wantErr(t, err, "ERR transaction not applied: its command 3 (sadd) was refused", "rate_limited")
	if v := get(t, c, "tx:r"); v != 0 {
		t.Fatalf("a refused transaction applied INCR: %d", v)
	}
	if v, err := c.SCard(ctx, "likes:a").Result(); err != nil || v != 0 {
		t.Fatalf("a refused transaction applied SADD: %d %v", v, err)
	}
}

// holdsOne is a sharded region's routing where this replica holds the
// shard of one key only; nothing is forwarded.
type holdsOne struct{ shard int }

func (h holdsOne) Holds(s int) bool { return s == h.shard }
func (h holdsOne) Apply(context.Context, int, []region.Op) ([]region.Result, error) {
	return nil, fmt.Errorf("test: no forwarding")
}
func (h holdsOne) Read(context.Context, int, []route.Op) ([]route.Result, error) {
	return nil, fmt.Errorf("test: no forwarding")
}

// In a sharded region, a transaction with a key this replica does not
// hold is refused with CROSSSLOT, and nothing of it is applied.
func TestTransactionCrossSlot(t *testing.T) {
	n := startNode(t, nil)
	here, there := "tx:here", ""
	for i := 0; there == ""; i++ {
		if k := fmt.Sprint("tx:there", i); shard.Of(k) != shard.Of(here) {
			there = k
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := resp.New(resp.Config{Replica: n.Replica(), Listener: ln, Shards: holdsOne{shard.Of(here)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	r := dialRaw(t, s.Addr().String())
	for _, st := range []struct{ cmd, reply string }{
		{"MULTI", "+OK"},
		{"INCR " + here, "+QUEUED"},
		{"INCR " + there, "-CROSSSLOT a transaction's keys must all be on shards this replica holds"},
		{"EXEC", "-CROSSSLOT Transaction discarded because of previous errors; nothing was applied"},
		{"MULTI", "+OK"},
		{"INCR " + here, "+QUEUED"},
		{"INCRBY " + here, "-ERR wrong number of arguments"},
		{"EXEC", "-EXECABORT"},
	} {
		if got := r.do(st.cmd); !strings.HasPrefix(got, st.reply) || got[0] == '-' && !strings.Contains(got, "(code ") {
			t.Fatalf("%s: %q, want %q and a code", st.cmd, got, st.reply)
		}
	}
	if v := get(t, client(t, n, 2, ""), here); v != 0 {
		t.Fatalf("a refused transaction applied INCR %s: %d", here, v)
	}
	// A transaction of keys held here runs.
	for _, st := range []struct{ cmd, reply string }{
		{"MULTI", "+OK"},
		{"INCR " + here, "+QUEUED"},
		{"EXEC", "*1"},
	} {
		if got := r.do(st.cmd); got != st.reply {
			t.Fatalf("%s: %q, want %q", st.cmd, got, st.reply)
		}
	}
	if got := r.line(); got != ":1" {
		t.Fatalf("EXEC's INCR: %q", got)
	}
}

// As in Redis, a command that fails as the writer applies it answers its
// error in its place in EXEC's array, and the others are applied: a
// like by a blocked user is refused, the increments around it count.
func TestTransactionApplyErrorInItsPlace(t *testing.T) {
	n := startNode(t, nil)
	ctx := context.Background()
	if _, err := n.Replica().Admin().Block(ctx, "mallory", true); err != nil {
		t.Fatal(err)
	}
	c := client(t, n, 2, "")
	cmds, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, "tx:b")
		p.SAdd(ctx, "likes:b", "mallory")
		p.Incr(ctx, "tx:b")
		return nil
	})
	if err == nil || len(cmds) != 3 {
		t.Fatalf("TxPipelined: %d answers, %v; want the blocked like's error", len(cmds), err)
	}
	if v, err := cmds[0].(*redis.IntCmd).Result(); err != nil || v != 1 {
		t.Fatalf("first INCR: %d %v", v, err)
	}
	wantErr(t, cmds[1].Err(), "ERR", "user_blocked")
	if v, err := cmds[2].(*redis.IntCmd).Result(); err != nil || v != 2 {
		t.Fatalf("second INCR: %d %v", v, err)
	}
	if v := get(t, c, "tx:b"); v != 2 {
		t.Fatalf("GET after EXEC: %d", v)
	}
	if v, err := c.SCard(ctx, "likes:b").Result(); err != nil || v != 0 {
		t.Fatalf("the blocked like was applied: SCARD %d %v", v, err)
	}
}
