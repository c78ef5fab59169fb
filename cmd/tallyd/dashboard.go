package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/internal/dashboard"
	tallynode "github.com/tally-dev/tally/node"
)

// dashboardAddr is the --dashboard flag: where the dashboard listens, ""
// for none. It remembers whether it was given so that `local --port 0`
// (any free ports) also moves a defaulted dashboard to a free port rather
// than claiming dashboard.DefaultAddr.
type dashboardAddr struct {
	Addr  string
	Given bool
}

func (d *dashboardAddr) String() string { return d.Addr }

// Set implements flag.Value.
func (d *dashboardAddr) Set(s string) error {
	if s != "" {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return fmt.Errorf("want host:port, or \"\" for no dashboard: %w", err)
		}
	}
	d.Addr, d.Given = s, true
	return nil
}

// listenAddr is where to listen given local's --port, "" for no dashboard.
func (d dashboardAddr) listenAddr(port int) string {
	if port == 0 && !d.Given && d.Addr != "" {
		if host, _, err := net.SplitHostPort(d.Addr); err == nil {
			return net.JoinHostPort(host, "0")
		}
	}
	return d.Addr
}

// startLocalDashboard starts the dashboard of a `local` deployment on
// --dashboard, or returns nil if that is empty.
func startLocalDashboard(ctx context.Context, lc localConfig, cfgs []tallynode.Config, nodes []*tallynode.Node, log hclog.Logger) (*dashboard.Server, error) {
	addr := lc.Dashboard.listenAddr(lc.Port)
	if addr == "" {
		return nil, nil
	}
	// A token setting may list several tokens (rotation): the dashboard
	// sends the first.
	first := func(setting string) string {
		if f := strings.Fields(setting); len(f) > 0 {
			return f[0]
		}
		return ""
	}
	dcfg := dashboard.Config{WriteToken: first(lc.WriteToken), AdminToken: first(lc.AdminToken), Listen: addr}
	for i, n := range nodes {
		dcfg.Regions = append(dcfg.Regions, dashboard.Target{Region: cfgs[i].Region, Replica: cfgs[i].Replica, URL: "http://" + n.Addr().String()})
	}
	return dashboard.Start(ctx, addr, dashboard.New(dcfg), log.Named("dashboard"))
}

// dashboardConfig is what `tallyd dashboard` takes: the dashboard of a
// deployment that runs elsewhere (deploy/compose), rather than of
// `tallyd local`'s own replicas.
type dashboardConfig struct {
	Listen                 string
	Targets                []dashboard.Target
	WriteToken, AdminToken string
	LogJSON                bool
}

// parseTarget parses --replica REGION/REPLICA=URL.
func parseTarget(s string) (dashboard.Target, error) {
	who, u, ok := strings.Cut(s, "=")
	region, replica, ok2 := strings.Cut(who, "/")
	if !ok || !ok2 || region == "" || replica == "" {
		return dashboard.Target{}, fmt.Errorf("%q: want REGION/REPLICA=URL", s)
	}
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return dashboard.Target{}, fmt.Errorf("%q: want an http:// or https:// URL after the =", s)
	}
	return dashboard.Target{Region: region, Replica: replica, URL: strings.TrimSuffix(u, "/")}, nil
}

func parseDashboard(args []string, getenv func(string) string, help io.Writer) (dashboardConfig, error) {
	dc := dashboardConfig{Listen: dashboard.DefaultAddr}
	fs := newFlagSet("dashboard", func(fs *flag.FlagSet) {
		fs.StringVar(&dc.Listen, "listen", dc.Listen, "serve the dashboard on this `address`")
		fs.Func("replica", "a replica to show, `REGION/REPLICA=URL` of its HTTP API (repeatable, one or more)", func(s string) error {
			t, err := parseTarget(s)
			if err == nil {
				dc.Targets = append(dc.Targets, t)
			}
			return err
		})
		fs.StringVar(&dc.WriteToken, "write-token", getenv(envWriteToken), "bearer `token` the dashboard's likes and increments send (env "+envWriteToken+")")
		fs.StringVar(&dc.AdminToken, "admin-token", getenv(envAdminToken), "bearer `token` its admin actions send (env "+envAdminToken+")")
		bindLogJSON(fs, &dc.LogJSON)
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(help, fs)
			return dc, err
		}
		return dc, usagef("dashboard: %v (run 'tallyd help dashboard')", err)
	}
	switch {
	case fs.NArg() > 0:
		return dc, usagef("dashboard: unexpected argument %q", fs.Arg(0))
	case len(dc.Targets) == 0:
		return dc, usagef("dashboard: give at least one --replica REGION/REPLICA=URL")
	}
	if _, _, err := net.SplitHostPort(dc.Listen); err != nil {
		return dc, usagef("dashboard: --listen %q: %v", dc.Listen, err)
	}
	return dc, nil
}

// dashboard serves the dashboard of replicas given by URL until ctx ends.
func (c *cli) dashboard(ctx context.Context, args []string) error {
	dc, err := parseDashboard(args, c.getenv, c.stdout)
	if err != nil {
		return err
	}
	log := newLogger(c.stderr, "info", dc.LogJSON)
	first := func(setting string) string { // a setting may list several tokens: send the first
		if f := strings.Fields(setting); len(f) > 0 {
			return f[0]
		}
		return ""
	}
	d := dashboard.New(dashboard.Config{Regions: dc.Targets, WriteToken: first(dc.WriteToken), AdminToken: first(dc.AdminToken), Listen: dc.Listen})
	s, err := dashboard.Start(ctx, dc.Listen, d, log.Named("dashboard"))
	if err != nil {
		return err
	}
	defer s.Close()
	fmt.Fprintf(c.stdout, "dashboard: http://%s\n", s.Addr())
	if c.onListen != nil {
		c.onListen(s.Addr())
	}
	<-ctx.Done()
	return nil
}
