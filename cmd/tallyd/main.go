// Command tallyd runs tally, the multi-region CRDT like and counter
// service: `tallyd serve` runs one replica with its HTTP API.
//
// Usage:
//
//	tallyd <command> [flags]
//
// Exit codes: 0 success, 1 runtime failure, 2 usage or configuration error.
// Every failure is one line on stderr: "tallyd: <message>".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"syscall"

	"github.com/tally-dev/tally/internal/base/version"
	"github.com/tally-dev/tally/internal/cliutil"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal, restore the default handling so a second one
	// kills a shutdown that hangs.
	context.AfterFunc(ctx, stop)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is main without the process: it dispatches args to a command and
// returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := &cli{stdout: stdout, stderr: stderr, getenv: os.Getenv}
	return c.run(ctx, args)
}

// cli is what commands share: where output goes, the environment, and test
// hooks.
type cli struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	// onListen, if set, is called with the HTTP address once serve listens
	// (tests bind port 0 and need the real port).
	onListen func(net.Addr)
	// hup, if set, stands for SIGHUP in serve (tests reload through it).
	hup chan os.Signal
}

// command is one subcommand. run gets the arguments after the command name.
type command struct {
	summary string
	run     func(c *cli, ctx context.Context, args []string) error
}

// commands is the subcommand table: adding a command is one line here.
func commands() map[string]command {
	return map[string]command{
		"serve":           {"run one replica and its HTTP API", (*cli).serve},
		"local":           {"run a full local multi-region deployment in one process", (*cli).local},
		"bench":           {"measure throughput, latency, replication lag and healing", (*cli).bench},
		"chaos":           {"run the chaos suite: faults against an exact model, PASS or FAIL", (*cli).chaos},
		"admin":           {"operator steps: retire a replica's leases, assign shard maps, back up a replica", (*cli).admin},
		"lease-authority": {"be the only writer of the allocator's bucket, checking every replica's write", (*cli).leaseAuthority},
		"milestones":      {"follow the milestones as an application, acknowledging each", (*cli).milestones},
		"events":          {"read the regions' event streams: tail as JSON lines, sink into PostgreSQL or hourly files", (*cli).events},
		"import":          {"backfill a file of events at their own times (POST /v1/admin/import)", (*cli).importFile},
		"validate":        {"check a serve config and report every problem in it", (*cli).validate},
		"version":         {"print the version", (*cli).version},
		"dashboard":       {"serve the dashboard of replicas that run elsewhere (deploy/compose)", (*cli).dashboard},
		"healthcheck":     {"GET a replica's /healthz (or --url): exit 0 on 200, for images without curl", (*cli).healthcheck},
		"help":            {"show help for tallyd or a command", (*cli).help},
	}
}

func (c *cli) run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		c.usage(c.stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "-h", "--help", "-help":
		name = "help"
	case "--version", "-version":
		name = "version"
	}
	cmd, ok := commands()[name]
	if !ok {
		fmt.Fprintf(c.stderr, "tallyd: unknown command %q (run 'tallyd help')\n", args[0])
		return 2
	}
	err := cmd.run(c, ctx, args[1:])
	var uerr *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &uerr):
		fmt.Fprintf(c.stderr, "tallyd: %s\n", oneLine(err))
		return 2
	default:
		fmt.Fprintf(c.stderr, "tallyd: %s\n", oneLine(err))
		return 1
	}
}

// usage lists the commands.
func (c *cli) usage(w io.Writer) {
	fmt.Fprintln(w, "usage: tallyd <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	cmds := commands()
	for _, name := range slices.Sorted(maps.Keys(cmds)) {
		fmt.Fprintf(w, "  %-10s %s\n", name, cmds[name].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "run 'tallyd help <command>' for a command's flags")
}

// help prints the command list, or a command's flags (by running it with -h).
func (c *cli) help(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "help" {
		c.usage(c.stdout)
		return nil
	}
	cmd, ok := commands()[args[0]]
	if !ok {
		return usagef("help: unknown command %q", args[0])
	}
	return cmd.run(c, ctx, []string{"-h"})
}

func (c *cli) version(_ context.Context, args []string) error {
	if len(args) > 0 {
		return usagef("version: unexpected argument %q", args[0])
	}
	fmt.Fprintf(c.stdout, "tallyd %s (revision %s) %s %s/%s\n", version.Version(), version.Revision(), version.GoVersion(), runtime.GOOS, runtime.GOARCH)
	return nil
}

// usageError is a problem with how tallyd was invoked: exit code 2.
type usageError = cliutil.UsageError

func usagef(format string, args ...any) error { return cliutil.Usagef(format, args...) }

func newFlagSet(name string, bind func(*flag.FlagSet)) *flag.FlagSet {
	return cliutil.NewFlagSet(name, bind)
}

func printUsage(w io.Writer, fs *flag.FlagSet) { cliutil.PrintUsage(w, fs) }

func oneLine(err error) string { return cliutil.OneLine(err) }
