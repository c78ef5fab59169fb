package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/node"
	"github.com/tally-dev/tally/shard"
)

// shardMoveResult is what bench shards --measure move measured.
type shardMoveResult struct {
	Before, During shardLikesRow
	Move           node.MoveResult
}

// runShardsMove loads the first region with single likes sent to random
// replicas (which forward them), first for cfg.Duration alone, then while
// its shards move from cfg.Copies to cfg.Replicas copies (every replica
// joins the shards it lacks, node.MoveShards), and compares the two.
func runShardsMove(ctx context.Context, cfg shardsBenchConfig, env Env, log hclog.Logger, out io.Writer) (res shardMoveResult, err error) {
	region, replicas := cfg.Regions[0], cfg.Replicas[0]
	fmt.Fprintf(out, "bench shards --measure move: region %s of %s, %d replicas, from %d copies to %d while single likes\n",
		region, strings.Join(cfg.Regions, ","), replicas, cfg.Copies, replicas)
	fmt.Fprintf(out, "  (a new user each, items from %d, %d in flight, to random replicas) flow; durability %s\n", cfg.Items, cfg.Concurrency, cfg.Durability)
	t0 := time.Now()
	d, err := startSharded(ctx, cfg, replicas, env, log, nil)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, d.Close(ctx)) }()
	fmt.Fprintf(out, "ready in %s (data %s)\n", time.Since(t0).Round(time.Millisecond), d.dir)
	members := d.of(region)
	hc := &http.Client{Transport: &http.Transport{
		MaxIdleConns: cfg.Concurrency * len(members), MaxIdleConnsPerHost: cfg.Concurrency,
		IdleConnTimeout: 90 * time.Second, DisableCompression: true,
	}}
	defer hc.CloseIdleConnections()
	run := newRunID()
	lr := &shardLikesRun{cfg: cfg, d: d, hc: hc, items: newShardItems("p-", cfg.Items), members: members, holders: d.holders[region]}
	if cfg.Warmup > 0 {
		lr.run(ctx, routeRandom, cfg.Warmup, run+".w")
	}
	res.Before = lr.run(ctx, routeRandom, cfg.Duration, run+".before")
	target, err := shard.Assign(region, d.maps[region].Replicas(), replicas)
	if err != nil {
		return res, err
	}
	lctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		res.During = lr.run(lctx, routeRandom, cfg.Timeout, run+".during")
	}()
	mctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	res.Move, err = d.MoveShards(mctx, target, func(format string, args ...any) { fmt.Fprintf(out, "  "+format+"\n", args...) })
	cancel()
	stop()
	<-done
	if err != nil {
		return res, fmt.Errorf("bench shards: the move: %w", err)
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "likes\tfor\tlikes/s\tp50\tp99\terrors\t")
	for _, r := range []struct {
		name string
		row  shardLikesRow
	}{{"before the move", res.Before}, {"during the move", res.During}} {
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%s\t%s\t%d\t\n", r.name, r.row.Elapsed.Round(time.Millisecond), r.row.PerSec(),
			ms(r.row.Latency.Quantile(0.5)), ms(r.row.Latency.Quantile(0.99)), r.row.Errors)
	}
	if err := tw.Flush(); err != nil {
		return res, err
	}
	fmt.Fprintf(out, "move: %d shard copies joined, synced %s after the join map, released %s after the switch map\n",
		res.Move.Moved, res.Move.Synced.Round(time.Millisecond), res.Move.Released.Round(time.Millisecond))
	if res.During.FirstError != "" {
		fmt.Fprintf(out, "first error during the move: %s\n", res.During.FirstError)
	}
	return res, nil
}
