package main

// Loading `tallyd serve`'s configuration: a tallynode.Config from the
// defaults, an HCL file, the environment and flags.

import (
	"errors"
	"flag"
	"io"
	"strings"
	"time"

	"github.com/tally-dev/tally/internal/cliutil"
	tallynode "github.com/tally-dev/tally/node"
)

// duration parses a duration field that Validate accepted.
func duration(s string) time.Duration {
	d, _ := time.ParseDuration(s)
	return d
}

// Environment variables read by serve.
const (
	envWriteToken = "TALLY_WRITE_TOKEN"
	envAdminToken = "TALLY_ADMIN_TOKEN"
	envReadToken  = "TALLY_READ_TOKEN"
	envNATSPass   = cliutil.EnvNATSPassword
)

// bindFlags defines serve's flags on fs, writing into c. Each flag's
// default is c's current value.
func bindFlags(fs *flag.FlagSet, c *tallynode.Config, configFile *string) {
	fs.StringVar(configFile, "config", *configFile, "HCL config `file`; flags given explicitly override its values")
	fs.StringVar(&c.Region, "region", c.Region, "region `name` this replica serves")
	fs.StringVar(&c.Replica, "replica", c.Replica, "stable replica `id` (default <region>-1)")
	fs.StringVar(&c.DataDir, "data", c.DataDir, "data `dir` for Pebble (default ./data/<replica>)")
	fs.StringVar(&c.Listen, "listen", c.Listen, "HTTP listen `address`")
	fs.StringVar(&c.DebugListen, "debug-listen", c.DebugListen, "serve /debug/pprof/ on this `address` (empty: off; keep it on loopback)")
	fs.StringVar(&c.RESPListen, "resp-listen", c.RESPListen, "serve the Redis protocol (RESP) on this `address` (empty: off)")
	fs.IntVar(&c.RESPMaxConnections, "resp-max-connections", c.RESPMaxConnections, "RESP connections open at `most`; the next is refused")
	fs.IntVar(&c.RESPMaxConnectionsPerAddress, "resp-max-connections-per-address", c.RESPMaxConnectionsPerAddress, "RESP connections open at `most` from one client address; its next is refused")
	fs.IntVar(&c.MinProcs, "min-procs", c.MinProcs, "raise GOMAXPROCS to at least `n` (0 or 1: leave it): with one, a WAL fsync stalls the HTTP side")
	fs.StringVar(&c.Durability, "durability", c.Durability, "`mode`: fsync (ack after WAL fsync) or none (unsafe on power loss)")
	fs.StringVar(&c.WALMinSyncInterval, "wal-min-sync-interval", c.WALMinSyncInterval, "hold a WAL fsync until this long after the last one, so more commits share it (`duration`, at most 100ms; empty: 0)")
	fs.StringVar(&c.WriteToken, "write-token", c.WriteToken, "bearer `token` required on write routes (env "+envWriteToken+", or a file named by "+envWriteToken+cliutil.FileSuffix+")")
	fs.StringVar(&c.AdminToken, "admin-token", c.AdminToken, "bearer `token` required on admin routes (env "+envAdminToken+", or a file named by "+envAdminToken+cliutil.FileSuffix+")")
	fs.StringVar(&c.ReadToken, "read-token", c.ReadToken, "bearer `token` required on reads under /v1/ (env "+envReadToken+", or a file named by "+envReadToken+cliutil.FileSuffix+"); each token flag takes several tokens separated by spaces, all valid")
	fs.StringVar(&c.TLSCert, "tls-cert", c.TLSCert, "serve HTTPS with this PEM certificate `file` (reloaded on change and SIGHUP)")
	fs.StringVar(&c.TLSKey, "tls-key", c.TLSKey, "PEM key `file` of --tls-cert")
	fs.StringVar(&c.TLSClientCA, "tls-client-ca", c.TLSClientCA, "require client certificates signed by a CA in this PEM `file` (mutual TLS)")
	fs.BoolVar(&c.InsecureListen, "insecure-listen", c.InsecureListen, "allow listening beyond loopback without TLS or without a write token")
	fs.BoolVar(&c.InsecureOpenAdmin, "insecure-open-admin", c.InsecureOpenAdmin, "allow listening beyond loopback without an admin token: admin routes open to anyone reaching the port")
	fs.Func("limit", "rate limit of a route class, `CLASS=KEY:N,...` (repeatable; classes write, read, scan; keys client, client_burst, user, user_burst; e.g. write=client:100,user:10), per second, per replica", func(s string) error {
		lc, err := tallynode.ParseLimit(s)
		if err == nil { // a flag overrides the file's limit of its class
			c.Limits = cliutil.Upsert(c.Limits, lc, func(o tallynode.LimitConfig) bool { return o.Class == lc.Class })
		}
		return err
	})
	fs.Func("trusted-proxies", "comma-separated `addresses` or CIDR prefixes of proxies whose X-Forwarded-For names the client the rate limits key on", cliutil.CommaList(&c.TrustedProxies))
	fs.StringVar(&c.DrainDelay, "drain-delay", c.DrainDelay, "on SIGTERM, how long /readyz fails before the listener closes (`duration`)")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log `level`: trace, debug, info, warn, error")
	fs.BoolVar(&c.LogJSON, "log-json", c.LogJSON, logJSONUsage)
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", c.MaxBodyBytes, "largest accepted request body in `bytes`")
	fs.StringVar(&c.RequestTimeout, "request-timeout", c.RequestTimeout, "how long a write waits for its commit (`duration`)")
	fs.BoolVar(&c.LikeLists, "like-lists", c.LikeLists, "keep the liker and liked-item lists (two more keys per like; false drops them)")
	fs.BoolVar(&c.EventLog, "event-log", c.EventLog, "keep the event log: every accepted event, shipped to the region's stream (false: none, no audit)")
	fs.StringVar(&c.EventRetention, "event-retention", c.EventRetention, "how long the region's event stream keeps events (`duration`)")
	fs.StringVar(&c.EventLogKeep, "event-log-keep", c.EventLogKeep, "how long a published event stays in the local log the audit reads (`duration`; 0: forever)")
	fs.StringVar(&c.IdempotencyTTL, "idempotency-ttl", c.IdempotencyTTL, "how long idempotency keys are remembered (`duration`; 0: forever)")
	fs.StringVar(&c.Windows, "windows", c.Windows, "slot levels of every count, width:keep pairs (`levels`, e.g. 1s:3h,1m:15d,1h:3y; \"\": none)")
	fs.StringVar(&c.EventTimePast, "event-time-past", c.EventTimePast, "how far in the past a client-given event time may be (`duration`)")
	fs.StringVar(&c.EventTimeFuture, "event-time-future", c.EventTimeFuture, "how far in the future a client-given event time may be (`duration`)")
	fs.IntVar(&c.TrendingCapacity, "trending-capacity", c.TrendingCapacity, "counters per trending sketch (`k`): keys above 1/k of a window's additions are never missed")
	fs.StringVar(&c.UniquesWindows, "uniques-windows", c.UniquesWindows, "slot levels of every unique count (`levels`, e.g. 1h:8d,1d:400d; \"\": none)")
	fs.Func("approx", "make the counters under a prefix approximate, `PREFIX=ERROR` (repeatable; e.g. views:=0.01, \"=0.05\" for every counter): counted in growing steps, at that relative standard error", func(s string) error {
		ac, err := tallynode.ParseApprox(s)
		if err == nil { // a flag overrides the file's rule for its prefix
			c.Approx = cliutil.Upsert(c.Approx, ac, func(o tallynode.ApproxConfig) bool { return o.Prefix == ac.Prefix })
		}
		return err
	})
	fs.Func("hot", "split the items under a prefix into parts on several shards, `PREFIX=SPLITS` (repeatable; e.g. viral:=3; every replica must say the same)", func(s string) error {
		hc, err := tallynode.ParseHot(s)
		if err == nil { // a flag overrides the file's block for its prefix
			c.Hot = cliutil.Upsert(c.Hot, hc, func(o tallynode.HotConfig) bool { return o.Prefix == hc.Prefix })
		}
		return err
	})
	fs.StringVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "how long shutdown waits for in-flight requests (`duration`)")
	fs.StringVar(&c.NATS, "nats", c.NATS, "NATS `url` of this region (empty: standalone, no replication)")
	fs.StringVar(&c.NATSCreds, "nats-creds", c.NATSCreds, "NATS credentials `file`")
	fs.StringVar(&c.NATSUser, "nats-user", c.NATSUser, "NATS `user` (password from env "+envNATSPass+", or a file named by "+envNATSPass+cliutil.FileSuffix+")")
	fs.StringVar(&c.NATSCA, "nats-ca", c.NATSCA, "PEM `file` of the CA of the NATS servers' certificates (turns on TLS)")
	fs.StringVar(&c.NATSCert, "nats-cert", c.NATSCert, "client certificate `file` for NATS")
	fs.StringVar(&c.NATSKey, "nats-key", c.NATSKey, "client key `file` for NATS")
	fs.Func("peers", "comma-separated replica `ids` of the other replicas", cliutil.CommaList(&c.Peers))
	fs.Func("retired", "comma-separated `ids` of replicas gone for good (their state is taken from peers only when recovering from an empty data directory)", cliutil.CommaList(&c.Retired))
	fs.StringVar(&c.FlushInterval, "flush-interval", c.FlushInterval, "how often changes are published (`duration`)")
	fs.StringVar(&c.AntiEntropyInterval, "anti-entropy-interval", c.AntiEntropyInterval, "how often digests are compared with peers (`duration`)")
	fs.StringVar(&c.PeerTimeout, "peer-timeout", c.PeerTimeout, "a peer unheard-from this long makes reads approx (`duration`)")
	fs.StringVar(&c.RecoveryTimeout, "recovery-timeout", c.RecoveryTimeout, "longest wait for peers at start when data exists (`duration`)")
	fs.StringVar(&c.Milestones, "milestones", c.Milestones, "number likes and fire these `milestones` once: e.g. 1000,1000000,10^k,every:500 (needs --nats)")
	fs.Func("sequence", "also number `NAME=COUNTS/MATCH/MILESTONES` (repeatable), e.g. search=increments/search:*/every:1000000 or launch=likes/video:launch/1000000", func(s string) error {
		sc, err := tallynode.ParseSequence(s)
		if err != nil {
			return err
		}
		c.Sequences = append(c.Sequences, sc)
		return nil
	})
	fs.StringVar(&c.AllocCluster, "alloc-cluster", c.AllocCluster, "NATS `cluster` (region) holding the allocator bucket and milestone stream")
	fs.IntVar(&c.AllocReplicas, "alloc-replicas", c.AllocReplicas, "replicas of the allocator bucket and milestone stream (`n`: 1, 3 or 5)")
	fs.StringVar(&c.LeaseTTL, "lease-ttl", c.LeaseTTL, "how long a cut-off replica numbers from an unrenewed lease (`duration`)")
	fs.BoolVar(&c.AllocAuthority, "alloc-authority", c.AllocAuthority, "write the allocator's bucket through the lease authority (tallyd lease-authority)")
	fs.StringVar(&c.LeaseReclaimAfter, "lease-reclaim-after", c.LeaseReclaimAfter, "free a silent replica's lease tail after its beat is still this long (`duration` > lease-ttl; 0: never)")
}

// loadConfig builds the serve config from args, the config file they name
// and the environment. Flags are parsed twice: once to find --config and
// report flag errors, then again over the file's values, so only flags the
// user actually gave override the file. A usage error (bad flag, bad file,
// invalid values) is a *usageError; a config with problems is one
// wrapping *configProblems, which lists every problem of the file and of
// the values at once. -h returns flag.ErrHelp after printing usage to
// help.
func loadConfig(args []string, getenv func(string) string, help io.Writer) (tallynode.Config, error) {
	return loadConfigAs("serve", args, getenv, help)
}

// loadConfigAs is loadConfig for command cmd (serve, or validate, which
// checks what serve would run).
//
// checks, if any, find more problems in a config whose values are read
// (validate's look at the files it names).
func loadConfigAs(cmd string, args []string, getenv func(string) string, help io.Writer, checks ...func(tallynode.Config) []string) (tallynode.Config, error) {
	var file string
	first := tallynode.DefaultConfig()
	fs := newFlagSet(cmd, func(fs *flag.FlagSet) { bindFlags(fs, &first, &file) })
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(help, fs)
			return tallynode.Config{}, err
		}
		return tallynode.Config{}, usagef("%s: %v (run 'tallyd help %s')", cmd, err, cmd)
	}
	if fs.NArg() > 0 {
		return tallynode.Config{}, usagef("%s: unexpected argument %q", cmd, fs.Arg(0))
	}

	cfg := tallynode.DefaultConfig()
	var problems []string
	if file != "" {
		if err := cliutil.DecodeHCLFile(file, &cfg); errors.Is(err, cliutil.ErrUnparsed) {
			// Nothing decoded: checking the values would only report
			// the defaults.
			return tallynode.Config{}, &usageError{Err: err}
		} else if err != nil {
			problems = append(problems, strings.Split(err.Error(), "\n")...)
		}
	}
	// Each secret from its variable, or from the file its _FILE variable
	// names (a mounted Secret: every pod its own NATS user's password).
	for _, s := range []struct {
		env string
		dst *string
	}{{envWriteToken, &cfg.WriteToken}, {envReadToken, &cfg.ReadToken}, {envAdminToken, &cfg.AdminToken}, {envNATSPass, &cfg.NATSPassword}} {
		v, err := cliutil.EnvSecret(getenv, s.env)
		if err != nil {
			problems = append(problems, err.Error())
		} else if v != "" {
			*s.dst = v
		}
	}
	second := newFlagSet(cmd, func(fs *flag.FlagSet) { bindFlags(fs, &cfg, &file) })
	if err := second.Parse(args); err != nil {
		return tallynode.Config{}, usagef("%s: %v", cmd, err) // cannot happen: the first parse passed
	}
	cfg.Derive()
	if err := cfg.Validate(); err != nil {
		problems = append(problems, strings.Split(err.Error(), "\n")...) // one problem a line
	}
	for _, check := range checks {
		problems = append(problems, check(cfg)...)
	}
	if len(problems) > 0 {
		return tallynode.Config{}, &usageError{Err: &configProblems{list: problems}}
	}
	return cfg, nil
}

// configProblems is every problem of a configuration: those the HCL
// library found in the file (unknown attributes and blocks, wrong types),
// then those node.Config.Validate found in the values.
type configProblems struct{ list []string }

func (p *configProblems) Error() string { return "invalid config: " + strings.Join(p.list, "; ") }
