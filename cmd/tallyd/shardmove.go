package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/internal/cliutil"
	tallynode "github.com/tally-dev/tally/node"
	"github.com/tally-dev/tally/shard"
)

// adminShardsMove runs `tallyd admin shards move|drain|rebalance`: a
// region's shards move to another map of the same replicas while it
// serves (node.MoveShards). move takes --copies or --drain; drain is move
// --drain; rebalance moves to the map the config computes.
func (c *cli) adminShardsMove(ctx context.Context, verb string, args []string) error {
	var conn cliutil.NATSClient
	var file, region, at, drain string
	copies, maxMove := 0, 0
	timeout := 10 * time.Minute
	fs := newFlagSet("admin shards "+verb, func(fs *flag.FlagSet) {
		conn.Bind(fs, "NATS server `url` of any region (required)", true)
		fs.StringVar(&file, "config", "", "a replica's config `file`: its shards block lists the region's replicas (required)")
		fs.StringVar(&region, "region", "", "`region` whose shards move (required)")
		fs.StringVar(&at, "url", "", "HTTP `address` of a replica of the region, whose GET /v1/shards reports the move (required; the admin token from "+envAdminToken+")")
		if verb != "rebalance" {
			fs.IntVar(&copies, "copies", 0, "replicas holding each shard after the move (`n`; default: the config's shards copies)")
			fs.StringVar(&drain, "drain", "", "comma-separated `replicas` to drain: afterwards they serve no keyed shard (drain: required)")
		}
		fs.IntVar(&maxMove, "max-move", 0, "move at most `n` shard copies at a time, each step synced, switched and settled before the next (0: no bound)")
		fs.DurationVar(&timeout, "timeout", timeout, "give up after `duration` (the map is left in a phase safe to serve by; run again to finish)")
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(c.stdout, fs)
			fmt.Fprint(c.stdout, moveHelp)
			return err
		}
		return usagef("admin shards %s: %v (run 'tallyd admin shards %s -h')", verb, err, verb)
	}
	switch {
	case fs.NArg() > 0:
		return usagef("admin shards %s: unexpected argument %q", verb, fs.Arg(0))
	case file == "":
		return usagef("admin shards %s: --config is required: the region's replicas come from its shards block", verb)
	case region == "":
		return usagef("admin shards %s: --region is required", verb)
	case at == "":
		return usagef("admin shards %s: --url is required: a replica of the region reports the move", verb)
	case copies < 0:
		return usagef("admin shards %s: --copies %d < 0", verb, copies)
	case maxMove < 0:
		return usagef("admin shards %s: --max-move %d < 0", verb, maxMove)
	case verb == "drain" && drain == "":
		return usagef("admin shards drain: --drain is required: the replicas to drain")
	case timeout <= 0:
		return usagef("admin shards %s: --timeout must be positive", verb)
	}
	cfg := tallynode.DefaultConfig()
	if err := cliutil.DecodeHCLFile(file, &cfg); err != nil {
		return &usageError{Err: err}
	}
	if cfg.Shards == nil {
		return usagef("admin shards %s: %s has no shards block", verb, file)
	}
	sc := *cfg.Shards
	if copies > 0 {
		sc.Copies = copies
	}
	target, err := sc.Map(region)
	if err != nil {
		return usagef("admin shards %s: %s: %v", verb, file, err)
	}
	if drain != "" {
		out := strings.Split(drain, ",")
		if target, err = shard.Drained(region, target.Replicas(), target.Copies, out...); err != nil {
			return usagef("admin shards %s: --drain %s: %v", verb, drain, err)
		}
	}
	cl, err := client.New(client.Config{BaseURL: at, Token: c.getenv(envAdminToken)})
	if err != nil {
		return usagef("admin shards %s: %v", verb, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	kv, closeNATS, err := c.openShardMaps(ctx, verb, &conn, cfg)
	if err != nil {
		return err
	}
	defer closeNATS()
	res, err := tallynode.MoveShards(ctx, tallynode.MoveConfig{KV: kv, Target: target, Status: cl.Shards, MaxMove: maxMove,
		Progress: func(format string, args ...any) { fmt.Fprintf(c.stdout, format+"\n", args...) },
		Joined: func(_ context.Context, join shard.Map) error {
			// A replica the config adds holds Global alone until its
			// shards come: it finds itself listed now.
			for _, r := range join.Replicas() {
				if h, j := join.Held(r), join.Joining(r); h.Len() == 1 && j.Len() > 0 {
					fmt.Fprintf(c.stdout, "region %s: start %s now if it is not running: the join map lists it\n", region, r)
				}
			}
			return nil
		}})
	if err != nil {
		return fmt.Errorf("admin shards %s: %w", verb, err)
	}
	fmt.Fprintf(c.stdout, "done: the shard map of %s is at revision %d (%d shard copies moved)\n", region, res.Switch.Revision, res.Moved)
	printMap(c, res.Switch)
	return nil
}

const moveHelp = `
Moves a region's shards while it serves, to the map its config's shards
block computes (rebalance: with a replica the block adds, the region
grows), with --copies holders each (move), or with --drain replicas
serving nothing (drain). Writes the move's join map by compare-and-swap,
waits until every joining replica has synced, writes the switch map,
waits until every replica that left shards compares equal with their
holders, and writes the settled map (they drop the others' data of those
shards). --max-move N runs it in steps of at most N shard copies. Every
replica of the region must be up; a replica the config adds is started
once the join map lists it. See docs/operations.md, "Moving shards".
`
