package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/node"
	"github.com/tally-dev/tally/shard"
)

// hotItem is the one item bench shards --measure hot likes; hotPrefix
// splits it.
const (
	hotPrefix = "viral:"
	hotItem   = hotPrefix + "bench"
)

// shardHotRow is one deployment's run of bench shards --measure hot.
type shardHotRow struct {
	Replicas, Copies, Parts int
	Route                   string
	Batch, Concurrency      int
	loadResult
	// CPU is the process's CPU time (user and system) during the run;
	// negative where it cannot be read.
	CPU time.Duration
}

// PerSec is the rate of counted likes.
func (r shardHotRow) PerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Counted) / r.Elapsed.Seconds()
}

// CPUPerLike is the process's CPU time per counted like, negative if
// unknown.
func (r shardHotRow) CPUPerLike() time.Duration {
	if r.CPU < 0 || r.Counted <= 0 {
		return -1
	}
	return r.CPU / time.Duration(r.Counted)
}

// runShardsHot loads one item with batched likes by new users: first on
// a region of one replica, the item whole, then for each further
// cfg.Replicas value on a region of that many replicas with the item
// split in as many parts (node.Config.Hot), each batch holding users of
// one part and sent to a holder of that part (route direct, as a routing
// client would) or holding any users and sent to any replica (random,
// which splits it among the parts' holders).
func runShardsHot(ctx context.Context, cfg shardsBenchConfig, env Env, log hclog.Logger, out io.Writer) ([]shardHotRow, error) {
	fmt.Fprintf(out, "bench shards --measure hot: POST /v1/events, batches of %d likes of the one item %s, a new user each,\n", cfg.Batch, hotItem)
	fmt.Fprintf(out, "  %d batches in flight for %s per route after a %s warm-up, region %s of %s, copies %d, durability %s\n",
		cfg.Concurrency, cfg.Duration, cfg.Warmup, cfg.Regions[0], strings.Join(cfg.Regions, ","), cfg.Copies, cfg.Durability)
	fmt.Fprintln(out, "  one replica: the item whole; N replicas: the item split in N parts (hot \"viral:\" { splits = N })")
	fmt.Fprintln(out, "  direct: each batch of one part's users, to a holder of that part; random: any users, to any replica, which splits the batch")
	fmt.Fprintln(out, "  CPU is the whole process's (getrusage): the replicas, NATS and the load generator")
	run := newRunID()
	var rows []shardHotRow
	for _, n := range cfg.Replicas {
		rs, err := hotDeployment(ctx, cfg, n, run, env, log, out)
		rows = append(rows, rs...)
		if err != nil {
			return rows, err
		}
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "replicas\tcopies\tparts\troute\tbatch\tlikes/s\tbatch p50\tbatch p99\terrors\tCPU per like\tcores busy\t")
	for _, r := range rows {
		cpu, cores := cpuColumns(r.CPUPerLike(), r.CPU, r.Elapsed)
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%d\t%.0f\t%s\t%s\t%d\t%s\t%s\t\n", r.Replicas, r.Copies, r.Parts, r.Route, r.Batch, r.PerSec(),
			ms(r.Latency.Quantile(0.5)), ms(r.Latency.Quantile(0.99)), r.Errors, cpu, cores)
	}
	return rows, tw.Flush()
}

// hotDeployment runs every route on one deployment of replicas per
// region, the item split in that many parts (whole with one replica).
func hotDeployment(ctx context.Context, cfg shardsBenchConfig, replicas int, run string, env Env, log hclog.Logger, out io.Writer) (rows []shardHotRow, err error) {
	t0 := time.Now()
	var hot shard.Hot
	if replicas > 1 {
		hot = shard.Hot{{Prefix: hotPrefix, Parts: replicas}}
	}
	d, err := startSharded(ctx, cfg, replicas, env, log, func(c *node.Config) {
		if replicas > 1 {
			c.Hot = []node.HotConfig{{Prefix: hotPrefix, Splits: replicas}}
		}
	})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, d.Close(ctx)) }()
	region := cfg.Regions[0]
	copies := d.maps[region].Copies
	parts := max(hot.Parts(hotItem), 1)
	members := d.of(region)
	partHolders := make([][]int, parts)
	for k, name := range hot.Names(hotItem) {
		partHolders[k] = d.holders[region][shard.Of(name)]
	}
	served := map[int]bool{}
	for _, hs := range partHolders {
		for _, h := range hs {
			served[h] = true
		}
	}
	fmt.Fprintf(out, "\n%d replica(s) per region, copies %d, %d part(s) held by %d replica(s): ready in %s (data %s)\n",
		replicas, copies, parts, len(served), time.Since(t0).Round(time.Millisecond), d.dir)
	hc := &http.Client{Transport: &http.Transport{
		MaxIdleConns: cfg.Concurrency * len(members), MaxIdleConnsPerHost: cfg.Concurrency,
		IdleConnTimeout: 90 * time.Second, DisableCompression: true,
	}}
	defer hc.CloseIdleConnections()
	hr := &shardHotRun{cfg: cfg, urls: d.urls, hc: hc, hot: hot, parts: parts, partHolders: partHolders, members: members}
	if cfg.Warmup > 0 {
		if r := hr.run(ctx, routeDirect, cfg.Warmup, run+".w"+strconv.Itoa(replicas)); r.Errors > 0 {
			return nil, fmt.Errorf("bench shards: warm-up: %d of %d batches failed, the first: %s", r.Errors, r.Requests, r.FirstError)
		}
	}
	for _, route := range cfg.Routes {
		r := hr.run(ctx, route, cfg.Duration, fmt.Sprintf("%s.%d.%s", run, replicas, route))
		r.Replicas, r.Copies, r.Parts = replicas, copies, parts
		rows = append(rows, r)
		fmt.Fprintf(out, "  %s: %d likes in %s, %.0f/s, batch p50 %s, p99 %s, %d errors\n", route, r.Counted,
			r.Elapsed.Round(time.Millisecond), r.PerSec(), ms(r.Latency.Quantile(0.5)), ms(r.Latency.Quantile(0.99)), r.Errors)
		if r.FirstError != "" {
			fmt.Fprintf(out, "    first error: %s\n", r.FirstError)
		}
		if err := ctx.Err(); err != nil {
			return rows, fmt.Errorf("bench shards: interrupted: %w", err)
		}
	}
	return rows, nil
}

// shardHotRun loads one deployment's first region.
type shardHotRun struct {
	cfg         shardsBenchConfig
	urls        []string
	hc          *http.Client
	hot         shard.Hot
	parts       int
	partHolders [][]int // per part, the region's holders of its shard
	members     []int   // the region's replicas
}

// run sends batches by route for dur, the users named under prefix.
func (hr *shardHotRun) run(ctx context.Context, route string, dur time.Duration, prefix string) shardHotRow {
	cpu0 := processCPU()
	res := runLoad(ctx, loadConfig{Workers: hr.cfg.Concurrency, Duration: dur}, func(worker int) loadOp {
		rng := rand.New(rand.NewPCG(rand.Uint64(), uint64(worker)))
		users := prefix + "." + strconv.Itoa(worker) + "."
		var seq int
		var body, buf bytes.Buffer
		return func(ctx context.Context) (int64, int64, error) {
			to := hr.members[rng.IntN(len(hr.members))]
			part := -1
			if route == routeDirect && hr.parts > 1 {
				part = rng.IntN(hr.parts)
				hs := hr.partHolders[part]
				to = hs[rng.IntN(len(hs))]
			} else if route == routeDirect {
				hs := hr.partHolders[0]
				to = hs[rng.IntN(len(hs))]
			}
			body.Reset()
			body.WriteByte('[')
			for n := 0; n < hr.cfg.Batch; {
				seq++
				user := users + strconv.Itoa(seq)
				if part >= 0 && shard.PartOf(user, hr.parts) != part {
					continue // a user of another part
				}
				if n > 0 {
					body.WriteByte(',')
				}
				fmt.Fprintf(&body, `{"type":"like","item":%q,"user":%q}`, hotItem, user)
				n++
			}
			body.WriteByte(']')
			counted, err := hr.post(ctx, to, body.Bytes(), &buf)
			if err != nil {
				return int64(hr.cfg.Batch), 0, err
			}
			return int64(hr.cfg.Batch), counted, nil
		}
	})
	cpu := processCPU()
	if cpu0 < 0 || cpu < 0 {
		cpu = -1
	} else {
		cpu -= cpu0
	}
	return shardHotRow{Route: route, Batch: hr.cfg.Batch, Concurrency: hr.cfg.Concurrency, loadResult: res, CPU: cpu}
}

// post sends one batch to replica to and returns how many likes it
// counted; every one must be (the users are new).
func (hr *shardHotRun) post(ctx context.Context, to int, body []byte, buf *bytes.Buffer) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hr.urls[to]+"/v1/events", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hr.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	buf.Reset()
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return 0, fmt.Errorf("POST /v1/events: reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("POST /v1/events: %s: %s", resp.Status, bytes.TrimSpace(buf.Bytes()))
	}
	// A substring test, not a JSON decode: the load generator shares the
	// cores with what it loads.
	want := `"applied":` + strconv.Itoa(hr.cfg.Batch) + `,`
	if !bytes.Contains(buf.Bytes(), []byte(want)) {
		return 0, fmt.Errorf("POST /v1/events applied less than the batch: %.300s", bytes.TrimSpace(buf.Bytes()))
	}
	return int64(hr.cfg.Batch), nil
}
