package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/httpapi"
)

// shardLikesRow is one route's run on one deployment of bench shards
// --measure likes.
type shardLikesRow struct {
	Replicas, Copies int
	Route            string
	Concurrency      int
	loadResult
	// Forwarded counts successful likes whose answer was served
	// (Tally-Served-By) by another replica than the one they were sent to.
	Forwarded int64
	// Unheld counts successful likes sent to a replica that holds no
	// copy of their item's shard: the likes that must be forwarded.
	Unheld int64
	// CPU is the process's CPU time (user and system) during the run;
	// negative where it cannot be read.
	CPU time.Duration
}

// PerSec is the rate of successful likes.
func (r shardLikesRow) PerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests-r.Errors) / r.Elapsed.Seconds()
}

// CPUPerLike is the process's CPU time per successful like, negative if
// unknown.
func (r shardLikesRow) CPUPerLike() time.Duration {
	ok := r.Requests - r.Errors
	if r.CPU < 0 || ok <= 0 {
		return -1
	}
	return r.CPU / time.Duration(ok)
}

// ForwardedShare is the share of successful likes served elsewhere.
func (r shardLikesRow) ForwardedShare() float64 {
	ok := r.Requests - r.Errors
	if ok <= 0 {
		return 0
	}
	return float64(r.Forwarded) / float64(ok)
}

// runShardsLikes starts a deployment per cfg.Replicas value and loads its
// first region with single likes by each of cfg.Routes in turn.
func runShardsLikes(ctx context.Context, cfg shardsBenchConfig, env Env, log hclog.Logger, out io.Writer) ([]shardLikesRow, error) {
	fmt.Fprintf(out, "bench shards --measure likes: single PUT /v1/likes/{item}/{user}, a new user each, items drawn uniformly from %d,\n", cfg.Items)
	fmt.Fprintf(out, "  %d in flight (one keep-alive connection per worker and replica) for %s per route after a %s direct warm-up,\n", cfg.Concurrency, cfg.Duration, cfg.Warmup)
	fmt.Fprintf(out, "  region %s of %s, copies %d, durability %s, tallyd's defaults otherwise (milestones off)\n", cfg.Regions[0], strings.Join(cfg.Regions, ","), cfg.Copies, cfg.Durability)
	fmt.Fprintln(out, "  direct: to a holder of the item's shard (GET /v1/shards); random: to any replica of the region, which forwards")
	fmt.Fprintln(out, "  over NATS when it holds no copy. CPU is the whole process's (getrusage): the replicas, NATS and the load generator")
	items := newShardItems("p-", cfg.Items)
	run := newRunID()
	var rows []shardLikesRow
	for _, n := range cfg.Replicas {
		rs, err := likesDeployment(ctx, cfg, n, items, run, env, log, out)
		rows = append(rows, rs...)
		if err != nil {
			return rows, err
		}
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "replicas\tcopies\troute\tlikes/s\tp50\tp99\tforwarded\terrors\tCPU per like\tcores busy\t")
	for _, r := range rows {
		cpu, cores := cpuColumns(r.CPUPerLike(), r.CPU, r.Elapsed)
		fmt.Fprintf(tw, "%d\t%d\t%s\t%.0f\t%s\t%s\t%.1f%%\t%d\t%s\t%s\t\n", r.Replicas, r.Copies, r.Route, r.PerSec(),
			ms(r.Latency.Quantile(0.5)), ms(r.Latency.Quantile(0.99)), 100*r.ForwardedShare(), r.Errors, cpu, cores)
	}
	return rows, tw.Flush()
}

// likesDeployment runs every route on one deployment of replicas per
// region.
func likesDeployment(ctx context.Context, cfg shardsBenchConfig, replicas int, items shardItems, run string, env Env, log hclog.Logger, out io.Writer) (rows []shardLikesRow, err error) {
	t0 := time.Now()
	d, err := startSharded(ctx, cfg, replicas, env, log, nil)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, d.Close(ctx)) }()
	copies := d.maps[cfg.Regions[0]].Copies
	fmt.Fprintf(out, "\n%d replica(s) per region, copies %d: ready in %s (data %s)\n", replicas, copies, time.Since(t0).Round(time.Millisecond), d.dir)
	members := d.of(cfg.Regions[0])
	hc := &http.Client{Transport: &http.Transport{
		MaxIdleConns: cfg.Concurrency * len(members), MaxIdleConnsPerHost: cfg.Concurrency,
		IdleConnTimeout: 90 * time.Second, DisableCompression: true,
	}}
	defer hc.CloseIdleConnections()
	lr := &shardLikesRun{cfg: cfg, d: d, hc: hc, items: items, members: members, holders: d.holders[cfg.Regions[0]]}
	if cfg.Warmup > 0 {
		if r := lr.run(ctx, routeDirect, cfg.Warmup, run+".w"+strconv.Itoa(replicas)); r.Errors > 0 {
			return nil, fmt.Errorf("bench shards: warm-up: %d of %d likes failed, the first: %s", r.Errors, r.Requests, r.FirstError)
		}
	}
	for _, route := range cfg.Routes {
		r := lr.run(ctx, route, cfg.Duration, fmt.Sprintf("%s.%d.%s", run, replicas, route))
		r.Replicas, r.Copies = replicas, copies
		rows = append(rows, r)
		fmt.Fprintf(out, "  %s: %d likes in %s, %.0f/s, p50 %s, p99 %s, %.1f%% forwarded, %d errors\n", route, r.Requests-r.Errors,
			r.Elapsed.Round(time.Millisecond), r.PerSec(), ms(r.Latency.Quantile(0.5)), ms(r.Latency.Quantile(0.99)), 100*r.ForwardedShare(), r.Errors)
		if r.FirstError != "" {
			fmt.Fprintf(out, "    first error: %s\n", r.FirstError)
		}
		if err := ctx.Err(); err != nil {
			return rows, fmt.Errorf("bench shards: interrupted: %w", err)
		}
	}
	return rows, nil
}

// shardLikesRun loads one deployment's first region.
type shardLikesRun struct {
	cfg     shardsBenchConfig
	d       *shardedDeployment
	hc      *http.Client
	items   shardItems
	members []int   // the region's replicas
	holders [][]int // per shard, the region's holders
}

// run sends single likes by route for dur, the users named under prefix,
// and measures them and the process's CPU.
func (lr *shardLikesRun) run(ctx context.Context, route string, dur time.Duration, prefix string) shardLikesRow {
	var forwarded, unheld atomic.Int64
	cpu0 := processCPU()
	res := runLoad(ctx, loadConfig{Workers: lr.cfg.Concurrency, Duration: dur}, func(worker int) loadOp {
		rng := rand.New(rand.NewPCG(rand.Uint64(), uint64(worker)))
		users := prefix + "." + strconv.Itoa(worker) + "."
		var seq int
		var buf bytes.Buffer
		return func(ctx context.Context) (int64, int64, error) {
			k := rng.IntN(len(lr.items.names))
			to := lr.members[rng.IntN(len(lr.members))]
			if route == routeDirect {
				hs := lr.holders[lr.items.shards[k]]
				to = hs[rng.IntN(len(hs))]
			}
			seq++
			by, err := lr.like(ctx, to, lr.items.names[k], users+strconv.Itoa(seq), &buf)
			if err != nil {
				return 1, 0, err
			}
			if by != lr.d.id[to] {
				forwarded.Add(1)
			}
			if !slices.Contains(lr.holders[lr.items.shards[k]], to) {
				unheld.Add(1)
			}
			return 1, 1, nil
		}
	})
	cpu := processCPU()
	if cpu0 < 0 || cpu < 0 {
		cpu = -1
	} else {
		cpu -= cpu0
	}
	return shardLikesRow{Route: route, Concurrency: lr.cfg.Concurrency, loadResult: res, Forwarded: forwarded.Load(), Unheld: unheld.Load(), CPU: cpu}
}

// like sends one new like to replica to and returns who served it. It
// must change the count: the user is new.
func (lr *shardLikesRun) like(ctx context.Context, to int, item, user string, buf *bytes.Buffer) (servedBy string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	path := "/v1/likes/" + item + "/" + user
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, lr.d.urls[to]+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := lr.hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	buf.Reset()
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return "", fmt.Errorf("PUT %s at %s: reading the answer: %w", path, lr.d.id[to], err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("PUT %s at %s: %s: %s", path, lr.d.id[to], resp.Status, bytes.TrimSpace(buf.Bytes()))
	}
	// A substring test, not a JSON decode, as bench likes does: the load
	// generator shares the cores with what it loads.
	if !bytes.Contains(buf.Bytes(), []byte(`"changed":true`)) {
		return "", fmt.Errorf("PUT %s at %s changed nothing: %s", path, lr.d.id[to], bytes.TrimSpace(buf.Bytes()))
	}
	if by := resp.Header.Get(httpapi.ServedByHeader); by != "" {
		return by, nil
	}
	return lr.d.id[to], nil // an unsharded region names nobody: served where it arrived
}

// cpuColumns are a table's "CPU per like" and "cores busy" cells; "-"
// when the process's CPU could not be read (perLike < 0).
func cpuColumns(perLike, cpu, elapsed time.Duration) (string, string) {
	if perLike < 0 {
		return "-", "-"
	}
	return strconv.FormatFloat(float64(perLike)/float64(time.Microsecond), 'f', 1, 64) + "µs",
		strconv.FormatFloat(cpu.Seconds()/elapsed.Seconds(), 'f', 2, 64)
}
