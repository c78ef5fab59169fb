package milestone

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// stuckJS is JetStream out of reach: Stream waits until its context ends.
type stuckJS struct {
	jetstream.JetStream
	entered chan struct{}
}

func (s *stuckJS) Stream(ctx context.Context, _ string) (jetstream.Stream, error) {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestEventsDoNotWaitForTheStream: serving the milestones a region has
// must not wait on JetStream (found by the chaos suite: the feed's lock
// was held across the stream lookup).
func TestEventsDoNotWaitForTheStream(t *testing.T) {
	js := &stuckJS{entered: make(chan struct{}, 1)}
	f, err := NewFeed(FeedConfig{JS: js})
	if err != nil {
		t.Fatal(err)
	}
	f.Start()
	defer f.Close()
	<-js.entered // the feed is now inside the stuck lookup
	done := make(chan []Event)
	go func() {
		_, _ = f.Synced()
		done <- f.Events()
	}()
	select {
	case evs := <-done:
		if len(evs) != 0 {
			t.Fatalf("events %v from nowhere", evs)
		}
	case <-time.After(30 * time.Second): // a deadlock guard, not a speed check
		t.Fatal("Events waited for the stream lookup")
	}
}

// FuzzDecodeClaim: a claim the lease authority accepts names the key it is
// written at, and its replica and rank are the event's.
func FuzzDecodeClaim(f *testing.F) {
	f.Add("ms.likes.1000", encodeEvent(Event{Sequence: "likes", Number: 1000, Item: "p", User: "u", Region: "us", Replica: "us-1"}))
	f.Add("ms.likes.1000000", encodeEvent(Event{Sequence: "likes", Number: 1000, Item: "p", Replica: "us-1"}))
	f.Add("seq.likes", []byte(`{}`))
	f.Fuzz(func(t *testing.T, key string, b []byte) {
		c, err := DecodeClaim(key, b)
		if err != nil {
			return
		}
		e, err := DecodeEvent(b)
		if err != nil || key != kvKey(c.Sequence, c.Rank) || c.Replica != e.Replica || c.Rank != e.Number {
			t.Fatalf("claim %+v at %s of %s: %v", c, key, b, err)
		}
	})
}
