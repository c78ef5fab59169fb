package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// bench measures a running tally against the targets in docs/architecture.md:
//
//	tallyd bench likes        HTTP like throughput and latency
//	tallyd bench events       batched ingest (POST /v1/events) throughput
//	tallyd bench space        Pebble bytes per liked (item, user)
//	tallyd bench replication  ack→visible lag and convergence after a heal
//	tallyd bench budget       budget spends/s, latency and overspend
//	tallyd bench shards       a sharded region: bytes per replica, likes/s
//	                          direct and forwarded, heal time
//	tallyd bench sim          regions × replicas sharded in one process over
//	                          the in-memory transport: bytes per replica and
//	                          on the wire per like, heal time, vector sizes
//
// They start what they measure in process when not pointed elsewhere, so
// they run with no setup; docs/benchmarks.md records their figures.
func (c *cli) bench(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("bench: want a mode: likes, events, space, replication, budget, shards or sim (run 'tallyd help bench')")
	}
	switch args[0] {
	case "likes":
		return c.benchLikes(ctx, args[1:])
	case "events":
		return c.benchEvents(ctx, args[1:])
	case "space":
		return c.benchSpace(ctx, args[1:])
	case "replication":
		return c.benchReplication(ctx, args[1:])
	case "budget":
		return c.benchBudget(ctx, args[1:])
	case "shards":
		return c.benchShards(ctx, args[1:])
	case "sim":
		return c.benchSim(ctx, args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Fprint(c.stdout, benchUsage)
		return flag.ErrHelp
	}
	return usagef("bench: unknown mode %q: want likes, events, space, replication, budget, shards or sim", args[0])
}

const benchUsage = `usage: tallyd bench <mode> [flags]

modes:
  likes        PUT /v1/likes/{item}/{user} load at several concurrency levels:
               throughput and p50/p99/p999 latency (in-process replica unless --url)
  events       POST /v1/events batches of incr or like events: events/s,
               counted events/s and memory over time (in-process replica unless --url)
  space        like N distinct (item, user) pairs, compact, and report the
               sstable bytes per pair
  replication  an in-process local deployment: replication lag from ack to
               visibility in the other regions, and time to agree after a heal
  budget       clients spending one budget by 1 in a loop: spends/s, latency,
               refusals and overspend (which must be 0), on one in-process
               replica, --regions N in-process regions, or --url
  shards       in-process sharded deployments (--replicas N --copies R):
               --measure space: sstable bytes per replica for the same likes;
               likes: single likes/s, p50/p99 and CPU per like, sent to a
               holder or to any replica (forwarded); heal: time to exact
               counts everywhere after a cut
  sim          a whole deployment in one process over the in-memory transport
               (--regions 10 --replicas 6 --copies 2 --items 1000000): bytes
               stored per replica, bytes on the wire per like (fast path and
               anti-entropy), heal time after a cut, one item's vector size by
               writers, and a projection to 100 replicas per region

run 'tallyd bench <mode> -h' for a mode's flags
`

// parseBenchFlags parses a bench mode's flags, printing them to help on -h.
func parseBenchFlags(fs *flag.FlagSet, args []string, help io.Writer) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(help, fs)
			return err
		}
		return usagef("%s: %v (run 'tallyd %s -h')", fs.Name(), err, fs.Name())
	}
	if fs.NArg() > 0 {
		return usagef("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	}
	return nil
}

// parseInts parses a comma-separated list of integers.
func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// histogram records durations in log-linear buckets, as HDR histograms do:
// 2^histSubBits buckets per power of two of nanoseconds, so a quantile is
// within 1/2^histSubBits (1.6%) of the true value at any magnitude and
// memory is fixed however many values are recorded. Count, min and max are
// exact. The zero value is empty and ready. It is not safe for concurrent
// use: give each goroutine its own and merge them.
type histogram struct {
	counts   [histBuckets]uint64
	n        uint64
	sum      time.Duration
	min, max time.Duration
}

const (
	histSubBits = 6
	histSub     = 1 << histSubBits
	// Values below histSub have a bucket each; every power of two above
	// has histSub buckets, up to 2^63.
	histBuckets = (64 - histSubBits) << histSubBits
)

// histIndex is the bucket of v nanoseconds.
func histIndex(v uint64) int {
	if v < histSub {
		return int(v)
	}
	shift := bits.Len64(v) - histSubBits - 1
	return (shift+1)<<histSubBits + int(v>>shift&(histSub-1))
}

// histUpper is the largest value of bucket i.
func histUpper(i int) uint64 {
	if i < histSub {
		return uint64(i)
	}
	shift := i>>histSubBits - 1
	sub := uint64(i & (histSub - 1))
	return (histSub+sub)<<shift + (1<<shift - 1)
}

// Record adds one duration; negative ones count as 0.
func (h *histogram) Record(d time.Duration) {
	d = max(d, 0)
	if h.n == 0 || d < h.min {
		h.min = d
	}
	h.max = max(h.max, d)
	h.n++
	h.sum += d
	h.counts[histIndex(uint64(d))]++
}

// Merge adds every value of o.
func (h *histogram) Merge(o *histogram) {
	if o.n == 0 {
		return
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
	for i, c := range o.counts {
		h.counts[i] += c
	}
}

// Count is how many durations were recorded.
func (h *histogram) Count() uint64 { return h.n }

// Max is the largest duration recorded.
func (h *histogram) Max() time.Duration { return h.max }

// Mean is the average duration, 0 if none.
func (h *histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}

// Quantile is the nearest-rank q-quantile (0 < q ≤ 1): the upper bound of
// the bucket holding the ceil(q·n)-th smallest value, clamped to [min, max].
// It is 0 for an empty histogram.
func (h *histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := max(uint64(math.Ceil(q*float64(h.n))), 1)
	var cum uint64
	for i, c := range h.counts {
		if cum += c; cum >= rank {
			return min(max(time.Duration(histUpper(i)), h.min), h.max)
		}
	}
	return h.max
}

// ms formats d in milliseconds for tables.
func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 2, 64) + "ms"
}
