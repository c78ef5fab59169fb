package deploy_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/internal/deploy"
	"github.com/tally-dev/tally/shard"
)

// BenchmarkCashback is a cashback's cost in a sharded region (one region,
// three replicas, copies 2, real NATS and Pebble, in this process), one
// purchase at a time over HTTP: at a replica holding all three balances
// (one commit) and at a replica holding none of them with the balances on
// three shards of different holders (package purchase: a journaled
// intent and four forwarded steps). cpu-us/op is the whole process's CPU
// (the client's too) per purchase.
//
//	go test -run '^$' -bench BenchmarkCashback -benchtime 2000x -count 3 ./internal/deploy/
func BenchmarkCashback(b *testing.B) {
	cfg := deploy.DefaultConfig()
	cfg.Regions, cfg.Replicas, cfg.Copies, cfg.Milestones = []string{"us"}, 3, 2, ""
	cfg.DataDir = b.TempDir()
	d, err := deploy.Start(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = d.Close(ctx)
	})
	urls := d.URLs()
	for _, u := range urls {
		testkit.WaitFor(b, time.Minute, func() error {
			if st, _, err := testkit.DoJSON("GET", u+"/readyz", ""); err != nil || st != 200 {
				return fmt.Errorf("%s not ready: %d %v", u, st, err)
			}
			return nil
		})
	}
	resp, err := http.Get(urls[0] + "/v1/shards")
	if err != nil {
		b.Fatal(err)
	}
	mb, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		b.Fatalf("GET /v1/shards: %d %v", resp.StatusCode, err)
	}
	m, err := shard.Decode(mb)
	if err != nil {
		b.Fatal(err)
	}
	holders := func(k string) string { return strings.Join(m.Holders(shard.Of(k)), ",") }
	find := func(prefix string, ok func(string) bool) string {
		for i := 0; ; i++ {
			if k := fmt.Sprintf("%s%d", prefix, i); ok(k) {
				return k
			}
		}
	}
	// One holder: three keys of one holder set, bought at one of them.
	pool1 := "bpool"
	merchant1 := find("bshop", func(k string) bool { return holders(k) == holders(pool1) })
	user1 := find("buser", func(k string) bool { return holders(k) == holders(pool1) })
	entry1 := ""
	for i, id := range m.Replicas() {
		if strings.Contains(holders(pool1), id) {
			entry1 = urls[i]
			break
		}
	}
	// Across shards: three holder sets, bought at a replica holding the
	// pool's shard but not the others (the entry forwards two steps at
	// least).
	pool2 := "xpool"
	merchant2 := find("xshop", func(k string) bool { return holders(k) != holders(pool2) })
	user2 := find("xuser", func(k string) bool { return holders(k) != holders(pool2) && holders(k) != holders(merchant2) })
	for _, k := range []string{pool1, merchant1, pool2, merchant2} {
		if st, b2, err := testkit.DoJSON("POST", urls[0]+"/v1/budgets/"+k+"/grant", `{"by":1000000000}`); err != nil || st != 200 {
			b.Fatalf("grant %s: %d %v %v", k, st, b2, err)
		}
	}
	var n atomic.Int64
	run := func(b *testing.B, entry, pool, merchant, user string) {
		var before, after syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
		b.ResetTimer()
		for range b.N {
			key := fmt.Sprintf("p%d", n.Add(1))
			body := fmt.Sprintf(`{"budget":%q,"merchant":%q,"user":%q,"amount":1,"idempotency_key":%q}`, pool, merchant, user, key)
			if st, out, err := testkit.DoJSON("POST", entry+"/v1/cashback", body); err != nil || st != 200 {
				b.Fatalf("cashback: %d %v %v", st, out, err)
			}
		}
		b.StopTimer()
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
		cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) / time.Duration(b.N)
		b.ReportMetric(float64(cpu.Microseconds()), "cpu-us/op")
	}
	b.Run("one-holder", func(b *testing.B) { run(b, entry1, pool1, merchant1, user1) })
	b.Run("across-shards", func(b *testing.B) { run(b, urls[0], pool2, merchant2, user2) })
}
