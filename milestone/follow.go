package milestone

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// FollowConfig configures Follow.
type FollowConfig struct {
	// JS reaches the milestone stream. Required.
	JS jetstream.JetStream
	// Stream is the milestone stream. Default DefaultStream.
	Stream string
	// Durable names the application's consumer. Its position lives in the
	// stream's server: an application that stops and comes back (or runs
	// as several processes sharing the name) goes on after the last
	// milestone it acknowledged. Required.
	Durable string
	// Retry is how long a milestone the handler failed waits before it is
	// delivered again. Default 5s.
	Retry time.Duration
}

// Follow delivers every milestone of the stream, from the first, to
// handle, and acknowledges each once handle returns nil: a milestone is
// handed to an application until it says it acted on it, across restarts
// of the application, of tally and of NATS. A handler error, or a crash
// before the acknowledgement, delivers the milestone again (after Retry),
// so handle must be idempotent: the pair (Sequence, Number) identifies a
// milestone. Follow returns when ctx ends (nil) or the consumer cannot be
// made.
func Follow(ctx context.Context, cfg FollowConfig, handle func(context.Context, Event) error) error {
	if cfg.JS == nil || cfg.Durable == "" {
		return errors.New("milestone: follow needs JetStream and a durable name")
	}
	if cfg.Stream == "" {
		cfg.Stream = DefaultStream
	}
	if cfg.Retry == 0 {
		cfg.Retry = 5 * time.Second
	}
	cons, err := cfg.JS.CreateOrUpdateConsumer(ctx, cfg.Stream, jetstream.ConsumerConfig{
		Durable:       cfg.Durable,
		Description:   "tally milestones, delivered until acknowledged",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.Retry,
		FilterSubject: "tally.milestone.>",
	})
	if err != nil {
		return fmt.Errorf("milestone: follow %s as %s: %w", cfg.Stream, cfg.Durable, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("milestone: follow %s: %w", cfg.Stream, err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	for {
		msg, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("milestone: follow %s: %w", cfg.Stream, err)
		}
		ev, err := DecodeEvent(msg.Data())
		if err != nil {
			_ = msg.Term() // never valid: do not deliver it again
			continue
		}
		if meta, err := msg.Metadata(); err == nil {
			ev.StreamSeq = meta.Sequence.Stream
		}
		if err := handle(ctx, ev); err != nil {
			_ = msg.NakWithDelay(cfg.Retry)
			continue
		}
		if err := msg.DoubleAck(ctx); err != nil && ctx.Err() == nil {
			// The server did not confirm: it delivers the milestone again
			// after AckWait, and handle sees it twice.
			continue
		}
	}
}
