package node

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Reloaded says what a Reload changed: the settings it applied, and the
// changed settings that only a restart applies. Names only: a token's
// value never appears.
type Reloaded struct {
	Applied      []string
	NeedsRestart []string
}

// reloadState serializes reloads of one node (SIGHUP twice in a row)
// and guards the settings they change.
type reloadState struct {
	mu sync.Mutex
}

// Reload applies what can change safely in a running replica from cfg, a
// fresh load of its configuration: the log level, the tokens, the rate
// limits, the drain delay, and the TLS certificate and client CA (read
// again from their files even if their paths did not change). Every
// other changed field is reported in NeedsRestart and left as it was. An
// invalid cfg changes nothing.
func (n *Node) Reload(cfg Config) (Reloaded, error) {
	n.reload.mu.Lock()
	defer n.reload.mu.Unlock()
	var r Reloaded
	if err := cfg.Validate(); err != nil {
		return r, fmt.Errorf("reload: %w", err)
	}
	old := n.cfg
	// TLS first: a certificate that does not load refuses the whole reload.
	if n.certs != nil && cfg.TLSCert != "" {
		next, err := newCerts(cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA, n.certs.log)
		if err != nil {
			return r, fmt.Errorf("reload: %w", err)
		}
		if (old.TLSClientCA == "") == (cfg.TLSClientCA == "") {
			n.certs.swap(next)
			r.Applied = append(r.Applied, "tls_cert")
			if cfg.TLSClientCA != "" {
				r.Applied = append(r.Applied, "tls_client_ca")
			}
			old.TLSCert, old.TLSKey, old.TLSClientCA = cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA
		}
	}
	if cfg.LogLevel != old.LogLevel {
		n.log.SetLevel(hclog.LevelFromString(cfg.LogLevel))
		r.Applied = append(r.Applied, "log_level")
		old.LogLevel = cfg.LogLevel
	}
	if cfg.ReadToken != old.ReadToken || cfg.WriteToken != old.WriteToken || cfg.AdminToken != old.AdminToken {
		for _, t := range []struct{ name, was, is string }{
			{"read_token", old.ReadToken, cfg.ReadToken},
			{"write_token", old.WriteToken, cfg.WriteToken},
			{"admin_token", old.AdminToken, cfg.AdminToken},
		} {
			if t.was != t.is {
				r.Applied = append(r.Applied, t.name)
			}
		}
		n.api.SetTokens(cfg.ReadToken, cfg.WriteToken, cfg.AdminToken)
		if n.resp != nil {
			n.resp.SetTokens(cfg.ReadToken, cfg.WriteToken, cfg.AdminToken)
		}
		old.ReadToken, old.WriteToken, old.AdminToken = cfg.ReadToken, cfg.WriteToken, cfg.AdminToken
	}
	if !slices.Equal(cfg.Limits, old.Limits) {
		if err := n.api.SetLimits(cfg.apiLimits()); err != nil {
			return r, fmt.Errorf("reload: %w", err) // Validate checked them; cannot happen
		}
		r.Applied = append(r.Applied, "limit")
		old.Limits = cfg.Limits
	}
	if cfg.DrainDelay != old.DrainDelay {
		r.Applied = append(r.Applied, "drain_delay")
		old.DrainDelay = cfg.DrainDelay
	}
	// What is left different needs a restart. The listener's checks
	// (insecure_listen against a token removed now) were made at start.
	a, b := reflect.ValueOf(old), reflect.ValueOf(cfg)
	for i := range a.NumField() {
		if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			name, _, _ := strings.Cut(a.Type().Field(i).Tag.Get("hcl"), ",")
			r.NeedsRestart = append(r.NeedsRestart, name)
		}
	}
	n.cfg = old
	return r, nil
}

// swap takes next's certificate and CA (a reload through Reload).
func (c *certs) swap(next *certs) {
	next.mu.Lock()
	cert, pool, stamp := next.cert, next.pool, next.stamp
	next.mu.Unlock()
	c.mu.Lock()
	c.certFile, c.keyFile, c.caFile = next.certFile, next.keyFile, next.caFile
	c.cert, c.pool, c.stamp = cert, pool, stamp
	c.mu.Unlock()
}

// Drain makes /readyz fail, then waits the drain delay (or until ctx
// ends), so that load balancers stop sending traffic before Close stops
// the listener. Everything is still served meanwhile.
func (n *Node) Drain(ctx context.Context) {
	n.reload.mu.Lock()
	delay := duration(n.cfg.DrainDelay)
	n.reload.mu.Unlock()
	n.api.SetDraining(true)
	if delay <= 0 {
		return
	}
	n.log.Info("draining: /readyz fails; stopping after the drain delay", "drain_delay", delay)
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
