package main

import (
	"context"
	"fmt"
	"net"

	"github.com/hashicorp/go-hclog"

	tallynode "github.com/tally-dev/tally/node"
)

// serve runs one replica until ctx ends (SIGINT/SIGTERM), then shuts down
// gracefully.
func (c *cli) serve(ctx context.Context, args []string) error {
	cfg, err := loadConfig(args, c.getenv, c.stdout)
	if err != nil {
		return err
	}
	log := hclog.New(&hclog.LoggerOptions{
		Name:       "tallyd",
		Level:      hclog.LevelFromString(cfg.LogLevel),
		Output:     c.stderr,
		JSONFormat: cfg.LogJSON,
	})
	warnUnsafe(log, cfg)
	logMalloc(log)

	if cfg.DebugListen != "" {
		d, err := startDebug(ctx, cfg.DebugListen, log.Named("debug"))
		if err != nil {
			return err
		}
		defer d.close()
		fmt.Fprintf(c.stdout, "debug (pprof) on %s\n", d.Addr())
	}
	n, err := tallynode.Start(ctx, cfg, tallynode.Options{Logger: log, Version: version(), Getenv: c.getenv})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "listening on %s\n", n.Addr())
	if c.onListen != nil {
		c.onListen(n.Addr())
	}

	select {
	case <-ctx.Done():
		log.Info("shutting down", "reason", context.Cause(ctx))
	case <-n.Done():
		log.Error("HTTP server stopped unexpectedly", "error", n.Err())
	}
	// The parent ctx is done; shutdown gets its own deadline.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), duration(cfg.ShutdownTimeout))
	defer cancel()
	if err := n.Close(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// warnUnsafe logs settings that trade safety for convenience.
func warnUnsafe(log hclog.Logger, cfg tallynode.Config) {
	if cfg.Durability == "none" || cfg.Durability == "nosync" {
		log.Warn("durability none: writes are acknowledged before they are fsynced; " +
			"a power loss or kernel crash can lose acknowledged writes")
	}
	host, _, _ := net.SplitHostPort(cfg.Listen)
	if ip := net.ParseIP(host); (ip == nil || !ip.IsLoopback()) && host != "localhost" && cfg.WriteToken == "" {
		log.Warn("listening beyond loopback without a write token: anyone who can reach the port can write",
			"listen", cfg.Listen)
	}
}

// logMalloc says how the C allocator was tuned at start (see
// malloc_glibc.go), so an operator comparing RSS across hosts knows.
func logMalloc(log hclog.Logger) {
	if a, m := mallocTuning(); a > 0 || m > 0 {
		log.Info("C allocator tuned for Pebble's cache (MALLOC_ARENA_MAX or GLIBC_TUNABLES override it)",
			"arena_max", a, "mmap_threshold", m)
	}
}
