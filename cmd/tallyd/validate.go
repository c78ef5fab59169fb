package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
)

// validate checks a serve configuration (the file, the environment's
// tokens and serve's flags) the way serve does before it starts, and
// reports every problem at once, one a line, without opening anything.
func (c *cli) validate(_ context.Context, args []string) error {
	cfg, err := loadConfigAs("validate", args, c.getenv, c.stdout)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(c.stdout, validateHelp)
		return err
	}
	var probs *configProblems
	if errors.As(err, &probs) {
		for _, p := range probs.list {
			fmt.Fprintln(c.stderr, p)
		}
		n := fmt.Sprintf("%d problems", len(probs.list))
		if len(probs.list) == 1 {
			n = "1 problem"
		}
		return usagef("validate: %s; tallyd serve refuses this config", n)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "ok: replica %s of region %s, data in %s, listening on %s\n", cfg.Replica, cfg.Region, cfg.DataDir, cfg.Listen)
	return nil
}

const validateHelp = `
Checks a configuration as tallyd serve would load it: the --config file
(every unknown attribute or block, wrong type and invalid value, with the
file's line where there is one), the tokens and NATS password from the
environment (TALLY_WRITE_TOKEN, TALLY_ADMIN_TOKEN, TALLY_READ_TOKEN,
TALLY_NATS_PASSWORD) and the same flags as serve. Prints one problem a
line and exits 2, or prints "ok: ..." and exits 0. Opens no store, port or
connection.
`
