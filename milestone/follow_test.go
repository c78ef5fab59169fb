package milestone

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/internal/localnet"
)

// An application following the milestones with a durable consumer gets
// each one until it acknowledges it: a failed handling is delivered
// again, and after a restart it goes on after the last one it acted on.
func TestFollowDeliversUntilAcknowledged(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := localnet.DefaultConfig()
	cfg.Regions, cfg.Dir = []string{"us"}, t.TempDir()
	c, err := localnet.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	nc, err := nats.Connect(c.ClientURL("us"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	feed, err := NewFeed(FeedConfig{JS: js})
	if err != nil {
		t.Fatal(err)
	}
	ev := func(n uint64) Event {
		return Event{Sequence: "likes", Number: n, Item: "post", User: fmt.Sprintf("u%d", n), Region: "us", Replica: "us-1", Time: time.Now().UTC()}
	}
	for _, n := range []uint64{10, 100, 1000} {
		if err := feed.publish(ctx, ev(n)); err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	seen := map[uint64]int{}
	failed := false
	follow := func(fctx context.Context) chan error {
		done := make(chan error, 1)
		go func() {
			done <- Follow(fctx, FollowConfig{JS: js, Durable: "app", Retry: 200 * time.Millisecond}, func(_ context.Context, e Event) error {
				mu.Lock()
				defer mu.Unlock()
				seen[e.Number]++
				if e.Number == 100 && !failed {
					failed = true
					return errors.New("the application's webhook is down")
				}
				return nil
			})
		}()
		return done
	}
	count := func(n uint64) int {
		mu.Lock()
		defer mu.Unlock()
		return seen[n]
	}
	// snapshot is what the handler has seen so far, for messages: the
	// handler goroutine writes seen concurrently.
	snapshot := func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprint(seen)
	}
	fctx, stop := context.WithCancel(ctx)
	done := follow(fctx)
	testkit.WaitFor(t, 20*time.Second, func() error {
		if count(10) != 1 || count(100) != 2 || count(1000) != 1 {
			return fmt.Errorf("seen %s, want 10 and 1000 once, 100 twice (it failed once)", snapshot())
		}
		return nil
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// A milestone fired while the application was away, then it restarts.
	if err := feed.publish(ctx, ev(10000)); err != nil {
		t.Fatal(err)
	}
	fctx, stop = context.WithCancel(ctx)
	defer stop()
	done = follow(fctx)
	testkit.WaitFor(t, 20*time.Second, func() error {
		if count(10000) != 1 {
			return fmt.Errorf("seen %s, want 10000 after the restart", snapshot())
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond) // longer than Retry: a redelivery would show
	if count(10) != 1 || count(100) != 2 || count(1000) != 1 || count(10000) != 1 {
		t.Fatalf("seen %s: an acknowledged milestone came again", snapshot())
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
