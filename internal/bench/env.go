package bench

import (
	"context"
	"flag"
	"io"

	"github.com/tally-dev/tally/internal/cliutil"
)

// Env is what a bench run writes to and reads from.
type Env struct {
	// Stdout gets the results; Stderr the progress and logs.
	Stdout, Stderr io.Writer
	// Getenv reads the environment (TALLY_WRITE_TOKEN). Default: nothing set.
	Getenv func(string) string
	// Version is reported by in-process replicas' /v1/status.
	Version string
}

// Run runs `tallyd bench <mode> [flags]`: args start with the mode. A
// problem with the arguments is a *cliutil.UsageError (exit code 2).
func Run(ctx context.Context, args []string, env Env) error {
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	c := &cli{stdout: env.Stdout, stderr: env.Stderr, getenv: env.Getenv, env: env}
	return c.bench(ctx, args)
}

// cli is a run's environment as the modes use it.
type cli struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	env            Env
}

func usagef(format string, args ...any) error { return cliutil.Usagef(format, args...) }

func newFlagSet(name string, bind func(*flag.FlagSet)) *flag.FlagSet {
	return cliutil.NewFlagSet(name, bind)
}

func printUsage(w io.Writer, fs *flag.FlagSet) { cliutil.PrintUsage(w, fs) }

func oneLine(err error) string { return cliutil.OneLine(err) }

// envWriteToken is the environment variable a write token may come from
// (as for tallyd serve).
const envWriteToken = "TALLY_WRITE_TOKEN"
