package main

import (
	"context"
	"fmt"
	"net"
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
