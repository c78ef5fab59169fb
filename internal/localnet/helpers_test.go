package localnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// testLogger logs to stderr when LOCALNET_LOGS is set (e.g. "debug").
func testLogger() hclog.Logger {
	lvl := os.Getenv("LOCALNET_LOGS")
	if lvl == "" {
		return nil
	}
	return hclog.New(&hclog.LoggerOptions{Level: hclog.LevelFromString(lvl), Output: os.Stderr})
}

// startCluster starts a cluster of the given regions, closed at cleanup.
func startCluster(t testing.TB, regions ...string) *Cluster {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Regions = regions
	cfg.Dir = t.TempDir()
	cfg.Logger = testLogger()
	cfg.JetStreamMaxStore = 64 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	start := time.Now()
	c, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Logf("cluster %v started in %v", regions, time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return c
}

// connect connects a client to a region, closed at cleanup.
func connect(t testing.TB, c *Cluster, region string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(c.ClientURL(region), nats.Name("test-"+region))
	if err != nil {
		t.Fatalf("connect to %s: %v", region, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// delivered publishes a unique payload on subj from pub and reports
// whether it reaches ch shortly after: one polling step of a delivery
// check. Other messages on ch (late payloads of earlier steps) are
// discarded.
func delivered(pub *nats.Conn, subj string, ch <-chan *nats.Msg) error {
	payload := "ping-" + nuid.Next()
	if err := pub.Publish(subj, []byte(payload)); err != nil {
		return err
	}
	if err := pub.Flush(); err != nil {
		return err
	}
	timeout := time.After(50 * time.Millisecond)
	for {
		select {
		case m := <-ch:
			if string(m.Data) == payload {
				return nil
			}
		case <-timeout:
			return errors.New("no message delivered yet on " + subj)
		}
	}
}

// countPayload counts the messages carrying payload that arrive on ch
// within wait (a negative check needs a window); other messages, such as
// late pings of an earlier delivery check, are ignored.
func countPayload(ch <-chan *nats.Msg, payload string, wait time.Duration) int {
	n := 0
	timeout := time.After(wait)
	for {
		select {
		case m := <-ch:
			if string(m.Data) == payload {
				n++
			}
		case <-timeout:
			return n
		}
	}
}

// noGoroutineLeak fails the test if, after cleanup, more goroutines run
// than before the test started.
func noGoroutineLeak(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		testkit.WaitFor(t, 5*time.Second, func() error {
			if n := runtime.NumGoroutine(); n > before {
				return fmt.Errorf("goroutines leaked: %d running, %d before", n, before)
			}
			return nil
		})
	})
}

// portOf returns the port of a host:port address, 0 if it has none.
func portOf(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}
