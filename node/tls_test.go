package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// get answers the status of a GET, or the error of a client that could
// not make the request at all (a refused handshake).
func get(c *http.Client, url string) (int, error) {
	res, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode, nil
}

// servedSerial is the serial number of the certificate the server shows.
func servedSerial(t *testing.T, c *http.Client, url string) int64 {
	t.Helper()
	res, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	return res.TLS.PeerCertificates[0].SerialNumber.Int64()
}

func TestHTTPSAndClientCertificates(t *testing.T) {
	certs := testkit.NewCerts(t)
	cfg := standalone(t.TempDir())
	cfg.TLSCert, cfg.TLSKey = certs.Cert, certs.Key
	n := startT(t, cfg)
	url := "https://" + n.Addr().String()

	if code, err := get(certs.Client(t, false), url+"/v1/likes/p"); err != nil || code != 200 {
		t.Fatalf("HTTPS without client certificates: %d %v", code, err)
	}
	// Plain HTTP on the HTTPS port gets net/http's 400, never the API.
	if code, err := get(http.DefaultClient, "http://"+n.Addr().String()+"/v1/likes/p"); err == nil && code != http.StatusBadRequest {
		t.Fatalf("plain HTTP on the HTTPS listener: %d", code)
	}
	if code, b := callJSON(t, certs.Client(t, false), url+"/v1/status"); code != 200 || b["edge"].(map[string]any)["tls"] != true ||
		b["edge"].(map[string]any)["client_certs"] != false {
		t.Fatalf("status: %d %v", code, b["edge"])
	}
	_ = n.Close(context.Background())

	// With a client CA, a client without a certificate is refused at the
	// handshake, one with a certificate from the CA is served.
	cfg.TLSClientCA = certs.CA
	n = startT(t, cfg)
	url = "https://" + n.Addr().String()
	if _, err := get(certs.Client(t, false), url+"/v1/likes/p"); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	if code, err := get(certs.Client(t, true), url+"/v1/likes/p"); err != nil || code != 200 {
		t.Fatalf("a client with a certificate from the CA: %d %v", code, err)
	}
	// A certificate from another CA is refused too.
	other := testkit.NewCerts(t)
	foreign := other.Client(t, true)
	foreign.Transport.(*http.Transport).TLSClientConfig.RootCAs = certs.Client(t, false).Transport.(*http.Transport).TLSClientConfig.RootCAs
	if _, err := get(foreign, url+"/v1/likes/p"); err == nil {
		t.Fatal("a client certificate from another CA was accepted")
	}
	if code, b := callJSON(t, certs.Client(t, true), url+"/v1/status"); code != 200 || b["edge"].(map[string]any)["client_certs"] != true {
		t.Fatalf("status: %d %v", code, b["edge"])
	}
}

func TestCertificateReloadsOnChangeAndReload(t *testing.T) {
	certs := testkit.NewCerts(t)
	cfg := standalone(t.TempDir())
	cfg.TLSCert, cfg.TLSKey = certs.Cert, certs.Key
	n := startT(t, cfg)
	url := "https://" + n.Addr().String() + "/healthz"
	c := certs.Client(t, false)
	first := servedSerial(t, c, url)

	// A renewal on disk is picked up by the watcher.
	renewed := certs.Issue(t, "localhost", certs.Cert, certs.Key)
	if renewed == first {
		t.Fatal("test issued the same serial")
	}
	testkit.WaitFor(t, 4*certWatchInterval, func() error {
		if got := servedSerial(t, c, url); got != renewed {
			return errorf("serving serial %d, want %d", got, renewed)
		}
		return nil
	})

	// Reload (SIGHUP) reads the files at once, and a broken file keeps the
	// certificate in force.
	again := certs.Issue(t, "localhost", certs.Cert, certs.Key)
	r, err := n.Reload(cfg)
	if err != nil || strings.Join(r.Applied, ",") != "tls_cert" || len(r.NeedsRestart) != 0 {
		t.Fatalf("reload: %+v %v", r, err)
	}
	if got := servedSerial(t, c, url); got != again {
		t.Fatalf("after Reload serving serial %d, want %d", got, again)
	}
	broken := cfg
	broken.TLSKey = certs.ClientKey // does not match the certificate
	if _, err := n.Reload(broken); err == nil {
		t.Fatal("a key that does not match the certificate was accepted")
	}
	if got := servedSerial(t, c, url); got != again {
		t.Fatalf("after a failed reload serving serial %d, want %d", got, again)
	}
}

func TestReloadAppliesTokensLimitsAndLevel(t *testing.T) {
	cfg := standalone(t.TempDir())
	root := hclog.New(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Info})
	n, err := Start(context.Background(), cfg, Options{Logger: root})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	base := "http://" + n.Addr().String()
	next := cfg
	next.WriteToken = "w-new"
	next.Limits = []LimitConfig{{Class: "write", Client: 0.001, ClientBurst: 1}}
	next.LogLevel = "debug"
	next.DrainDelay = "1s"
	next.PeerTimeout = "9s"
	r, err := n.Reload(next)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.Applied, ","); got != "log_level,write_token,limit,drain_delay" {
		t.Fatalf("applied %s", got)
	}
	if got := strings.Join(r.NeedsRestart, ","); got != "peer_timeout" {
		t.Fatalf("needs restart %s", got)
	}
	if !root.IsDebug() {
		t.Fatal("log level not applied to the process's logger")
	}
	if code, _ := testkit.CallJSON(t, "PUT", base+"/v1/likes/p/u"); code != 401 {
		t.Fatalf("write without the new token: %d", code)
	}
	// A reload that does not validate changes nothing.
	bad := next
	bad.WriteToken, bad.ReadToken = "ok", "has\ttab"
	if _, err := n.Reload(bad); err == nil {
		t.Fatal("an invalid token was reloaded")
	}
	if n.cfg.WriteToken != "w-new" {
		t.Fatal("a failed reload changed the config")
	}
	// Reloading the same config again applies nothing.
	if r, err := n.Reload(next); err != nil || len(r.Applied) != 0 {
		t.Fatalf("second reload: %+v %v", r, err)
	}
}

func TestDrainFailsReadinessThenWaits(t *testing.T) {
	cfg := standalone(t.TempDir())
	cfg.DrainDelay = "300ms"
	n := startT(t, cfg)
	base := "http://" + n.Addr().String()
	testkit.WaitFor(t, 10*time.Second, func() error {
		if code, _ := testkit.CallJSON(t, "GET", base+"/readyz"); code != 200 {
			return errorf("readyz %d", code)
		}
		return nil
	})
	done := make(chan struct{})
	go func() { n.Drain(context.Background()); close(done) }()
	testkit.WaitFor(t, 10*time.Second, func() error {
		if code, b := testkit.CallJSON(t, "GET", base+"/readyz"); code != 503 || b["code"] != "draining" {
			return errorf("readyz %d %v", code, b)
		}
		return nil
	})
	// Still serving while load balancers move away.
	if code, _ := testkit.CallJSON(t, "PUT", base+"/v1/likes/p/u"); code != 200 {
		t.Fatalf("like while draining: %d", code)
	}
	<-done
}

func TestListenBeyondLoopbackNeedsProtectionOrOptIn(t *testing.T) {
	cfg := standalone(t.TempDir())
	cfg.Listen = "0.0.0.0:0"
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "without TLS") || !strings.Contains(err.Error(), "without a write token") {
		t.Fatalf("public listener, no TLS, no token: %v", err)
	}
	cfg.TLSCert, cfg.TLSKey = "c.pem", "k.pem"
	if err := cfg.Validate(); err == nil || strings.Contains(err.Error(), "without TLS") {
		t.Fatalf("public listener with TLS, no token: %v", err)
	}
	cfg.WriteToken = "w"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "without an admin token") {
		t.Fatalf("public listener with TLS and a write token, no admin token: %v", err)
	}
	cfg.AdminToken = "a"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("public listener with TLS and tokens: %v", err)
	}
	cfg.TLSCert, cfg.TLSKey, cfg.WriteToken, cfg.InsecureListen = "", "", "", true
	if err := cfg.Validate(); err != nil {
		t.Fatalf("public listener with the opt-in: %v", err)
	}
	// insecure_listen does not open the admin routes: that is its own,
	// explicit opt-out.
	cfg.AdminToken = ""
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "without an admin token") {
		t.Fatalf("insecure_listen without an admin token: %v", err)
	}
	cfg.InsecureOpenAdmin = true
	if err := cfg.Validate(); err != nil {
		t.Fatalf("public listener with both opt-outs: %v", err)
	}
	for _, l := range []string{"127.0.0.1:0", "localhost:8080", "[::1]:8080"} {
		c := standalone(t.TempDir())
		c.Listen = l
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", l, err)
		}
	}
	c := standalone(t.TempDir())
	c.TLSClientCA = "ca.pem"
	if err := c.Validate(); err == nil {
		t.Error("a client CA without a certificate was accepted")
	}
	c.TLSClientCA, c.TLSCert = "", "c.pem"
	if err := c.Validate(); err == nil {
		t.Error("a certificate without its key was accepted")
	}
}

func TestParseLimit(t *testing.T) {
	lc, err := ParseLimit("write=client:100,client_burst:300,user:2.5")
	if err != nil || lc != (LimitConfig{Class: "write", Client: 100, ClientBurst: 300, User: 2.5}) {
		t.Fatalf("%+v %v", lc, err)
	}
	if lc.String() != "write=client:100,client_burst:300,user:2.5" {
		t.Fatalf("String %q", lc.String())
	}
	for _, s := range []string{"write", "write=", "writes=client:1", "write=client", "write=client:x",
		"write=clients:1", "write=client_burst:1.5", "read=user:1", "write=client:-1"} {
		if _, err := ParseLimit(s); err == nil {
			t.Errorf("%q: no error", s)
		}
	}
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// callJSON GETs url with c and decodes the JSON object answered.
func callJSON(t *testing.T, c *http.Client, url string) (int, map[string]any) {
	t.Helper()
	res, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var b map[string]any
	if err := json.NewDecoder(res.Body).Decode(&b); err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, b
}

func TestTrustedProxiesParse(t *testing.T) {
	c := standalone(t.TempDir())
	c.TrustedProxies = []string{"10.0.0.0/8", "192.0.2.1", "::ffff:198.51.100.9", "2001:db8::/32"}
	ps, err := c.trustedProxies()
	if err != nil || fmt.Sprint(ps) != "[10.0.0.0/8 192.0.2.1/32 198.51.100.9/32 2001:db8::/32]" {
		t.Fatalf("%v %v", ps, err)
	}
	c.TrustedProxies = []string{"10.0.0.0/33"}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "trusted_proxies") {
		t.Fatalf("a bad prefix: %v", err)
	}
}

// A node on every interface with an admin token refuses anonymous admin
// calls on its real listener, and a reload cannot take the admin token
// away while it listens beyond loopback.
func TestPublicNodeKeepsAdminClosed(t *testing.T) {
	certs := testkit.NewCerts(t)
	cfg := standalone(t.TempDir())
	cfg.Listen, cfg.TLSCert, cfg.TLSKey, cfg.WriteToken, cfg.AdminToken = "0.0.0.0:0", certs.Cert, certs.Key, "w", "a"
	n := startT(t, cfg)
	_, port, _ := net.SplitHostPort(n.Addr().String())
	url := "https://127.0.0.1:" + port
	c := certs.Client(t, false)
	if code, b := callJSON(t, c, url+"/v1/audit"); code != http.StatusUnauthorized || b["code"] != "unauthorized" {
		t.Fatalf("anonymous audit: %d %v", code, b)
	}
	open := cfg
	open.AdminToken = ""
	if _, err := n.Reload(open); err == nil || !strings.Contains(err.Error(), "without an admin token") {
		t.Fatalf("reload dropping the admin token: %v", err)
	}
	if code, b := callJSON(t, c, url+"/v1/audit"); code != http.StatusUnauthorized {
		t.Fatalf("anonymous audit after the refused reload: %d %v", code, b)
	}
}
