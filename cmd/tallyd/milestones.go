package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/internal/cliutil"
	"github.com/tally-dev/tally/milestone"
)

// milestones runs `tallyd milestones follow`: an application's durable
// follower of the milestone stream (milestone.Follow).
func (c *cli) milestones(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "follow" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(c.stdout, milestonesHelp)
			return flag.ErrHelp
		}
		return usagef("milestones: want the subcommand follow (run 'tallyd milestones -h')")
	}
	var conn cliutil.NATSClient
	var command string
	cfg := milestone.FollowConfig{Stream: milestone.DefaultStream, Retry: 5 * time.Second}
	fs := newFlagSet("milestones follow", func(fs *flag.FlagSet) {
		conn.Bind(fs, "NATS server `url` that reaches the milestone stream (required)", false)
		fs.StringVar(&cfg.Durable, "durable", "", "the application's consumer `name`: where it left off is kept under it (required)")
		fs.StringVar(&cfg.Stream, "stream", cfg.Stream, "the milestone `stream`")
		fs.DurationVar(&cfg.Retry, "retry", cfg.Retry, "how long a milestone whose handling failed waits before it comes again (`duration`)")
		fs.StringVar(&command, "exec", "", "run `command` (sh -c) for each milestone, its JSON on stdin; exit 0 acknowledges it")
	})
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(c.stdout, fs)
			fmt.Fprint(c.stdout, milestonesHelp)
			return err
		}
		return usagef("milestones follow: %v (run 'tallyd milestones follow -h')", err)
	}
	switch {
	case fs.NArg() > 0:
		return usagef("milestones follow: unexpected argument %q", fs.Arg(0))
	case cfg.Durable == "":
		return usagef("milestones follow: --durable is required: the name your application's position is kept under")
	case cfg.Retry <= 0:
		return usagef("milestones follow: --retry must be positive")
	}
	if err := conn.Check("milestones follow", c.getenv); err != nil {
		return err
	}
	nc, js, err := conn.Connect("milestones follow", "tallyd milestones follow "+cfg.Durable, nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	cfg.JS = js
	enc := json.NewEncoder(c.stdout)
	return milestone.Follow(ctx, cfg, func(ctx context.Context, ev milestone.Event) error {
		if command != "" {
			if err := runHook(ctx, command, ev); err != nil {
				fmt.Fprintf(c.stderr, "milestone %s %d: %v; it comes again in %s\n", ev.Sequence, ev.Number, err, cfg.Retry)
				return err
			}
		}
		return enc.Encode(ev)
	})
}

// runHook runs command with the event's JSON on stdin and its sequence and
// number in the environment.
func runHook(ctx context.Context, command string, ev milestone.Event) error {
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	cmd.Stdin = bytes.NewReader(body)
	cmd.Env = append(os.Environ(), "TALLY_MILESTONE_SEQUENCE="+ev.Sequence, "TALLY_MILESTONE_NUMBER="+strconv.FormatUint(ev.Number, 10))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", command, err, bytes.TrimSpace(out))
	}
	return nil
}

const milestonesHelp = `usage: tallyd milestones follow --nats URL --durable NAME [--exec COMMAND]

Follows the milestone stream as your application: prints each milestone
as a JSON line, from the first, and acknowledges it. With --exec, runs
COMMAND (through sh -c) for each milestone with its JSON on stdin and
TALLY_MILESTONE_SEQUENCE and TALLY_MILESTONE_NUMBER set; only an exit
status of 0 acknowledges it, anything else delivers it again after
--retry. Where your application left off is kept in NATS under --durable,
so a restart goes on after the last milestone it acknowledged. A
milestone may come more than once (a crash between acting and the
acknowledgement): act on (sequence, number) idempotently.
`
