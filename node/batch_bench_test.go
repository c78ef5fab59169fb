package node

import (
	"context"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/route"
)

// BenchmarkForwardedLikes forwards likes, 64 in flight, from a replica to
// the holder of their shard over an in-process NATS server, sent alone
// (each its own message and writer call) or batched; the holder's writer
// takes 500 µs a call, as a commit with its fsync might. cpu-µs/op is
// the process's CPU (sender, holder and NATS server) per like.
func BenchmarkForwardedLikes(b *testing.B) {
	for _, mode := range []struct {
		name     string
		inFlight int
	}{{"alone", -1}, {"batched", 0}} {
		b.Run(mode.name, func(b *testing.B) {
			conn, m := threeReplicas(b)
			s, first, key := keyHeldElsewhere(m, "us-1")
			nc := conn()
			holder := newShardRouter("us", first, m, nc, natsTransport{nc: nc, region: "us"}, nil, 5*time.Second, hclog.NewNullLogger())
			holder.do = func(ctx context.Context, ops []region.Op) ([]region.Result, error) {
				time.Sleep(500 * time.Microsecond)
				return make([]region.Result, len(ops)), nil
			}
			if err := holder.serve(nil); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(holder.close)
			nc = conn()
			entry := newShardRouter("us", "us-1", m, nc, natsTransport{nc: nc, region: "us"}, nil, 5*time.Second, hclog.NewNullLogger())
			entry.sender = route.NewSender(route.SenderConfig{Self: "us-1", Map: entry.Map, Transport: entry.transport, InFlight: mode.inFlight})
			var before syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
			b.SetParallelism(64 / runtime.GOMAXPROCS(0))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, _, err := entry.Apply(context.Background(), s, []region.Op{{Kind: region.OpLike, Item: key, User: "u"}}, false); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			var after syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
			cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}
