package main

// Transitional names for bench*.go and dashboard*.go, which are moving out
// of this package: the wiring they used now lives in package node and
// internal/deploy. Delete this file with them.

import (
	"context"

	"github.com/tally-dev/tally/httpapi"
	"github.com/tally-dev/tally/internal/deploy"
	"github.com/tally-dev/tally/internal/localnet"
	tallynode "github.com/tally-dev/tally/node"
)

// Config is a replica's config.
type Config = tallynode.Config

// DefaultConfig is tallynode.DefaultConfig.
func DefaultConfig() Config { return tallynode.DefaultConfig() }

type nodeOptions = tallynode.Options

// node is a running replica; store gives the benches its memory use.
type node struct {
	*tallynode.Node
	store *tallynode.Node
}

// startNode is tallynode.Start reporting this binary's version.
func startNode(ctx context.Context, cfg Config, opts nodeOptions) (*node, error) {
	if opts.Version == "" {
		opts.Version = version()
	}
	n, err := tallynode.Start(ctx, cfg, opts)
	if err != nil {
		return nil, err
	}
	return &node{Node: n, store: n}, nil
}

// clusterLinks serves /v1/admin/links from a local cluster.
type clusterLinks struct{ c *localnet.Cluster }

func (l clusterLinks) SetLink(a, b string, up bool) error {
	return deploy.Links{Cluster: l.c}.SetLink(a, b, up)
}

func (l clusterLinks) Links() []httpapi.Link { return deploy.Links{Cluster: l.c}.Links() }

// nodeConfigs is what deploy.Config.NodeConfigs derives for lc.
func (lc localConfig) nodeConfigs(clientURL func(string) string) ([]Config, error) {
	cfgs, err := lc.deployConfig(nil).NodeConfigs(clientURL)
	if err != nil {
		return nil, usagef("local: %s", oneLine(err))
	}
	return cfgs, nil
}

func validToken(s string) bool { return tallynode.ValidToken(s) }
