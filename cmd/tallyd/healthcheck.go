package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"
)

// healthcheckConfig is what `tallyd healthcheck` takes.
type healthcheckConfig struct {
	// URL is what is asked: the replica's base URL (--url, as every
	// command takes it) with /healthz appended, or the full URL given.
	URL     string
	Timeout time.Duration
	CA      string // PEM file of the CA of an HTTPS replica's certificate
}

// defaultHealthBase is a replica's own address where tallyd is tried
// first: the first replica of `tallyd local` (its --port), not the
// dashboard beside it. The container image's HEALTHCHECK names its
// replica's listener with --url.
var defaultHealthBase = "http://127.0.0.1:" + strconv.Itoa(defaultLocalConfig().Port)

func parseHealthcheck(args []string, help io.Writer) (healthcheckConfig, error) {
	hc := healthcheckConfig{URL: defaultHealthBase, Timeout: 3 * time.Second}
	fs := newFlagSet("healthcheck", func(fs *flag.FlagSet) {
		fs.StringVar(&hc.URL, "url", hc.URL, "the replica's base `url` (its /healthz is asked; a full URL such as .../readyz is asked as given); exit 0 only on a 200 answer")
		fs.DurationVar(&hc.Timeout, "timeout", hc.Timeout, "give up after this `duration`")
		fs.StringVar(&hc.CA, "ca", hc.CA, "PEM `file` of the CA that signed an https url's certificate (default: the system's)")
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(help, fs)
			return hc, err
		}
		return hc, usagef("healthcheck: %v (run 'tallyd help healthcheck')", err)
	}
	if fs.NArg() > 0 {
		return hc, usagef("healthcheck: unexpected argument %q", fs.Arg(0))
	}
	u, err := url.Parse(hc.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return hc, usagef("healthcheck: --url %q: want the replica's base URL, http://host:port or https://...", hc.URL)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/healthz"
		hc.URL = u.String()
	}
	if hc.Timeout <= 0 {
		return hc, usagef("healthcheck: --timeout %v: want more than 0", hc.Timeout)
	}
	return hc, nil
}

// healthcheck asks a replica whether it lives, for container runtimes
// whose image has no curl (the HEALTHCHECK of deploy/docker/Dockerfile):
// exit 0 on 200, 1 with the answer's first line otherwise.
func (c *cli) healthcheck(ctx context.Context, args []string) error {
	hc, err := parseHealthcheck(args, c.stdout)
	if err != nil {
		return err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // the replica is local to the check; never via $HTTP_PROXY
	if hc.CA != "" {
		pem, err := os.ReadFile(hc.CA)
		if err != nil {
			return usagef("healthcheck: --ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return usagef("healthcheck: --ca %s: no PEM certificate in it", hc.CA)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, hc.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, hc.URL, nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s: %s: %s", hc.URL, resp.Status, body)
	}
	fmt.Fprintf(c.stdout, "%s: %s\n", hc.URL, body)
	return nil
}
