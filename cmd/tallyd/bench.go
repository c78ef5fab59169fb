package main

import (
	"context"

	"github.com/tally-dev/tally/internal/base/version"
	"github.com/tally-dev/tally/internal/bench"
)

// bench runs `tallyd bench <mode>`: the load generators of internal/bench.
func (c *cli) bench(ctx context.Context, args []string) error {
	return bench.Run(ctx, args, bench.Env{Stdout: c.stdout, Stderr: c.stderr, Getenv: c.getenv, Version: version.Version()})
}
