package resp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/internal/base/testkit"
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
		if err := c.Get(ctx, "k").Err(); err != redis.Nil { // never written: nil
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
			if err := authed.Get(ctx, "k").Err(); err != redis.Nil {
				t.Fatalf("token %s: read %d: %v", token, i, err)
			}
		}
		wantErr(t, authed.Get(ctx, "k").Err(), "ERR", "rate_limited")
	}
}

// metric reads one sample of n's /metrics (the line starting with
// name, labels included), 0 if absent.
func metric(t *testing.T, n *node.Node, name string) float64 {
	t.Helper()
	res, err := http.Get("http://" + n.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			return f
		}
	}
	return 0
}

// dialFrom opens a connection to addr from the loopback address src.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	return conn
}

// 1,100 idle connections from one address take that address's share
// (resp_max_connections_per_address, default 256), not the replica's:
// the rest from it are refused, and a client from another address is
// served. The replica's own bound is set to 1,000 here, below the
// flood, so without the per-address bound the flood would take it all
// and this test would fail.
func TestPerAddressConnectionLimit(t *testing.T) {
	n := startNode(t, func(c *node.Config) { c.RESPMaxConnections = 1000 })
	addr := n.RESPAddr().String()
	for range 1100 {
		dialFrom(t, "127.0.0.1", addr)
	}
	other := dialFrom(t, "127.0.0.2", addr)
	buf := make([]byte, 7)
	if _, err := other.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(other, buf); err != nil || string(buf) != "+PONG\r\n" {
		t.Fatalf("PING from another address: %q %v", buf, err)
	}
	over := dialFrom(t, "127.0.0.1", addr)
	got, err := io.ReadAll(over)
	if err != nil || string(got) != "-ERR max number of clients reached for your address: "+
		"this replica serves at most 256 RESP connections from one address (code rate_limited)\r\n" {
		t.Fatalf("one more from the flooding address: %q %v; want the error, then EOF", got, err)
	}
	st := respStatus(t, n)
	if st.Connections != 257 || st.Refused != 1100-256+1 {
		t.Fatalf("status %+v, want 257 open (256 + the other address), %d refused", st, 1100-256+1)
	}
	if v := metric(t, n, `tally_resp_connections_refused_total{reason="per_address"}`); v != 1100-256+1 {
		t.Fatalf("refused per address: metric %v", v)
	}
	if v := metric(t, n, "tally_resp_connections"); v != 257 {
		t.Fatalf("open connections: metric %v", v)
	}
}

// authOnce sends AUTH token on conn and returns the reply line and how
// long it took.
func authOnce(t *testing.T, conn net.Conn, token string) (string, time.Duration) {
	t.Helper()
	start := time.Now()
	if _, err := fmt.Fprintf(conn, "AUTH %s\r\n", token); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 512)
	k, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimRight(string(buf[:k]), "\r\n"), time.Since(start)
}

// Wrong AUTH tokens are slowed per address: an address's first ten
// failures are answered at once, the next waits for its bucket to
// refill (one a second), another address is not slowed, and the HTTP
// API's bearer check shares the bucket. Both doors count failures.
func TestWrongAuthIsSlowed(t *testing.T) {
	n := startNode(t, func(c *node.Config) { c.WriteToken = "s3cret" })
	addr := n.RESPAddr().String()
	guesser := dialFrom(t, "127.0.0.1", addr)
	// The bucket holds 10 and refills one a second, so the 11th wrong
	// token is checked a second after the first, the 12th two seconds
	// after, and a 13th (over HTTP) three, however fast they are sent.
	start := time.Now()
	for i := range 10 {
		if got, d := authOnce(t, guesser, "guess"); !strings.HasPrefix(got, "-WRONGPASS") || d > 700*time.Millisecond {
			t.Fatalf("guess %d: %q in %v, want WRONGPASS at once", i, got, d)
		}
	}
	for i := 10; i < 12; i++ {
		if got, _ := authOnce(t, guesser, "guess"); !strings.HasPrefix(got, "-WRONGPASS") {
			t.Fatalf("guess %d: %q, want WRONGPASS", i, got)
		}
	}
	if d := time.Since(start); d < 1900*time.Millisecond {
		t.Fatalf("12 wrong tokens answered in %v, want at least 2 s (10 free, then one a second)", d)
	}
	other := dialFrom(t, "127.0.0.2", addr)
	if got, d := authOnce(t, other, "s3cret"); got != "+OK" || d > 700*time.Millisecond {
		t.Fatalf("AUTH from another address: %q in %v, want OK at once", got, d)
	}
	if v := metric(t, n, "tally_resp_auth_failures_total"); v != 12 {
		t.Fatalf("RESP auth failures: metric %v, want 12", v)
	}

	// The HTTP API's bearer check waits on the same bucket, and pays in.
	req, err := http.NewRequest("POST", "http://"+n.Addr().String()+"/v1/counters/k/incr", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer guess")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if d := time.Since(start); res.StatusCode != http.StatusUnauthorized || d < 2900*time.Millisecond {
		t.Fatalf("HTTP with a wrong token from the guessing address: %d, %v after the first guess; want 401 after 3 s", res.StatusCode, d)
	}
	if v := metric(t, n, "tally_http_auth_failures_total"); v != 1 {
		t.Fatalf("HTTP auth failures: metric %v, want 1", v)
	}
	// Guessing on past the longest wait (10 s of debt) is refused
	// unchecked, even with the right token.
	var guessers sync.WaitGroup
	defer guessers.Wait()
	for range 30 {
		guessers.Go(func() { // concurrent guessers from the address: each adds a second of debt
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			_, _ = fmt.Fprintf(c, "AUTH guess\r\n")
			_, _ = c.Read(make([]byte, 128))
		})
	}
	probe := dialFrom(t, "127.0.0.1", addr)
	testkit.WaitFor(t, 30*time.Second, func() error {
		if got, _ := authOnce(t, probe, "s3cret"); !strings.Contains(got, "too many wrong tokens from your address") ||
			!strings.Contains(got, "(code rate_limited)") {
			return fmt.Errorf("AUTH from the guessing address: %q, want it refused", got)
		}
		return nil
	})
	if v := metric(t, n, "tally_resp_auth_refused_total"); v < 1 {
		t.Fatalf("refused AUTHs: metric %v", v)
	}
}
