package bench

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/node"
)

// sharedConfig is what the HTTP load modes (likes, events, budget) have
// in common: how the load client talks to the replica, and how the
// replica they start in process (without --url) is set up. Each mode
// embeds it, binds its flags with bind and checks them with validate, so
// every such flag is defined once.
type sharedConfig struct {
	// Timeout bounds one request. Default: the mode's.
	Timeout time.Duration
	// Token is sent as a bearer token. Default: env TALLY_WRITE_TOKEN.
	Token string
	// KeepAlive keeps each worker's connection open from one request to
	// the next; false opens a new connection (with TLS, a new handshake)
	// for every request. Default true.
	KeepAlive bool
	// Durability of the in-process replica: fsync or none. Default fsync.
	Durability string
	// LogLevel of the in-process replica. Default "error".
	LogLevel string
	LogJSON  bool // --log-json
	// TLS serves the in-process replica over HTTPS with a certificate
	// made for the run (ECDSA P-256, for 127.0.0.1), which the load
	// client trusts. Default false.
	TLS bool
	// Limits are the in-process replica's rate limits, as tallyd serve
	// --limit takes them (a later one replaces an earlier one of its
	// class). Default none.
	Limits []node.LimitConfig
}

func defaultSharedConfig(timeout time.Duration) sharedConfig {
	return sharedConfig{Timeout: timeout, KeepAlive: true, Durability: "fsync", LogLevel: "error"}
}

// inProcessFlags are the flags that configure the in-process replica,
// which mean nothing with --url.
var inProcessFlags = []string{"durability", "log-level", "log-json", "tls", "limit"}

// bind defines the shared flags on fs; replicas is how the mode's help
// names what it starts ("replica" or "replicas").
func (c *sharedConfig) bind(fs *flag.FlagSet, replicas string) {
	fs.DurationVar(&c.Timeout, "timeout", c.Timeout, "bound on one request")
	fs.StringVar(&c.Token, "token", c.Token, "bearer `token` for the write routes (env "+envWriteToken+")")
	fs.BoolVar(&c.KeepAlive, "keep-alive", c.KeepAlive, "keep each worker's connection open between requests (false: a new connection, with --tls a new handshake, per request)")
	fs.StringVar(&c.Durability, "durability", c.Durability, "`mode` of the in-process "+replicas+": fsync or none")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log `level` of the in-process "+replicas)
	fs.BoolVar(&c.LogJSON, "log-json", c.LogJSON, "log JSON lines instead of text")
	fs.BoolVar(&c.TLS, "tls", c.TLS, "serve the in-process "+replicas+" over HTTPS with a certificate made for the run, which the load client trusts")
	fs.Func("limit", "rate limit of the in-process "+replicas+", as tallyd serve --limit takes it: `CLASS=KEY:N,...` (repeatable; e.g. write=client:1e9 runs the limiter on every write without refusing any)", func(s string) error {
		lc, err := node.ParseLimit(s)
		if err != nil {
			return err
		}
		for i := range c.Limits {
			if c.Limits[i].Class == lc.Class {
				c.Limits[i] = lc
				return nil
			}
		}
		c.Limits = append(c.Limits, lc)
		return nil
	})
}

// validate reports every problem with the shared settings through bad.
func (c sharedConfig) validate(bad func(format string, args ...any)) {
	if c.Timeout <= 0 {
		bad("--timeout %s: want more than 0", c.Timeout)
	}
	if !node.ValidToken(c.Token) {
		bad("--token: must be printable ASCII without spaces")
	}
	if c.Durability != "fsync" && c.Durability != "none" {
		bad("--durability %q: want fsync or none", c.Durability)
	}
	if hclog.LevelFromString(c.LogLevel) == hclog.NoLevel {
		bad("--log-level %q: want trace, debug, info, warn or error", c.LogLevel)
	}
}

// logger is the in-process replica's logger.
func (c sharedConfig) logger(out io.Writer) hclog.Logger {
	return newLogger(out, c.LogLevel, c.LogJSON)
}

// newLogger is a bench command's logger: level as --log-level names it,
// JSON lines with --log-json.
func newLogger(out io.Writer, level string, json bool) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "tallyd", Level: hclog.LevelFromString(level), Output: out, JSONFormat: json})
}

// edge describes the in-process replica's HTTP edge for a target line.
func (c sharedConfig) edge() string {
	var parts []string
	if c.TLS {
		parts = append(parts, "TLS")
	}
	for _, lc := range c.Limits {
		parts = append(parts, "limit "+lc.String())
	}
	if !c.KeepAlive {
		parts = append(parts, "a new connection per request")
	}
	if len(parts) == 0 {
		return ""
	}
	return ", " + strings.Join(parts, ", ")
}

// urlOnly returns an error for every in-process flag that was set
// (set[name]) although --url is given: it would be silently ignored.
func urlOnly(set map[string]bool, names []string) []error {
	var errs []error
	for _, name := range names {
		if set[name] {
			errs = append(errs, fmt.Errorf("--%s configures the in-process replicas: leave it out with --url", name))
		}
	}
	return errs
}

// flagsSet is the names of the flags fs was given.
func flagsSet(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// benchCert is a self-signed certificate for 127.0.0.1 and localhost,
// as PEM files, and the client configuration that trusts it.
type benchCert struct {
	CertFile, KeyFile string
	Client            *tls.Config
}

// newBenchCert makes a fresh ECDSA P-256 key and a self-signed
// certificate valid for a day, and writes them to dir.
func newBenchCert(dir string) (*benchCert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("bench: tls key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, fmt.Errorf("bench: tls serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "tallyd bench"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("bench: tls certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("bench: tls certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("bench: tls key: %w", err)
	}
	c := &benchCert{CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	if err := errors.Join(
		os.WriteFile(c.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644),
		os.WriteFile(c.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600),
	); err != nil {
		return nil, fmt.Errorf("bench: tls files: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	c.Client = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	return c, nil
}
