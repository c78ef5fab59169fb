package node

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// certWatchInterval is how often the certificate files are checked for a
// change (a renewal writes new files; SIGHUP reloads at once).
const certWatchInterval = 5 * time.Second

// certs serves the API's TLS certificate and client CA from files, and
// reloads them when they change. A reload that fails (a half-written
// file, a key that does not match) keeps the previous pair and is logged:
// the listener never goes without a certificate.
type certs struct {
	certFile, keyFile, caFile string
	log                       hclog.Logger

	mu    sync.Mutex
	cert  *tls.Certificate
	pool  *x509.CertPool // nil without client certificates
	stamp string         // the files' sizes and times when last loaded

	stop chan struct{}
	done chan struct{}
}

func newCerts(certFile, keyFile, caFile string, log hclog.Logger) (*certs, error) {
	c := &certs{certFile: certFile, keyFile: keyFile, caFile: caFile, log: log}
	if err := c.reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// stampOf describes the files' sizes and modification times: when it
// changes, they are read again.
func (c *certs) stampOf() string {
	c.mu.Lock()
	files := []string{c.certFile, c.keyFile, c.caFile}
	c.mu.Unlock()
	s := ""
	for _, f := range files {
		if f == "" {
			continue
		}
		if fi, err := os.Stat(f); err == nil {
			s += fmt.Sprintf("%s:%d:%d;", f, fi.Size(), fi.ModTime().UnixNano())
		} else {
			s += f + ":missing;"
		}
	}
	return s
}

// reload reads the files. On error the previous certificate stays.
func (c *certs) reload() error {
	stamp := c.stampOf()
	c.mu.Lock()
	certFile, keyFile, caFile := c.certFile, c.keyFile, c.caFile
	c.mu.Unlock()
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return fmt.Errorf("tls_cert %s, tls_key %s: %w", certFile, keyFile, err)
	}
	if cert.Leaf == nil || time.Now().After(cert.Leaf.NotAfter) {
		return fmt.Errorf("tls_cert %s: expired or unreadable", certFile)
	}
	var pool *x509.CertPool
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return fmt.Errorf("tls_client_ca: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("tls_client_ca %s: no PEM certificate in it", caFile)
		}
	}
	c.mu.Lock()
	c.cert, c.pool, c.stamp = &cert, pool, stamp
	c.mu.Unlock()
	return nil
}

// changed reports whether the files differ from what was last loaded.
func (c *certs) changed() bool {
	s := c.stampOf()
	c.mu.Lock()
	defer c.mu.Unlock()
	return s != c.stamp
}

// notAfter is when the served certificate expires.
func (c *certs) notAfter() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cert.Leaf.NotAfter
}

// config is the listener's TLS configuration. The certificate and the
// client CA are looked up per handshake, so a reload applies to the next
// connection.
func (c *certs) config() *tls.Config {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.cert, nil
		},
	}
	if c.pool != nil {
		// The chain is verified here, against the CA in force, rather than
		// by crypto/tls against a pool fixed in the config.
		cfg.ClientAuth = tls.RequireAnyClientCert
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("tls: a client certificate is required")
			}
			c.mu.Lock()
			pool := c.pool
			c.mu.Unlock()
			inter := x509.NewCertPool()
			for _, ic := range cs.PeerCertificates[1:] {
				inter.AddCert(ic)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
				Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			})
			return err
		}
	}
	return cfg
}

// watch reloads the files when they change, until close.
func (c *certs) watch() {
	c.stop, c.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(c.done)
		t := time.NewTicker(certWatchInterval)
		defer t.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-t.C:
				if c.changed() {
					c.reloadAndLog("files changed")
				}
			}
		}
	}()
}

// reloadAndLog reloads and says what happened.
func (c *certs) reloadAndLog(why string) {
	if err := c.reload(); err != nil {
		c.log.Error("TLS certificate not reloaded; serving the previous one", "why", why, "error", err)
		return
	}
	c.log.Info("TLS certificate reloaded", "why", why, "not_after", c.notAfter().UTC().Format(time.RFC3339))
}

func (c *certs) close() {
	if c.stop != nil {
		close(c.stop)
		<-c.done
	}
}
