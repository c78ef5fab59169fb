package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/internal/base/version"
	"github.com/tally-dev/tally/internal/process"
	tallynode "github.com/tally-dev/tally/node"
)

// serve runs one replica until ctx ends (SIGINT/SIGTERM), then drains
// (/readyz fails for drain_delay) and shuts down gracefully. SIGHUP
// reloads what can change without a restart.
func (c *cli) serve(ctx context.Context, args []string) error {
	cfg, err := loadConfig(args, c.getenv, c.stdout)
	if err != nil {
		return err
	}
	log := newLogger(c.stderr, cfg.LogLevel, cfg.LogJSON)
	warnUnsafe(log, cfg)
	hup := c.hup
	if hup == nil {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGHUP)
		defer signal.Stop(ch)
		hup = ch
	}
	process.RaiseProcs(log, cfg.MinProcs)
	process.LogTuning(log)

	stopDebug, err := c.startDebug(ctx, cfg.DebugListen, log)
	if err != nil {
		return err
	}
	defer stopDebug()
	n, err := tallynode.Start(ctx, cfg, tallynode.Options{Logger: log, Version: version.Version(), Getenv: c.getenv})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "listening on %s\n", n.Addr())
	if c.onListen != nil {
		c.onListen(n.Addr())
	}

wait:
	for {
		select {
		case <-ctx.Done():
			log.Info("shutting down", "reason", context.Cause(ctx))
			n.Drain(context.WithoutCancel(ctx)) // a second signal kills (see main)
			break wait
		case <-n.Done():
			log.Error("HTTP server stopped unexpectedly", "error", n.Err())
			break wait
		case <-hup:
			reload(log, n, args, c.getenv)
		}
	}
	// The parent ctx is done; shutdown gets its own deadline.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), duration(cfg.ShutdownTimeout))
	defer cancel()
	if err := n.Close(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// reload loads the configuration again (file, environment, the same
// flags) and applies what can change in a running replica, logging what
// changed by name (never a token) and what needs a restart. A
// configuration that does not load or validate changes nothing.
func reload(log hclog.Logger, n *tallynode.Node, args []string, getenv func(string) string) {
	cfg, err := loadConfig(args, getenv, io.Discard)
	if err != nil {
		log.Error("SIGHUP: configuration not reloaded; nothing changed", "error", err)
		return
	}
	r, err := n.Reload(cfg)
	if err != nil {
		log.Error("SIGHUP: configuration not reloaded; nothing changed", "error", err)
		return
	}
	log.Info("SIGHUP: configuration reloaded", "applied", strings.Join(r.Applied, ","))
	if len(r.NeedsRestart) > 0 {
		log.Warn("SIGHUP: these settings changed but apply only at a restart", "settings", strings.Join(r.NeedsRestart, ","))
	}
}

// warnUnsafe logs settings that trade safety for convenience.
func warnUnsafe(log hclog.Logger, cfg tallynode.Config) {
	if cfg.Durability == "none" || cfg.Durability == "nosync" {
		log.Warn("durability none: writes are acknowledged before they are fsynced; " +
			"a power loss or kernel crash can lose acknowledged writes")
	}
	if cfg.InsecureListen {
		log.Warn("insecure_listen: a listener beyond loopback may serve without TLS or without a write token",
			"listen", cfg.Listen, "tls", cfg.TLSCert != "", "write_token", cfg.WriteToken != "")
	}
	if cfg.InsecureOpenAdmin && cfg.AdminToken == "" {
		log.Warn("insecure_open_admin: admin routes (block list, audit, budget handoff, links) need no token: "+
			"anyone reaching the listener can use them", "listen", cfg.Listen)
	}
}

// startDebug serves /debug/pprof/ on addr for serve and local ("": off)
// and says where; the returned func stops it.
func (c *cli) startDebug(ctx context.Context, addr string, log hclog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	d, err := process.StartDebug(ctx, addr, log.Named("debug"))
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(c.stdout, "debug (pprof) on %s\n", d.Addr())
	return d.Close, nil
}
