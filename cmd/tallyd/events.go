package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tally-dev/tally/internal/cliutil"
	"github.com/tally-dev/tally/replication"
	"github.com/tally-dev/tally/sink"
)

const eventsHelp = `
Every region's replicas publish the events they accept (likes, unlikes,
increments, reconciliations) to the region's JetStream stream
TALLY_EVENTS_<REGION>, in order, each once.

  tallyd events tail   prints one region's events as JSON lines. With
                       --durable the position is kept under that name:
                       run it again and it goes on where it stopped.
  tallyd events sink   copies the regions' events into PostgreSQL
                       (--postgres) or hourly JSON-lines files
                       (--to-dir), each event once, also across a crash
                       (docs/sink.md).
`

// events runs `tallyd events tail` and `tallyd events sink`.
func (c *cli) events(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "sink" {
		return c.eventsSink(ctx, args[1:])
	}
	if len(args) == 0 || args[0] != "tail" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(c.stdout, eventsHelp)
			return flag.ErrHelp
		}
		return usagef("events: want the subcommand tail or sink (run 'tallyd events -h')")
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

const sinkHelp = `
One durable consumer per region (named by --durable, in each region's
stream) reads the events; a batch is written, then acknowledged. The
store skips an event it already holds (by its log and seq), so a batch
delivered again after a crash adds nothing. Runs until interrupted;
run it again with the same --durable and it goes on where it stopped.

--postgres creates the tables tally_events and tally_events_dead if they
are missing. An event PostgreSQL refuses for its content (a NUL byte, a
number out of range) goes to tally_events_dead with the reason, and is
acknowledged; docs/sink.md says how to replay it. A write that fails for
another reason is retried, the pause doubling from 1s to 30s; after
--retry-for of failing writes the sink stops with the reason. A password
is better kept in PGPASSWORD or ~/.pgpass than in the DSN: the driver
reads both, as psql does. --to-dir writes DIR/<region>/<UTC hour of the
event>.jsonl, the lines as 'tallyd events tail' prints them.
`

// eventsSink runs `tallyd events sink`: the regions' events into
// PostgreSQL or hourly files (package sink).
func (c *cli) eventsSink(ctx context.Context, args []string) error {
	var conn cliutil.NATSClient
	var regions, pgDSN, dir, durable, logLevel, metricsListen string
	var batch int
	var logJSON bool
	var retryFor time.Duration
	fs := newFlagSet("events sink", func(fs *flag.FlagSet) {
		conn.Bind(fs, "NATS server `url` that reaches the regions' streams (required)", false)
		fs.StringVar(&regions, "regions", "", "comma-separated `regions` whose events to copy (required)")
		fs.StringVar(&pgDSN, "postgres", "", "PostgreSQL `dsn` (URL or key=value) to write the table tally_events into")
		fs.StringVar(&dir, "to-dir", "", "`dir`ectory to write hourly JSON-lines files into, one per region and hour")
		fs.StringVar(&durable, "durable", "", "consumer `name` the position is kept under (default tally-sink-postgres or tally-sink-files)")
		fs.IntVar(&batch, "batch", 256, "at most `n` stream messages (each up to 512 events) per write")
		fs.StringVar(&logLevel, "log-level", "info", "log `level`: trace, debug, info, warn, error")
		bindLogJSON(fs, &logJSON)
		fs.DurationVar(&retryFor, "retry-for", 10*time.Minute, "stop once a region's writes have failed this `long` on end")
		fs.StringVar(&metricsListen, "metrics-listen", "", "serve the sink's Prometheus metrics at /metrics on this `address` (empty: off)")
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(c.stdout, fs)
			fmt.Fprint(c.stdout, sinkHelp)
			return err
		}
		return usagef("events sink: %v (run 'tallyd events sink -h')", err)
	}
	var rs []string
	for r := range strings.SplitSeq(regions, ",") {
		if r = strings.TrimSpace(r); r != "" {
			rs = append(rs, r)
		}
	}
	switch {
	case fs.NArg() > 0:
		return usagef("events sink: unexpected argument %q", fs.Arg(0))
	case len(rs) == 0:
		return usagef("events sink: --regions is required")
	case (pgDSN == "") == (dir == ""):
		return usagef("events sink: give --postgres or --to-dir, one of them")
	case batch < 1:
		return usagef("events sink: --batch must be at least 1")
	case retryFor <= 0:
		return usagef("events sink: --retry-for must be positive")
	case hclog.LevelFromString(logLevel) == hclog.NoLevel:
		return usagef("events sink: --log-level %q: want trace, debug, info, warn or error", logLevel)
	}
	if durable == "" {
		durable = "tally-sink-postgres"
		if dir != "" {
			durable = "tally-sink-files"
		}
	}
	cfg := sink.Config{Regions: rs, Durable: durable, Batch: batch, RetryFor: retryFor}
	if err := cfg.Validate(); err != nil {
		return usagef("events sink: %v", err)
	}
	if err := conn.Check("events sink", c.getenv); err != nil {
		return err
	}
	log := newLogger(c.stderr, logLevel, logJSON)
	var w sink.Writer
	if pgDSN != "" {
		pg, err := sink.OpenPostgres(ctx, pgDSN, len(rs))
		if err != nil {
			return fmt.Errorf("events sink: %w", err)
		}
		w = pg
	} else {
		files, err := sink.OpenFiles(dir, 0)
		if err != nil {
			return fmt.Errorf("events sink: %w", err)
		}
		w = files
	}
	defer w.Close()
	nc, js, err := conn.Connect("events sink", "tallyd events sink", nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	cfg.JS, cfg.Writer, cfg.Logger = js, w, log
	var reg *prometheus.Registry
	if metricsListen != "" {
		reg = prometheus.NewRegistry()
		cfg.Registerer = reg
	}
	s, err := sink.New(cfg)
	if err != nil {
		return fmt.Errorf("events sink: %w", err)
	}
	if reg != nil {
		stop, err := serveMetrics(metricsListen, reg, log)
		if err != nil {
			return fmt.Errorf("events sink: %w", err)
		}
		defer stop()
	}
	err = s.Run(ctx)
	st := s.Stats()
	log.Info("sink stopped", "events", st.Events, "added", st.Added, "duplicates", st.Duplicates, "malformed", st.Malformed,
		"dead_letters", st.DeadLettered, "write_failures", st.WriteFailures)
	return err
}

// serveMetrics serves reg at /metrics on addr until stop is called.
func serveMetrics(addr string, reg *prometheus.Registry, log hclog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener stopped", "error", err)
		}
	}()
	log.Info("serving metrics", "address", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
