package resp_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/node"
)

// With tls_cert, RESP is served over TLS with the HTTP listener's
// certificate: a TLS client is served, a plain one is not, and a reload
// of a renewed certificate reaches the next RESP connection.
func TestRESPOverTLS(t *testing.T) {
	certs := testkit.NewCerts(t)
	n, cfg := startNodeConfig(t, func(c *node.Config) { c.TLSCert, c.TLSKey = certs.Cert, certs.Key })
	pemCA, err := os.ReadFile(certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemCA)
	tcfg := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: n.RESPAddr().String(), TLSConfig: tcfg, MaxRetries: -1, PoolSize: 1})
	t.Cleanup(func() { _ = c.Close() })
	if v, err := c.Incr(ctx, "tls").Result(); err != nil || v != 1 {
		t.Fatalf("INCR over TLS: %d %v", v, err)
	}

	plain, err := net.Dial("tcp", n.RESPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	_ = plain.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := plain.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	if got, _ := io.ReadAll(plain); len(got) > 0 && string(got[:min(len(got), 5)]) == "+PONG" {
		t.Fatalf("a plain client was served: %q", got)
	}

	// serial is the serial number of the certificate a new RESP
	// connection is served with.
	serial := func() string {
		conn, err := tls.Dial("tcp", n.RESPAddr().String(), tcfg)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := serial()
	renewed := certs.Issue(t, "localhost", certs.Cert, certs.Key)
	if r, err := n.Reload(cfg); err != nil || len(r.NeedsRestart) != 0 {
		t.Fatalf("reload: %+v %v", r, err)
	}
	if after := serial(); after != fmt.Sprint(renewed) || after == before {
		t.Fatalf("after a reload: serial %s, want %d (was %s)", after, renewed, before)
	}
	if v, err := c.Incr(ctx, "tls").Result(); err != nil || v != 2 {
		t.Fatalf("INCR after the reload: %d %v", v, err)
	}
}

// Over TLS, a connection over the per-address bound is closed at once,
// without the error (which would need a handshake on the accept loop): a
// refused client that never starts one holds nobody up.
func TestRESPOverTLSRefusesWithoutHandshake(t *testing.T) {
	certs := testkit.NewCerts(t)
	n := startNode(t, func(c *node.Config) {
		c.TLSCert, c.TLSKey, c.RESPMaxConnectionsPerAddress = certs.Cert, certs.Key, 1
	})
	addr := n.RESPAddr().String()
	dialFrom(t, "127.0.0.1", addr) // takes the address's one connection; never handshakes
	start := time.Now()
	silent := dialFrom(t, "127.0.0.1", addr) // refused; sends nothing
	if _, err := io.ReadAll(silent); err != nil || time.Since(start) > 5*time.Second {
		t.Fatalf("a refused connection: %v after %v, want closed at once", err, time.Since(start))
	}
	pemCA, err := os.ReadFile(certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemCA)
	d := &tls.Dialer{NetDialer: &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 5 * time.Second},
		Config: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}}
	conn, err := d.DialContext(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 7)
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "+PONG\r\n" {
		t.Fatalf("another address over TLS: %q %v", buf, err)
	}
}
