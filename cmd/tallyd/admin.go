package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/alloc"
	"github.com/tally-dev/tally/internal/cliutil"
	tallynode "github.com/tally-dev/tally/node"
)

// admin runs an operator step against a deployment: `tallyd admin
// retire`, `tallyd admin shards`, `tallyd admin backup`.
func (c *cli) admin(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("admin: want a subcommand: retire, shards or backup (run 'tallyd admin -h')")
	}
	switch args[0] {
	case "-h", "--help", "-help", "help":
		fmt.Fprint(c.stdout, adminHelp)
		return flag.ErrHelp
	case "retire":
		return c.adminRetire(ctx, args[1:])
	case "shards":
		return c.adminShards(ctx, args[1:])
	case "backup":
		return c.adminBackup(ctx, args[1:])
	}
	return usagef("admin: unknown subcommand %q (run 'tallyd admin -h')", args[0])
}

const adminHelp = `usage: tallyd admin <subcommand> [flags]

subcommands:
  retire     free every lease a replica that will not come back holds
  shards     assign a region's shard map, or show the stored maps
  backup     have a running replica write a checkpoint of its store, to restore

run 'tallyd admin <subcommand> -h' for its flags
`

// adminRetire frees the leases of a retired replica (alloc.RetireReplica).
func (c *cli) adminRetire(ctx context.Context, args []string) error {
	var conn cliutil.NATSClient
	cfg := alloc.RetireConfig{Bucket: alloc.DefaultBucket, Sequence: tallynode.LikesSequence}
	timeout := 30 * time.Second
	fs := newFlagSet("admin retire", func(fs *flag.FlagSet) {
		conn.Bind(fs, "NATS server `url` of the region holding the allocator's bucket (required)", true)
		fs.StringVar(&cfg.Bucket, "bucket", cfg.Bucket, "the allocator's KV `bucket` (the replicas' alloc_bucket)")
		fs.StringVar(&cfg.Sequence, "sequence", cfg.Sequence, "`sequence` whose leases are freed")
		fs.StringVar(&cfg.Replica, "replica", "", "`id` of the replica that will not come back (required)")
		fs.StringVar(&cfg.Replica, "holder", "", "the older name of --replica")
		fs.DurationVar(&timeout, "timeout", timeout, "give up after `duration`")
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(c.stdout, fs)
			fmt.Fprint(c.stdout, retireHelp)
			return err
		}
		return usagef("admin retire: %v (run 'tallyd admin retire -h')", err)
	}
	switch {
	case fs.NArg() > 0:
		return usagef("admin retire: unexpected argument %q", fs.Arg(0))
	case cfg.Replica == "":
		return usagef("admin retire: --replica is required: the id of the replica that will not come back")
	case timeout <= 0:
		return usagef("admin retire: --timeout must be positive")
	}
	if err := conn.Check("admin retire", c.getenv); err != nil {
		return err
	}
	nc, js, err := conn.Connect("admin retire", "tallyd admin retire", nats.Timeout(5*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	freed, err := alloc.RetireReplica(ctx, js, cfg)
	if err != nil {
		return fmt.Errorf("admin retire: %w", err)
	}
	if len(freed) == 0 {
		fmt.Fprintf(c.stdout, "%s holds no lease on %s: nothing to close\n", cfg.Replica, cfg.Sequence)
		return nil
	}
	var n uint64
	for _, sp := range freed {
		fmt.Fprintf(c.stdout, "closed the block of %s held by %s: [%d, %d) never used (%d numbers)\n", cfg.Sequence, cfg.Replica, sp.Start, sp.End, sp.Len())
		n += sp.Len()
	}
	fmt.Fprintf(c.stdout, "%d leases closed, %d numbers left as holes\n", len(freed), n)
	return nil
}

const retireHelp = `
Closes every lease the retired replica holds on the sequence, from what it
last reported, so that the ranks of the numbers above them become final
and their milestones fire. Only for a replica that will never come back
with its data: if it does, the likes it numbered after its last report get
no rank, and milestones among the numbers it reported may not fire. See
docs/operations.md, "Retiring a replica".
`
