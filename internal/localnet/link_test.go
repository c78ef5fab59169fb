package localnet

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
)

func TestConnectGateway(t *testing.T) {
	for _, tc := range []struct {
		line, want, err string
	}{
		{line: `CONNECT {"verbose":false,"gateway":"us","name":"X"}` + "\r\n", want: "us"},
		{line: `connect {"gateway":"eu"}` + "\r\n", want: "eu"},
		{line: `CONNECT {"verbose":false}` + "\r\n", err: "not a gateway connection"},
		{line: `CONNECT {nope` + "\r\n", err: "parse CONNECT"},
	} {
		got, err := connectGateway([]byte(tc.line))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("connectGateway(%q) error %v, want %q", tc.line, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("connectGateway(%q) = %q, %v, want %q", tc.line, got, err, tc.want)
		}
	}
}

func TestGatewayHandshakeHoldsBackConnect(t *testing.T) {
	// dialer <-> (client end | ingress | server end) <-> acceptor
	dialer, client := net.Pipe()
	server, acceptor := net.Pipe()
	defer func() {
		for _, c := range []net.Conn{dialer, client, server, acceptor} {
			c.Close()
		}
	}()
	const info = `INFO {"gateway":"eu"}` + "\r\n"
	const connect = `CONNECT {"gateway":"us"}` + "\r\n"
	const dialerInfo = `INFO {"gateway":"us"}` + "\r\n"

	go func() { _, _ = acceptor.Write([]byte(info)) }()
	go func() {
		r := bufio.NewReader(dialer)
		if line, err := r.ReadString('\n'); err != nil || line != info {
			t.Errorf("dialer read %q, %v", line, err)
			return
		}
		_, _ = dialer.Write([]byte(connect + dialerInfo))
	}()

	src, n, cr, _, err := gatewayHandshake(client, server)
	if err != nil {
		t.Fatal(err)
	}
	if src != "us" || n != len(info) {
		t.Fatalf("handshake = %q, %d", src, n)
	}
	// Nothing of the dialer went to the acceptor; the CONNECT and what
	// followed it are still to be read from cr.
	rest := make([]byte, len(connect+dialerInfo))
	if _, err := io.ReadFull(cr, rest); err != nil || string(rest) != connect+dialerInfo {
		t.Fatalf("client reader holds %q, %v", rest, err)
	}
}

func TestGatewayHandshakeRejectsClients(t *testing.T) {
	dialer, client := net.Pipe()
	server, acceptor := net.Pipe()
	defer func() {
		for _, c := range []net.Conn{dialer, client, server, acceptor} {
			c.Close()
		}
	}()
	go func() { _, _ = acceptor.Write([]byte("INFO {}\r\n")) }()
	go func() {
		_, _ = bufio.NewReader(dialer).ReadString('\n')
		_, _ = dialer.Write([]byte(`CONNECT {"verbose":false,"name":"a client"}` + "\r\n"))
	}()
	if _, _, _, _, err := gatewayHandshake(client, server); err == nil {
		t.Fatal("handshake accepted a client connection")
	}
}
