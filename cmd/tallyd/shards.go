package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/internal/cliutil"
	tallynode "github.com/tally-dev/tally/node"
	"github.com/tally-dev/tally/shard"
)

// adminShards runs `tallyd admin shards assign|show`: the regions' shard
// maps in the shard map bucket (node.ShardsBucket).
func (c *cli) adminShards(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("admin shards: want assign, show, move, drain or rebalance (run 'tallyd admin shards -h')")
	}
	switch args[0] {
	case "-h", "--help", "-help", "help":
		fmt.Fprint(c.stdout, shardsHelp)
		return flag.ErrHelp
	case "assign":
		return c.adminShardsAssign(ctx, args[1:])
	case "show":
		return c.adminShardsShow(ctx, args[1:])
	case "move", "drain", "rebalance":
		return c.adminShardsMove(ctx, args[0], args[1:]) // shardmove.go
	}
	return usagef("admin shards: unknown subcommand %q (run 'tallyd admin shards -h')", args[0])
}

const shardsHelp = `usage: tallyd admin shards <assign|show|move|drain|rebalance> [flags]

  assign     store a region's shard map, computed from a replica's config
  show       print the stored shard maps and their revisions
  move       move a region's shards while it serves (--copies, --drain)
  drain      move every keyed shard off some replicas, to retire them
  rebalance  move to the map the config computes

Replicas read the maps when they start and follow them as they change.
assign stores a map at once: use it for a region's first map, or with
its replicas stopped; move, drain and rebalance change a serving region's
map in two steps, syncing the new holders first. See
docs/operations.md, "Shard maps" and "Moving shards".

run 'tallyd admin shards <subcommand> -h' for its flags
`

// adminShardsAssign stores a region's map as the config computes it, by
// compare-and-swap on the stored revision.
func (c *cli) adminShardsAssign(ctx context.Context, args []string) error {
	var conn cliutil.NATSClient
	var file, region string
	copies := 0
	timeout := 30 * time.Second
	fs := newFlagSet("admin shards assign", func(fs *flag.FlagSet) {
		conn.Bind(fs, "NATS server `url` of any region (required)", true)
		fs.StringVar(&file, "config", "", "a replica's config `file`: its shards block lists every region's replicas, its alloc_cluster and alloc_replicas place the bucket (required)")
		fs.StringVar(&region, "region", "", "`region` whose map is assigned (required)")
		fs.IntVar(&copies, "copies", 0, "replicas holding each shard (`n`; default: the config's shards copies)")
		fs.DurationVar(&timeout, "timeout", timeout, "give up after `duration`")
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(c.stdout, fs)
			fmt.Fprint(c.stdout, assignHelp)
			return err
		}
		return usagef("admin shards assign: %v (run 'tallyd admin shards assign -h')", err)
	}
	switch {
	case fs.NArg() > 0:
		return usagef("admin shards assign: unexpected argument %q", fs.Arg(0))
	case file == "":
		return usagef("admin shards assign: --config is required: the region's replicas come from its shards block")
	case region == "":
		return usagef("admin shards assign: --region is required")
	case copies < 0:
		return usagef("admin shards assign: --copies %d < 0", copies)
	case timeout <= 0:
		return usagef("admin shards assign: --timeout must be positive")
	}
	cfg := tallynode.DefaultConfig()
	if err := cliutil.DecodeHCLFile(file, &cfg); err != nil {
		return &usageError{Err: err}
	}
	if cfg.Shards == nil {
		return usagef("admin shards assign: %s has no shards block", file)
	}
	sc := *cfg.Shards
	if copies > 0 {
		sc.Copies = copies
	}
	m, err := sc.Map(region)
	if err != nil {
		return usagef("admin shards assign: %s: %v", file, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	kv, closeNATS, err := c.openShardMaps(ctx, "assign", &conn, cfg)
	if err != nil {
		return err
	}
	defer closeNATS()
	stored, wrote, err := tallynode.SeedShardMap(ctx, kv, m)
	if errors.Is(err, tallynode.ErrShardMapDiffers) {
		fmt.Fprintf(c.stdout, "refused: the stored shard map of %s (revision %d) differs from this one, and a map changes only through a move, which joins, switches and settles so that nothing acknowledged is lost:\n", region, stored.Revision)
		fmt.Fprintf(c.stdout, "  tallyd admin shards move --config %s --region %s\n", file, region)
		printMap(c, stored)
		return fmt.Errorf("admin shards assign: %w", err)
	}
	if errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("admin shards assign: the map of %s was assigned by someone else meanwhile (nothing written): look at it (tallyd admin shards show) and run again", region)
	}
	if err != nil {
		return fmt.Errorf("admin shards assign: %w", err)
	}
	verb := "assigned"
	if !wrote {
		verb = "unchanged"
	}
	fmt.Fprintf(c.stdout, "%s: the shard map of %s is at revision %d\n", verb, region, stored.Revision)
	printMap(c, stored)
	if wrote {
		fmt.Fprintf(c.stdout, "every replica follows it now (to move a serving region's shards, use tallyd admin shards move)\n")
	}
	return nil
}

const assignHelp = `
Computes the region's map from the replicas its shards block lists
(rendezvous hashing: adding or removing one replica moves only the shards
it gains or held) and stores it if the bucket holds no map of the region
(a create by compare-and-swap: one made meanwhile is refused, not
overwritten). A stored map that differs is refused, never overwritten:
a map changes only through tallyd admin shards move. Run it
with the operator's NATS user: replicas may only read the bucket. See
docs/operations.md, "Shard maps".
`

// adminShardsShow prints the stored maps.
func (c *cli) adminShardsShow(ctx context.Context, args []string) error {
	var conn cliutil.NATSClient
	var region string
	var asJSON bool
	timeout := 30 * time.Second
	fs := newFlagSet("admin shards show", func(fs *flag.FlagSet) {
		conn.Bind(fs, "NATS server `url` of any region (required)", true)
		fs.StringVar(&region, "region", "", "only this `region`'s map")
		fs.BoolVar(&asJSON, "json", false, "print each map as GET /v1/shards answers it, one per line")
		fs.DurationVar(&timeout, "timeout", timeout, "give up after `duration`")
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(c.stdout, fs)
			return err
		}
		return usagef("admin shards show: %v (run 'tallyd admin shards show -h')", err)
	}
	switch {
	case fs.NArg() > 0:
		return usagef("admin shards show: unexpected argument %q", fs.Arg(0))
	case timeout <= 0:
		return usagef("admin shards show: --timeout must be positive")
	}
	if err := conn.Check("admin shards show", c.getenv); err != nil {
		return err
	}
	nc, js, err := conn.Connect("admin shards show", "tallyd admin shards show", nats.Timeout(5*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	kv, err := js.KeyValue(ctx, tallynode.ShardsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		fmt.Fprintf(c.stdout, "no shard maps stored (no bucket %s): replicas use their configs' maps\n", tallynode.ShardsBucket)
		return nil
	}
	if err != nil {
		return fmt.Errorf("admin shards show: open bucket %s: %w", tallynode.ShardsBucket, err)
	}
	maps, err := tallynode.ReadShardMaps(ctx, kv)
	if err != nil {
		return fmt.Errorf("admin shards show: %w", err)
	}
	shown := 0
	for _, m := range maps {
		if region != "" && m.Region != region {
			continue
		}
		shown++
		if asJSON {
			b, err := json.Marshal(m.API())
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "%s\n", b)
			continue
		}
		fmt.Fprintf(c.stdout, "%s: revision %d\n", m.Region, m.Revision)
		printMap(c, m)
	}
	if shown == 0 && !asJSON {
		if region != "" {
			fmt.Fprintf(c.stdout, "no shard map of %s stored: its replicas use their configs' map\n", region)
		} else {
			fmt.Fprintln(c.stdout, "no shard maps stored: replicas use their configs' maps")
		}
	}
	return nil
}

// printMap prints how many shards each replica of m holds.
func printMap(c *cli, m shard.Map) {
	fmt.Fprintf(c.stdout, "  copies %d, %d shards, %d replicas\n", m.Copies, shard.Count, len(m.Replicas()))
	for _, r := range m.Replicas() {
		held, joining, leaving := m.Held(r), m.Joining(r), m.Leaving(r)
		fmt.Fprintf(c.stdout, "  %-20s %4d shards", r, held.Len())
		if n := joining.Len(); n > 0 {
			fmt.Fprintf(c.stdout, ", joining %d", n)
		}
		if n := leaving.Len(); n > 0 {
			fmt.Fprintf(c.stdout, ", kept after leaving %d", n)
		}
		fmt.Fprintln(c.stdout)
	}
}

// openShardMaps connects as conn says and opens the shard map bucket
// where cfg places it (creating it if absent), for `admin shards verb`;
// the func closes the connection.
func (c *cli) openShardMaps(ctx context.Context, verb string, conn *cliutil.NATSClient, cfg tallynode.Config) (jetstream.KeyValue, func(), error) {
	if err := conn.Check("admin shards "+verb, c.getenv); err != nil {
		return nil, nil, err
	}
	nc, js, err := conn.Connect("admin shards "+verb, "tallyd admin shards "+verb, nats.Timeout(5*time.Second))
	if err != nil {
		return nil, nil, err
	}
	kv, err := tallynode.OpenShardMaps(ctx, js, cfg.AllocCluster, cfg.AllocReplicas)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("admin shards %s: %w", verb, err)
	}
	return kv, nc.Close, nil
}
