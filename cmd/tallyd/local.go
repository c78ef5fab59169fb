package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/internal/base/version"
	"github.com/tally-dev/tally/internal/cliutil"
	"github.com/tally-dev/tally/internal/dashboard"
	"github.com/tally-dev/tally/internal/deploy"
	"github.com/tally-dev/tally/internal/natsperm"
	"github.com/tally-dev/tally/internal/process"
	tallynode "github.com/tally-dev/tally/node"
)

// localConfig is what `tallyd local` takes.
type localConfig struct {
	Regions []string
	// Replicas per region (more than one shards each region) and the
	// copies of each shard in a region.
	Replicas int
	Copies   int
	DataDir  string
	Port     int
	NATSPort int
	// RESPPort is the first region's RESP port, the others following; 0
	// turns RESP off. respPortSet: --resp-port was given (with --port 0
	// and no --resp-port, RESP takes free ports too).
	RESPPort    int
	respPortSet bool
	Durability  string
	// WALMinSyncInterval is every replica's wal_min_sync_interval.
	WALMinSyncInterval string
	LogLevel           string
	LogJSON            bool
	WriteToken         string
	AdminToken         string
	Dashboard          dashboardAddr // see dashboard.go
	Milestones         string
	Sequences          cliutil.ListFlag[tallynode.SequenceConfig] // the first --sequence replaces the defaults
	Approx             cliutil.ListFlag[tallynode.ApproxConfig]   // the first --approx replaces the defaults
	Hot                cliutil.ListFlag[tallynode.HotConfig]      // the first --hot replaces the defaults
	Limits             []tallynode.LimitConfig
	// PIDFile is where the process writes its PID while it runs (""
	// none); by default <DataDir>/tallyd.pid, so the deployment can be
	// stopped by its PID rather than by a name another user's process
	// also matches.
	PIDFile    string
	pidFileSet bool
	// DebugListen serves /debug/pprof/ for the whole process ("" off).
	DebugListen string
	// MinProcs raises GOMAXPROCS to at least this, as serve's min_procs.
	MinProcs int
}

func defaultLocalConfig() localConfig {
	return localConfig{
		Regions:    []string{"us", "eu", "ap"},
		Replicas:   1,
		Copies:     2,
		DataDir:    "data",
		Port:       8081,
		NATSPort:   4222,
		RESPPort:   6381,
		Durability: "fsync",
		LogLevel:   "info",
		MinProcs:   tallynode.DefaultConfig().MinProcs,
		Dashboard:  dashboardAddr{Addr: dashboard.DefaultAddr},
		Milestones: "10^k",
		Sequences: cliutil.ListFlag[tallynode.SequenceConfig]{Parse: tallynode.ParseSequence, List: []tallynode.SequenceConfig{
			{Name: "post5", Counts: tallynode.CountsLikes, Match: "post5", Milestones: "1000"},
			{Name: "searches", Counts: tallynode.CountsIncrements, Match: "search:*", Milestones: "10^k"},
		}},
		Approx: cliutil.ListFlag[tallynode.ApproxConfig]{Parse: tallynode.ParseApprox, List: []tallynode.ApproxConfig{{Prefix: "hot:", Error: 0.01}}},
		Hot:    cliutil.ListFlag[tallynode.HotConfig]{Parse: tallynode.ParseHot, List: []tallynode.HotConfig{{Prefix: "viral:", Splits: 3}}},
	}
}

func parseLocal(args []string, getenv func(string) string, help io.Writer) (localConfig, error) {
	lc := defaultLocalConfig()
	regions := strings.Join(lc.Regions, ",")
	fs := newFlagSet("local", func(fs *flag.FlagSet) {
		fs.StringVar(&regions, "regions", regions, "comma-separated region `names`")
		fs.IntVar(&lc.Replicas, "replicas", lc.Replicas, "replicas per region (`N`); more than one shards each region's keys over them")
		fs.IntVar(&lc.Copies, "copies", lc.Copies, "with --replicas above 1, how many replicas of a region hold each shard (`R`)")
		fs.StringVar(&lc.DataDir, "data", lc.DataDir, "root data `dir`: <dir>/<replica> per replica, <dir>/nats for JetStream")
		fs.IntVar(&lc.Port, "port", lc.Port, "HTTP `port` of the first region; the others follow consecutively")
		fs.IntVar(&lc.NATSPort, "nats-port", lc.NATSPort, "NATS client `port` of the first region; the others follow consecutively (0: any free ports)")
		fs.IntVar(&lc.RESPPort, "resp-port", lc.RESPPort, "Redis protocol (RESP) `port` of the first region; the others follow consecutively (0: off)")
		fs.StringVar(&lc.Durability, "durability", lc.Durability, "`mode`: fsync or none")
		fs.StringVar(&lc.WALMinSyncInterval, "wal-min-sync-interval", "", "every replica's wal_min_sync_interval: hold a WAL fsync until this long after the last one (`duration`, at most 100ms)")
		fs.StringVar(&lc.LogLevel, "log-level", lc.LogLevel, "log `level`: trace, debug, info, warn, error")
		bindLogJSON(fs, &lc.LogJSON)
		fs.StringVar(&lc.WriteToken, "write-token", getenv(envWriteToken), "bearer `token` for write routes (env "+envWriteToken+")")
		fs.StringVar(&lc.AdminToken, "admin-token", getenv(envAdminToken), "bearer `token` for admin routes (env "+envAdminToken+")")
		fs.StringVar(&lc.Milestones, "milestones", lc.Milestones, "milestones fired once across regions (`list`: numbers, 10^k, every:N; \"\": numbering off)")
		fs.Var(&lc.Sequences, "sequence", "also number `NAME=COUNTS/MATCH/MILESTONES` (repeatable; the first replaces the defaults, \"\" leaves none)")
		fs.Var(&lc.Hot, "hot", "split the items under a prefix into parts on several shards, `PREFIX=SPLITS` (repeatable; the first replaces the default, \"\" leaves none)")
		fs.Var(&lc.Approx, "approx", "make the counters under a prefix approximate, `PREFIX=ERROR` (repeatable; the first replaces the default, \"\" leaves none)")
		fs.Func("limit", "rate limit of every replica, `CLASS=KEY:N,...` as tallyd serve takes it (repeatable; e.g. write=user:5)", func(s string) error {
			l, err := tallynode.ParseLimit(s)
			if err == nil {
				lc.Limits = cliutil.Upsert(lc.Limits, l, func(o tallynode.LimitConfig) bool { return o.Class == l.Class })
			}
			return err
		})
		fs.StringVar(&lc.PIDFile, "pid-file", "", "write the process id to this `file` while running (default <data>/tallyd.pid; \"\": none)")
		fs.IntVar(&lc.MinProcs, "min-procs", lc.MinProcs, "raise GOMAXPROCS to at least `N` (0 or 1 leave it), as serve's --min-procs")
		fs.StringVar(&lc.DebugListen, "debug-listen", "", "serve /debug/pprof/ for the whole process on this `address` (empty: off; keep it on loopback)")
		fs.Var(&lc.Dashboard, "dashboard", "serve the dashboard on `addr` (\"\": none; with --port 0, a free port unless given)")
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(help, fs)
			return lc, err
		}
		return lc, usagef("local: %v (run 'tallyd help local')", err)
	}
	if fs.NArg() > 0 {
		return lc, usagef("local: unexpected argument %q", fs.Arg(0))
	}
	fs.Visit(func(f *flag.Flag) {
		lc.respPortSet = lc.respPortSet || f.Name == "resp-port"
		lc.pidFileSet = lc.pidFileSet || f.Name == "pid-file"
	})
	if !lc.pidFileSet {
		lc.PIDFile = filepath.Join(lc.DataDir, "tallyd.pid")
	}
	lc.Regions = cliutil.SplitList(regions)
	var errs []error
	if len(lc.Regions) == 0 {
		errs = append(errs, errors.New("--regions: at least one region"))
	}
	seen := map[string]bool{}
	for _, r := range lc.Regions {
		// Region names become NATS gateway names: keep them plain.
		if strings.Trim(r, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" || len(r) > 32 {
			errs = append(errs, fmt.Errorf("region %q: want up to 32 of [A-Za-z0-9_-]", r))
		}
		if seen[r] {
			errs = append(errs, fmt.Errorf("region %q given twice", r))
		}
		seen[r] = true
	}
	if lc.Replicas < 1 || lc.Replicas > 16 {
		errs = append(errs, fmt.Errorf("--replicas %d: want 1..16", lc.Replicas))
	}
	if lc.Copies < 1 {
		errs = append(errs, fmt.Errorf("--copies %d: want 1 or more", lc.Copies))
	}
	ports := len(lc.Regions) * max(lc.Replicas, 1) // HTTP and RESP ports: one per replica
	if lc.NATSPort < 0 || lc.NATSPort+len(lc.Regions)-1 > 65535 {
		errs = append(errs, fmt.Errorf("--nats-port %d: want 1..65535 for every region (0: any free ports)", lc.NATSPort))
	}
	if lc.Port < 0 || lc.Port+ports-1 > 65535 {
		errs = append(errs, fmt.Errorf("--port %d: want 1..65535 for every replica (0: any free ports)", lc.Port))
	}
	if lc.RESPPort < 0 || lc.RESPPort+ports-1 > 65535 {
		errs = append(errs, fmt.Errorf("--resp-port %d: want 1..65535 for every replica (0: off)", lc.RESPPort))
	}
	if err := errors.Join(errs...); err != nil {
		return lc, usagef("local: %s", oneLine(err))
	}
	return lc, nil
}

// deployConfig is the deployment lc describes.
func (lc localConfig) deployConfig(log hclog.Logger) deploy.Config {
	d := deploy.DefaultConfig()
	d.Regions, d.DataDir, d.Port, d.NATSPort = lc.Regions, lc.DataDir, lc.Port, lc.NATSPort
	d.Replicas, d.Copies = lc.Replicas, lc.Copies
	d.Durability, d.LogLevel = lc.Durability, lc.LogLevel
	d.WALMinSyncInterval = lc.WALMinSyncInterval
	switch {
	case lc.RESPPort == 0: // off
	case lc.Port == 0 && !lc.respPortSet:
		d.RESP = true // free ports, as the HTTP ports
	default:
		d.RESP, d.RESPPort = true, lc.RESPPort
	}
	d.WriteToken, d.AdminToken = lc.WriteToken, lc.AdminToken
	d.Milestones, d.Logger, d.Version = lc.Milestones, log, version.Version()
	d.Sequences = lc.Sequences.List
	d.Approx = lc.Approx.List
	d.Hot = lc.Hot.List
	d.Limits = lc.Limits
	return d
}

// local runs a full deployment in one process: per region an embedded
// nats-server (joined by gateways through cuttable links) and one replica
// with its HTTP API.
func (c *cli) local(ctx context.Context, args []string) error {
	lc, err := parseLocal(args, c.getenv, c.stdout)
	if err != nil {
		return err
	}
	log := newLogger(c.stderr, lc.LogLevel, lc.LogJSON)
	if hclog.LevelFromString(lc.LogLevel) == hclog.NoLevel {
		return usagef("local: --log-level %q: want trace, debug, info, warn or error", lc.LogLevel)
	}
	if lc.MinProcs < 0 {
		return usagef("local: --min-procs %d: want 0 or more", lc.MinProcs)
	}
	process.RaiseProcs(log, lc.MinProcs)
	process.LogTuning(log)

	dcfg := lc.deployConfig(log)
	if err := dcfg.Validate(); err != nil {
		return usagef("local: %s", oneLine(err))
	}
	stopDebug, err := c.startDebug(ctx, lc.DebugListen, log)
	if err != nil {
		return err
	}
	defer stopDebug()
	if lc.PIDFile != "" {
		remove, err := writePIDFile(lc.PIDFile)
		if err != nil {
			return err
		}
		defer remove()
	}
	fmt.Fprintf(c.stdout, "starting %d regions (embedded NATS super-cluster, JetStream on)...\n", len(lc.Regions))
	if lc.Replicas > 1 {
		fmt.Fprintf(c.stdout, "sharded: %d replicas per region, each shard held by %d of them; any replica takes any key\n",
			lc.Replicas, min(lc.Copies, lc.Replicas))
	}
	d, err := deploy.Start(ctx, dcfg)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		if err := d.Close(sctx); err != nil {
			log.Warn("closing the deployment", "error", err)
		}
	}()
	cfgs, nodes := d.Configs(), d.Nodes()
	for i, n := range nodes {
		fmt.Fprintf(c.stdout, "  %-4s http://%s   (replica %s, data %s, nats %s)\n", cfgs[i].Region, n.Addr(), cfgs[i].Replica, cfgs[i].DataDir, cfgs[i].NATS)
		if a := n.RESPAddr(); a != nil {
			_, port, _ := net.SplitHostPort(a.String())
			fmt.Fprintf(c.stdout, "       resp %s   (redis-cli -p %s)\n", a, port)
		}
		if c.onListen != nil {
			c.onListen(n.Addr())
		}
	}
	if cfgs[0].Milestones != "" {
		fmt.Fprintf(c.stdout, "milestones, as an application: tallyd milestones follow --nats %s --durable myapp\n", cfgs[0].NATS)
	}
	fmt.Fprintf(c.stdout, "nats users as shipped (configs/nats): each replica its own (tally-<replica>), the lease authority; "+
		"without credentials a client is an application (%s); the operator: --user %s --password %s\n",
		natsperm.AppsUser, natsperm.AdminUser, d.NATSPassword(natsperm.AdminUser))
	if lc.Replicas > 1 {
		fmt.Fprintf(c.stdout, "shards: curl http://%s/v1/shards   drain one while serving: curl -X PUT -H 'Content-Type: application/json' -d '{\"drain\":[\"%s\"]}' http://%s/v1/admin/shards/%s\n",
			nodes[0].Addr(), cfgs[1].Replica, nodes[0].Addr(), cfgs[0].Region)
	}
	fmt.Fprintf(c.stdout, "links: curl http://%s/v1/admin/links   cut one: curl -X PUT -H 'Content-Type: application/json' -d '{\"up\":false}' http://%s/v1/admin/links/%s/%s\n",
		nodes[0].Addr(), nodes[0].Addr(), cfgs[0].Region, cfgs[len(cfgs)-1].Region)
	dash, err := startLocalDashboard(ctx, lc, cfgs, nodes, log) // nil if --dashboard ""
	if err != nil {
		return err
	}
	defer dash.Close()
	if dash != nil {
		fmt.Fprintf(c.stdout, "dashboard: http://%s\n", dash.Addr())
	}
	if lc.PIDFile != "" {
		fmt.Fprintf(c.stdout, "pid %d (in %s): stop with Ctrl-C or kill $(cat %s)\n", os.Getpid(), lc.PIDFile, lc.PIDFile)
	}
	fmt.Fprintln(c.stdout, "press Ctrl-C to stop")

	if err := d.Wait(ctx); err != nil {
		return err
	}
	log.Info("shutting down", "reason", context.Cause(ctx))
	return nil
}

// writePIDFile writes this process's id to file (creating its directory)
// while holding an exclusive lock on it, and returns what removes it
// again. A file another running process holds (a deployment already
// running there) is left as it is: the error names that process. The
// lock ends with the process, so a file left by one that died is taken
// over.
func writePIDFile(file string) (remove func(), err error) {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return nil, fmt.Errorf("pid file: %w", err)
	}
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pid file: %w", err)
	}
	if held, err := lockFile(f); err != nil || held {
		b, _ := io.ReadAll(io.LimitReader(f, 32))
		_ = f.Close()
		if held {
			return nil, fmt.Errorf("pid file %s: process %s runs there already (stop it first, or give --data or --pid-file elsewhere)", file, strings.TrimSpace(string(b)))
		}
		return nil, fmt.Errorf("pid file %s: lock: %w", file, err)
	}
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if err := f.Truncate(0); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("pid file: %w", err)
	}
	if _, err := f.WriteAt(pid, 0); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("pid file: %w", err)
	}
	return func() {
		// Still ours (the lock is held): remove, then let go of the lock.
		if b, err := os.ReadFile(file); err == nil && bytes.Equal(b, pid) {
			_ = os.Remove(file)
		}
		_ = f.Close()
	}, nil
}
