package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tally-dev/tally/internal/chaos"
	"github.com/tally-dev/tally/internal/cliutil"
)

// chaos runs the chaos suite (package chaos) against region processes run
// from this binary, or --binary: exit 0 on PASS, 1 on FAIL, 2 on bad flags.
func (c *cli) chaos(ctx context.Context, args []string) error {
	cfg := chaos.DefaultConfig()
	regions := strings.Join(cfg.Regions, ",")
	faults := "all"
	reportPath := filepath.Join(os.TempDir(), "tally-chaos-report.json")
	fs := newFlagSet("chaos", func(fs *flag.FlagSet) {
		fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long the workload and the faults run (`duration`), before the final heal and checks")
		fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "`seed` of the fault schedule and the workload; the same seed replays the same schedule")
		fs.StringVar(&regions, "regions", regions, "comma-separated region `names`")
		fs.IntVar(&cfg.Replicas, "replicas", cfg.Replicas, "replica processes per region (`n`, 1 to 9); above 1 the region shards its keys and moves shards as a fault")
		fs.IntVar(&cfg.Copies, "copies", cfg.Copies, "how many of a region's replicas hold each shard (`n`; default 2 when --replicas is above 1)")
		fs.StringVar(&cfg.Hot, "hot", cfg.Hot, "items split into parts, PREFIX=PARTS (`rule`; \"\": none), e.g. item-00=3")
		fs.StringVar(&faults, "faults", faults, "fault `classes`: all, or some of "+strings.Join(chaos.AllFaults, ","))
		fs.StringVar(&cfg.Dir, "data", "", "keep data dirs, NATS storage and process logs in `dir` (must be empty; default: a temporary dir, removed)")
		fs.StringVar(&reportPath, "report", reportPath, "write the JSON report to `file` (\"\": none; default under the OS temp dir, so a run never writes into the working tree)")
		fs.StringVar(&cfg.Binary, "binary", "", "tallyd `binary` to run as the regions (default: this one)")
		fs.StringVar(&cfg.Bug, "bug", "", "negative control: run the regions with one deliberate `bug` ("+strings.Join(chaos.Bugs, ", ")+"; chaos build only, but for "+chaos.BugAssignOverwrites+", which the harness plays); the run must FAIL")
		fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "workload `operations` per second, all regions together")
		fs.Float64Var(&cfg.RetryElsewhere, "retry-elsewhere", cfg.RetryElsewhere, "`share` of increments the client sends again, same idempotency key, to another region (a failover retry that must count once)")
		fs.StringVar(&cfg.Milestones, "milestones", cfg.Milestones, "the regions' milestone `rule`, checked to fire once each (\""+chaos.MilestonesOff+"\": no numbering)")
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(c.stdout, fs)
			fmt.Fprint(c.stdout, chaosHelp)
			return err
		}
		return usagef("chaos: %v (run 'tallyd help chaos')", err)
	}
	if fs.NArg() > 0 {
		return usagef("chaos: unexpected argument %q", fs.Arg(0))
	}
	cfg.Regions = cliutil.SplitList(regions)
	if cfg.Replicas > 1 && cfg.Copies == 0 {
		cfg.Copies = 2
	}
	if faults == "all" && cfg.Replicas > 1 {
		cfg.Faults = chaos.ShardedFaults // the others address a region's one replica
	}
	if faults != "all" {
		cfg.Faults = cliutil.SplitList(faults)
		if cfg.Faults == nil {
			cfg.Faults = []string{} // none: the workload alone
		}
	}
	if cfg.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("chaos: find this binary: %w (give --binary)", err)
		}
		cfg.Binary = exe
	}
	if _, err := os.Stat(cfg.Binary); err != nil {
		return usagef("chaos: --binary: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		return usagef("chaos: %s", oneLine(err))
	}
	if cfg.Bug != "" && !chaos.HarnessBug(cfg.Bug) {
		build, err := chaos.IsChaosBuild(cfg.Binary)
		if err != nil {
			return usagef("chaos: --binary: %v", err)
		}
		if !build {
			return usagef("chaos: --bug needs a chaos build of tallyd (go build -tags chaos); %s is not one", cfg.Binary)
		}
	}
	cfg.Out = c.stdout
	start := time.Now()
	rep, err := chaos.Run(ctx, cfg)
	if err != nil {
		return err
	}
	rep.WriteText(c.stdout)
	if reportPath != "" {
		if err := rep.WriteJSON(reportPath); err != nil {
			return fmt.Errorf("chaos: write report: %w", err)
		}
		fmt.Fprintf(c.stdout, "report: %s (run took %s)\n", reportPath, time.Since(start).Round(time.Second))
	}
	if !rep.Pass {
		return fmt.Errorf("chaos: FAIL with seed %d: %d violation kinds (see the report)", rep.Seed, len(rep.ViolationCounts))
	}
	return nil
}

const chaosHelp = `
Runs every region as a 'tallyd serve' process on an embedded NATS
super-cluster whose links the harness cuts, makes lossy and flaps; kills
regions with kill -9, wipes their data, restarts their NATS; then heals
everything and checks every count against an exact model of the
acknowledged operations. Prints a report ending in PASS or FAIL.

With --replicas above 1 each region runs that many processes over one
sharded keyspace (--copies holders per shard): requests are forwarded
between them, and shard moves (more copies, a drained replica) are a
fault class.

Message faults (msg) and --bug need a chaos build (but --bug
assign-overwrites, which the harness plays by writing the shard map):
  go build -tags chaos -o bin/tallyd-chaos ./cmd/tallyd   (make chaos does this)
`
