package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/tally-dev/tally/alloc"
	"github.com/tally-dev/tally/internal/cliutil"
	tallynode "github.com/tally-dev/tally/node"
)

// parseLeaseAuthority reads `tallyd lease-authority`'s flags and its
// password from the environment.
func parseLeaseAuthority(args []string, getenv func(string) string, help io.Writer) (tallynode.AuthorityConfig, logOptions, error) {
	cfg := tallynode.AuthorityConfig{AllocBucket: alloc.DefaultBucket, AllocReplicas: 1, NATSUser: tallynode.AuthorityUser}
	logOpts := logOptions{Level: "info"}
	fs := newFlagSet("lease-authority", func(fs *flag.FlagSet) {
		fs.StringVar(&cfg.NATS, "nats", "", "NATS server `urls`, comma-separated, of the region holding the allocator's bucket (required)")
		fs.StringVar(&cfg.NATSUser, "user", cfg.NATSUser, "NATS `user` (password from env "+envNATSPass+", or a file named by "+envNATSPass+cliutil.FileSuffix+"; \"\": none)")
		fs.StringVar(&cfg.NATSCreds, "creds", "", "NATS credentials `file` instead of a user")
		fs.StringVar(&cfg.NATSCA, "nats-ca", "", "CA `file` to verify the NATS servers' TLS certificates")
		fs.StringVar(&cfg.AllocBucket, "alloc-bucket", cfg.AllocBucket, "the allocator's KV `bucket` (the replicas' alloc_bucket)")
		fs.StringVar(&cfg.AllocCluster, "alloc-cluster", "", "NATS `cluster` holding the bucket and the milestone stream (the replicas' alloc_cluster)")
		fs.IntVar(&cfg.AllocReplicas, "alloc-replicas", cfg.AllocReplicas, "replicas of the bucket and the milestone stream (`n`: the replicas' alloc_replicas)")
		fs.StringVar(&logOpts.Level, "log-level", logOpts.Level, "log `level`: trace, debug, info, warn, error")
		bindLogJSON(fs, &logOpts.JSON)
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(help, fs)
			return cfg, logOpts, err
		}
		return cfg, logOpts, usagef("lease-authority: %v (run 'tallyd lease-authority -h')", err)
	}
	switch {
	case fs.NArg() > 0:
		return cfg, logOpts, usagef("lease-authority: unexpected argument %q", fs.Arg(0))
	case cfg.NATS == "":
		return cfg, logOpts, usagef("lease-authority: --nats is required")
	case cfg.NATSCreds != "":
		cfg.NATSUser = ""
	}
	if cfg.NATSUser != "" {
		pw, err := cliutil.EnvSecret(getenv, envNATSPass)
		if err != nil {
			return cfg, logOpts, usagef("lease-authority: %v", err)
		}
		cfg.NATSPassword = pw
	}
	return cfg, logOpts, nil
}

// leaseAuthority runs `tallyd lease-authority`: the only writer of the
// allocator's bucket, checking every replica's write (alloc.Authority).
func (c *cli) leaseAuthority(ctx context.Context, args []string) error {
	cfg, logOpts, err := parseLeaseAuthority(args, c.getenv, c.stdout)
	if err != nil {
		return err
	}
	cfg.Logger = newLogger(c.stderr, logOpts.Level, logOpts.JSON)
	a, err := tallynode.StartAuthority(cfg)
	if err != nil {
		return err
	}
	defer a.Close()
	fmt.Fprintf(c.stdout, "lease authority serving the allocator's bucket %s\n", cfg.AllocBucket)
	<-ctx.Done()
	return nil
}
