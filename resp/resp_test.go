package resp_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/node"
	"github.com/tally-dev/tally/resp"
)

// startNode starts a standalone replica (real Pebble directory) with its
// RESP front door on a free loopback port, adjusted by adjust.
func startNode(t *testing.T, adjust func(*node.Config)) *node.Node {
	t.Helper()
	n, _ := startNodeConfig(t, adjust)
	return n
}

// startNodeConfig is startNode that also returns the node's config.
func startNodeConfig(t *testing.T, adjust func(*node.Config)) (*node.Node, node.Config) {
	t.Helper()
	cfg := node.DefaultConfig()
	cfg.Region, cfg.DataDir, cfg.Listen, cfg.RESPListen = "eu", t.TempDir(), "127.0.0.1:0", "127.0.0.1:0"
	if adjust != nil {
		adjust(&cfg)
	}
	cfg.Derive()
	n, err := node.Start(context.Background(), cfg, node.Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return n, cfg
}

// client is a go-redis client of n's RESP address, closed with the test.
// protocol 0 is go-redis's default (HELLO 3).
func client(t *testing.T, n *node.Node, protocol int, password string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr: n.RESPAddr().String(), Protocol: protocol, Password: password,
		MaxRetries: -1, PoolSize: 1, DisableIdentity: false,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func wantErr(t *testing.T, err error, prefix, code string) {
	t.Helper()
	if err == nil || !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), "(code "+code+")") {
		t.Fatalf("error %v, want prefix %q and code %s", err, prefix, code)
	}
}

func TestCountersLikesAndUniques(t *testing.T) {
	n := startNode(t, nil)
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			ctx := context.Background()
			c := client(t, n, proto, "")
			key := fmt.Sprintf("views:p%d", proto)
			if v, err := c.IncrBy(ctx, key, 5).Result(); err != nil || v != 5 {
				t.Fatalf("INCRBY: %d %v", v, err)
			}
			if v, err := c.Incr(ctx, key).Result(); err != nil || v != 6 {
				t.Fatalf("INCR: %d %v", v, err)
			}
			if v, err := c.DecrBy(ctx, key, 2).Result(); err != nil || v != 4 {
				t.Fatalf("DECRBY: %d %v", v, err)
			}
			if v, err := c.Decr(ctx, key).Result(); err != nil || v != 3 {
				t.Fatalf("DECR: %d %v", v, err)
			}
			if v, err := c.Get(ctx, key).Int64(); err != nil || v != 3 {
				t.Fatalf("GET: %d %v", v, err)
			}
			if v, err := c.MGet(ctx, key, "never:incremented").Result(); err != nil || fmt.Sprint(v) != "[3 <nil>]" {
				t.Fatalf("MGET: %v %v", v, err)
			}

			item := fmt.Sprintf("likes:post%d", proto)
			if v, err := c.SAdd(ctx, item, "alice", "bob").Result(); err != nil || v != 2 {
				t.Fatalf("SADD two: %d %v", v, err)
			}
			if v, err := c.SAdd(ctx, item, "alice", "carol", "carol").Result(); err != nil || v != 1 {
				t.Fatalf("SADD one new of two, one twice: %d %v", v, err)
			}
			if v, err := c.SCard(ctx, item).Result(); err != nil || v != 3 {
				t.Fatalf("SCARD: %d %v", v, err)
			}
			if v, err := c.SIsMember(ctx, item, "bob").Result(); err != nil || !v {
				t.Fatalf("SISMEMBER bob: %v %v", v, err)
			}
			if v, err := c.SRem(ctx, item, "bob", "dave").Result(); err != nil || v != 1 {
				t.Fatalf("SREM: %d %v", v, err)
			}
			if v, err := c.SIsMember(ctx, item, "bob").Result(); err != nil || v {
				t.Fatalf("SISMEMBER bob after SREM: %v %v", v, err)
			}
			if v, err := c.SCard(ctx, item).Result(); err != nil || v != 2 {
				t.Fatalf("SCARD after SREM: %d %v", v, err)
			}

			a, b := fmt.Sprintf("visitors:a%d", proto), fmt.Sprintf("visitors:b%d", proto)
			if v, err := c.PFAdd(ctx, a, "u1", "u2", "u3").Result(); err != nil || v != 1 {
				t.Fatalf("PFADD: %d %v", v, err)
			}
			if v, err := c.PFAdd(ctx, a, "u1").Result(); err != nil || v != 0 {
				t.Fatalf("PFADD again: %d %v", v, err)
			}
			if v, err := c.PFAdd(ctx, b, "u3", "u4").Result(); err != nil || v != 1 {
				t.Fatalf("PFADD b: %d %v", v, err)
			}
			if v, err := c.PFCount(ctx, a).Result(); err != nil || v != 3 {
				t.Fatalf("PFCOUNT a: %d %v", v, err)
			}
			if v, err := c.PFCount(ctx, a, b).Result(); err != nil || v != 4 {
				t.Fatalf("PFCOUNT a b (union): %d %v", v, err)
			}

			if v, err := c.Ping(ctx).Result(); err != nil || v != "PONG" {
				t.Fatalf("PING: %q %v", v, err)
			}
			if v, err := c.Echo(ctx, "hi").Result(); err != nil || v != "hi" {
				t.Fatalf("ECHO: %q %v", v, err)
			}
			if v, err := c.Info(ctx).Result(); err != nil || !strings.Contains(v, "region:eu") || !strings.Contains(v, "replica:eu-1") {
				t.Fatalf("INFO: %q %v", v, err)
			}
			if err := c.Do(ctx, "SELECT", "0").Err(); err != nil {
				t.Fatalf("SELECT 0: %v", err)
			}
			if err := c.Do(ctx, "CLIENT", "SETNAME", "me").Err(); err != nil {
				t.Fatalf("CLIENT SETNAME: %v", err)
			}
			if v, err := c.Do(ctx, "CLIENT", "GETNAME").Text(); err != nil || v != "me" {
				t.Fatalf("CLIENT GETNAME: %q %v", v, err)
			}
			if v, err := c.Do(ctx, "COMMAND", "DOCS").Slice(); err != nil || len(v) != 0 {
				t.Fatalf("COMMAND DOCS: %v %v", v, err)
			}
		})
	}
}

// The HTTP API sees what RESP wrote, and the reverse: one replica, two
// front doors.
func TestRESPAndHTTPShareTheReplica(t *testing.T) {
	n := startNode(t, nil)
	ctx := context.Background()
	c := client(t, n, 2, "")
	if err := c.SAdd(ctx, "likes:post1", "alice").Err(); err != nil {
		t.Fatal(err)
	}
	base := "http://" + n.Addr().String()
	if code, b := testkit.CallJSON(t, "GET", base+"/v1/likes/post1"); code != 200 || b["count"] != 1.0 {
		t.Fatalf("HTTP read of a RESP like: %d %v", code, b)
	}
	if code, b := testkit.CallJSON(t, "POST", base+"/v1/counters/views:p/incr"); code != 200 || b["value"] != 1.0 {
		t.Fatalf("HTTP incr: %d %v", code, b)
	}
	if v, err := c.Get(ctx, "views:p").Int64(); err != nil || v != 1 {
		t.Fatalf("RESP read of an HTTP increment: %d %v", v, err)
	}
}

// Bad input, unknown and refused commands get a Redis error with tally's
// code, and the connection goes on serving.
func TestErrorsKeepTheConnection(t *testing.T) {
	n := startNode(t, nil)
	ctx := context.Background()
	c := client(t, n, 2, "")
	cases := []struct {
		args         []any
		prefix, code string
	}{
		{[]any{"FLUSHALL"}, "ERR unknown command 'FLUSHALL'", "not_found"},
		{[]any{"EXEC"}, "ERR EXEC without MULTI", "bad_request"},
		{[]any{"WATCH", "k"}, "ERR WATCH is not supported", "bad_request"},
		{[]any{"EXPIRE", "k", "10"}, "ERR EXPIRE is not supported", "bad_request"},
		{[]any{"INCRBY", "k"}, "ERR wrong number of arguments for 'incrby' command", "bad_request"},
		{[]any{"INCRBY", "k", "x"}, "ERR value is not an integer", "bad_by"},
		{[]any{"INCRBY", "k", fmt.Sprint(int64(1) << 41)}, "ERR by 2199023255552 is out of range", "bad_by"},
		{[]any{"INCR", "a b"}, `ERR key "a b" is not valid`, "bad_id"},
		{[]any{"SADD", "post1", "alice"}, `ERR set key "post1" does not start with "likes:"`, "bad_id"},
		{[]any{"SADD", "likes:", "alice"}, "ERR item is empty", "bad_id"},
		{[]any{"SADD", "likes:p", "al ice"}, `ERR user "al ice" is not valid`, "bad_id"},
		{[]any{"PFCOUNT", "a/b"}, `ERR key "a/b" is not valid`, "bad_id"},
		{[]any{"SELECT", "1"}, "ERR DB index is out of range", "bad_request"},
		{[]any{"AUTH", "x"}, "ERR AUTH called without any token configured", "bad_request"},
		{[]any{"HELLO", "4"}, "NOPROTO unsupported protocol version", "bad_request"},
	}
	for _, tc := range cases {
		wantErr(t, c.Do(ctx, tc.args...).Err(), tc.prefix, tc.code)
		// The same connection (PoolSize 1, no retries) still answers.
		if v, err := c.Ping(ctx).Result(); err != nil || v != "PONG" {
			t.Fatalf("after %v: PING %q %v", tc.args, v, err)
		}
	}
	if v, err := c.SCard(ctx, "likes:p").Result(); err != nil || v != 0 {
		t.Fatalf("refused writes changed state: SCARD %d %v", v, err)
	}
}

// With a write token, writes need AUTH (NOAUTH until then), reads do not;
// a wrong token is WRONGPASS; the token in go-redis's options works.
func TestAuthGuardsWrites(t *testing.T) {
	n := startNode(t, func(c *node.Config) { c.WriteToken = "s3cret" })
	ctx := context.Background()
	c := client(t, n, 2, "")
	wantErr(t, c.Incr(ctx, "k").Err(), "NOAUTH", "unauthorized")
	wantErr(t, c.SAdd(ctx, "likes:p", "alice").Err(), "NOAUTH", "unauthorized")
	wantErr(t, c.PFAdd(ctx, "v", "alice").Err(), "NOAUTH", "unauthorized")
	if err := c.Get(ctx, "k").Err(); err != redis.Nil {
		t.Fatalf("read without AUTH: %v, want nil (never written)", err)
	}
	wantErr(t, c.Do(ctx, "AUTH", "wrong").Err(), "WRONGPASS", "unauthorized")
	wantErr(t, c.Incr(ctx, "k").Err(), "NOAUTH", "unauthorized")
	if err := c.Do(ctx, "AUTH", "s3cret").Err(); err != nil {
		t.Fatalf("AUTH: %v", err)
	}
	if v, err := c.Incr(ctx, "k").Result(); err != nil || v != 1 {
		t.Fatalf("INCR after AUTH: %d %v", v, err)
	}

	// go-redis sends the password with HELLO 3 AUTH, or AUTH for RESP2.
	for _, proto := range []int{2, 3} {
		authed := client(t, n, proto, "s3cret")
		if v, err := authed.SAdd(ctx, "likes:p", fmt.Sprint("u", proto)).Result(); err != nil || v != 1 {
			t.Fatalf("RESP%d with Password: SADD %d %v", proto, v, err)
		}
	}
	bad := client(t, n, 3, "wrong")
	if err := bad.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("connect with a wrong password: %v", err)
	}
}

// A pipeline of 100 commands gets 100 answers in order.
func TestPipeline(t *testing.T) {
	n := startNode(t, nil)
	ctx := context.Background()
	c := client(t, n, 2, "")
	cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range 50 {
			p.Incr(ctx, "piped")
			p.SAdd(ctx, "likes:piped", fmt.Sprint("user", i))
		}
		return nil
	})
	if err != nil || len(cmds) != 100 {
		t.Fatalf("pipeline: %d answers, %v", len(cmds), err)
	}
	for i := range 50 {
		if v := cmds[2*i].(*redis.IntCmd).Val(); v != int64(i+1) {
			t.Fatalf("INCR %d answered %d", i, v)
		}
		if v := cmds[2*i+1].(*redis.IntCmd).Val(); v != 1 {
			t.Fatalf("SADD %d answered %d", i, v)
		}
	}
	if v, err := c.SCard(ctx, "likes:piped").Result(); err != nil || v != 50 {
		t.Fatalf("SCARD: %d %v", v, err)
	}
}

// A command over the size bound is answered with an error, and the
// connection (whose stream cannot be read past it) is closed; other
// connections are served.
func TestRequestSizeBound(t *testing.T) {
	n := startNode(t, func(c *node.Config) { c.MaxBodyBytes = 4096 })
	conn, err := net.Dial("tcp", n.RESPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	big := strings.Repeat("x", 64<<10)
	// The server may close before reading all of it: a write error is fine.
	_, _ = fmt.Fprintf(conn, "*3\r\n$4\r\nSADD\r\n$7\r\nlikes:p\r\n$%d\r\n%s\r\n", len(big), big)
	buf := make([]byte, 512)
	k, _ := conn.Read(buf)
	if got := string(buf[:k]); !strings.HasPrefix(got, "-ERR request exceeds 4096 bytes (code body_too_large)") {
		t.Fatalf("answer to an oversized command: %q", got)
	}
	c := client(t, n, 2, "")
	if v, err := c.Ping(context.Background()).Result(); err != nil || v != "PONG" {
		t.Fatalf("another connection: %q %v", v, err)
	}
}

// QUIT answers OK and ends the connection; Close ends the rest.
func TestQuitAndClose(t *testing.T) {
	n := startNode(t, nil)
	conn, err := net.Dial("tcp", n.RESPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte("PING\r\nQUIT\r\n")); err != nil {
		t.Fatal(err)
	}
	var got []byte
	buf := make([]byte, 64)
	for {
		k, err := conn.Read(buf)
		got = append(got, buf[:k]...)
		if err != nil {
			break
		}
	}
	if string(got) != "+PONG\r\n+OK\r\n" {
		t.Fatalf("PING, QUIT: %q", got)
	}

	idle, err := net.Dial("tcp", n.RESPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	_ = idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := idle.Read(buf); err == nil {
		t.Fatal("a connection outlived Close")
	}
	if _, err := net.Dial("tcp", n.RESPAddr().String()); err == nil {
		t.Fatal("still accepting after Close")
	}
}

// With a read token, reads need AUTH too; a write token opens reads (a
// higher role opens the lower roles' commands, as over HTTP).
func TestAuthGuardsReadsWithAReadToken(t *testing.T) {
	n := startNode(t, func(c *node.Config) { c.ReadToken, c.WriteToken = "look", "touch" })
	ctx := context.Background()
	c := client(t, n, 2, "")
	wantErr(t, c.SCard(ctx, "likes:p").Err(), "NOAUTH", "unauthorized")
	wantErr(t, c.Get(ctx, "k").Err(), "NOAUTH", "unauthorized")
	if v, err := c.Ping(ctx).Result(); err != nil || v != "PONG" {
		t.Fatalf("PING without AUTH: %q %v", v, err)
	}
	if err := c.Do(ctx, "AUTH", "look").Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.SCard(ctx, "likes:p").Result(); err != nil || v != 0 {
		t.Fatalf("SCARD with the read token: %d %v", v, err)
	}
	wantErr(t, c.SAdd(ctx, "likes:p", "alice").Err(), "NOAUTH", "unauthorized")
	if err := c.Do(ctx, "AUTH", "default", "touch").Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.SAdd(ctx, "likes:p", "alice").Result(); err != nil || v != 1 {
		t.Fatalf("SADD with the write token: %d %v", v, err)
	}
	if v, err := c.SCard(ctx, "likes:p").Result(); err != nil || v != 1 {
		t.Fatalf("SCARD with the write token: %d %v", v, err)
	}
}

// A reload's new tokens reach the RESP front door: new connections AUTH
// with the new token, the old one is refused.
func TestReloadedTokens(t *testing.T) {
	n, cfg := startNodeConfig(t, func(c *node.Config) { c.WriteToken = "old" })
	cfg.WriteToken = "new"
	if r, err := n.Reload(cfg); err != nil || len(r.NeedsRestart) != 0 {
		t.Fatalf("reload: %+v %v", r, err)
	}
	ctx := context.Background()
	c := client(t, n, 2, "")
	wantErr(t, c.Do(ctx, "AUTH", "old").Err(), "WRONGPASS", "unauthorized")
	if err := c.Do(ctx, "AUTH", "new").Err(); err != nil {
		t.Fatalf("AUTH with the reloaded token: %v", err)
	}
	if v, err := c.Incr(ctx, "k").Result(); err != nil || v != 1 {
		t.Fatalf("INCR: %d %v", v, err)
	}
}

// A like over RESP takes from the HTTP API's per-user write limit: the
// same user's next like, over either door, is refused with rate_limited.
func TestPerUserWriteLimit(t *testing.T) {
	limit, err := node.ParseLimit("write=user:0.001,user_burst:1") // one like, then one per 1000 s
	if err != nil {
		t.Fatal(err)
	}
	n := startNode(t, func(c *node.Config) { c.Limits = []node.LimitConfig{limit} })
	ctx := context.Background()
	c := client(t, n, 2, "")
	if v, err := c.SAdd(ctx, "likes:p", "alice").Result(); err != nil || v != 1 {
		t.Fatalf("first like: %d %v", v, err)
	}
	wantErr(t, c.SAdd(ctx, "likes:q", "alice").Err(), "ERR", "rate_limited")
	if code, b := testkit.CallJSON(t, "PUT", "http://"+n.Addr().String()+"/v1/likes/r/alice"); code != 429 {
		t.Fatalf("HTTP like after a RESP like: %d %v", code, b)
	}
	if v, err := c.SAdd(ctx, "likes:p", "bob").Result(); err != nil || v != 1 {
		t.Fatalf("another user: %d %v", v, err)
	}
}

// A connection that sends nothing for IdleTimeout is closed.
func TestIdleConnectionsAreClosed(t *testing.T) {
	n := startNode(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := resp.New(resp.Config{Replica: n.Replica(), Listener: ln, IdleTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	idle, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if _, err := idle.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(idle)
	if err != nil || string(got) != "+PONG\r\n" {
		t.Fatalf("idle connection: read %q, %v; want +PONG, then EOF (closed by the server)", got, err)
	}
}
