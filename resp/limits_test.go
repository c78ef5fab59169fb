package resp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/internal/testkit"
	"github.com/tally-dev/tally/node"
)

// respStatus reads /v1/status's resp field.
func respStatus(t *testing.T, n *node.Node) api.RESPStatus {
	t.Helper()
	res, err := http.Get("http://" + n.Addr().String() + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var st api.Status
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if st.RESP == nil {
		t.Fatal("/v1/status has no resp field")
	}
	return *st.RESP
}

// dialPing opens a connection and sees it served.
func dialPing(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 7)
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "+PONG\r\n" {
		t.Fatalf("PING: %q %v", buf, err)
	}
	return conn
}

// Past resp_max_connections, a client gets a Redis error and its
// connection is closed; once one closes, the next is served. /v1/status
// counts what is open, refused and answered.
func TestConnectionCap(t *testing.T) {
	n := startNode(t, func(c *node.Config) { c.RESPMaxConnections = 2 })
	addr := n.RESPAddr().String()
	first := dialPing(t, addr)
	dialPing(t, addr)

	over, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	_ = over.SetDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(over)
	if err != nil || string(got) != "-ERR max number of clients reached: this replica serves at most 2 RESP connections (code rate_limited)\r\n" {
		t.Fatalf("the third connection: %q %v; want the error, then EOF", got, err)
	}

	st := respStatus(t, n)
	if st.Addr != addr || st.Connections != 2 || st.MaxConnections != 2 || st.Refused != 1 || st.Commands != 2 {
		t.Fatalf("status %+v", st)
	}
	_ = first.Close()
	testkit.WaitFor(t, 10*time.Second, func() error {
		if c := respStatus(t, n).Connections; c != 1 {
			return fmt.Errorf("%d connections open", c)
		}
		return nil
	})
	dialPing(t, addr)
}

// RESP commands take from the HTTP API's per-client limits, by class: a
// client over its read limit is refused over both front doors while
// PING and other clients (another token) are served.
func TestPerClientLimit(t *testing.T) {
	read, err := node.ParseLimit("read=client:0.001,client_burst:2") // two reads, then one per 1000 s
	if err != nil {
		t.Fatal(err)
	}
	scan, err := node.ParseLimit("scan=client:0.001,client_burst:1")
	if err != nil {
		t.Fatal(err)
	}
	n := startNode(t, func(c *node.Config) {
		c.Limits = []node.LimitConfig{read, scan}
		c.WriteToken = "w1 w2"
	})
	ctx := context.Background()
	c := client(t, n, 2, "")
	for i := range 2 {
		if err := c.Get(ctx, "k").Err(); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
	}
	wantErr(t, c.SCard(ctx, "likes:p").Err(), "ERR over this replica's read limit per client", "rate_limited")
	// The client is the address: another connection from it shares the
	// bucket, and so does an HTTP request from it.
	wantErr(t, client(t, n, 3, "").Get(ctx, "k").Err(), "ERR", "rate_limited")
	if code, b := testkit.CallJSON(t, "GET", "http://"+n.Addr().String()+"/v1/likes/p"); code != 429 {
		t.Fatalf("HTTP read after RESP reads: %d %v", code, b)
	}
	if v, err := c.Ping(ctx).Result(); err != nil || v != "PONG" {
		t.Fatalf("PING is not limited: %q %v", v, err)
	}
	// Scans are their own class; writes are not limited here.
	if err := c.SMembers(ctx, "likes:p").Err(); err != nil {
		t.Fatalf("first scan: %v", err)
	}
	wantErr(t, c.Do(ctx, "SSCAN", "likes:p", "0").Err(), "ERR over this replica's scan limit per client", "rate_limited")

	// A connection that sent a token is that token's client.
	for _, token := range []string{"w1", "w2"} {
		authed := client(t, n, 2, token)
		for i := range 2 {
			if err := authed.Get(ctx, "k").Err(); err != nil {
				t.Fatalf("token %s: read %d: %v", token, i, err)
			}
		}
		wantErr(t, authed.Get(ctx, "k").Err(), "ERR", "rate_limited")
	}
}
