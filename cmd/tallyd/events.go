package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/internal/cliutil"
	"github.com/tally-dev/tally/replication"
)

const eventsHelp = `
Every region's replicas publish the events they accept (likes, unlikes,
increments, reconciliations) to the region's JetStream stream
TALLY_EVENTS_<REGION>, in order, each once. 'tallyd events tail' prints
them as JSON lines. With --durable the position is kept under that name:
run it again and it goes on where it stopped.
`

// events runs `tallyd events tail`: a reader of a region's event stream.
func (c *cli) events(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "tail" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(c.stdout, eventsHelp)
			return flag.ErrHelp
		}
		return usagef("events: want the subcommand tail (run 'tallyd events -h')")
	}
	var conn cliutil.NATSClient
	var cfg replication.TailConfig
	fs := newFlagSet("events tail", func(fs *flag.FlagSet) {
		conn.Bind(fs, "NATS server `url` that reaches the region's stream (required)", false)
		fs.StringVar(&cfg.Region, "region", "", "the `region` whose events to read (required)")
		fs.StringVar(&cfg.Durable, "durable", "", "consumer `name` to keep the position under (default: read from the start, keep nothing)")
		fs.IntVar(&cfg.Limit, "limit", 0, "stop after `n` events (0: follow until interrupted)")
	})
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(c.stdout, fs)
			fmt.Fprint(c.stdout, eventsHelp)
			return err
		}
		return usagef("events tail: %v (run 'tallyd events tail -h')", err)
	}
	switch {
	case fs.NArg() > 0:
		return usagef("events tail: unexpected argument %q", fs.Arg(0))
	case cfg.Region == "":
		return usagef("events tail: --region is required")
	case cfg.Limit < 0:
		return usagef("events tail: --limit must not be negative")
	}
	if err := conn.Check("events tail", c.getenv); err != nil {
		return err
	}
	nc, js, err := conn.Connect("events tail", "tallyd events tail "+cfg.Region, nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	cfg.JS = js
	return replication.TailEvents(ctx, cfg, func(data []byte) error {
		_, err := fmt.Fprintf(c.stdout, "%s\n", data)
		return err
	})
}
