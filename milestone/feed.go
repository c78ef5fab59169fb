package milestone

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/alloc"
)

// DefaultStream is the milestone stream's name.
const DefaultStream = "TALLY_MILESTONES"

// FeedConfig configures a Feed.
type FeedConfig struct {
	// JS is this replica's JetStream context. Required.
	JS jetstream.JetStream
	// Stream names the milestone stream. Default DefaultStream.
	Stream string
	// Replicas and Cluster place the stream, as the allocator's bucket.
	Replicas int
	Cluster  string
	// ByAuthority: the lease authority publishes the milestones this
	// replica wins (alloc.Authority), and the replica's NATS user may not;
	// publishing only checks that the stream holds the event.
	ByAuthority bool
	// Poll is how often the feed looks for new milestones besides when a
	// publication wakes it. Default 2s.
	Poll   time.Duration
	Logger hclog.Logger
}

// Feed is a replica's view of the milestone stream: it publishes the
// milestones this replica wins and reads every region's, so each region
// serves all of them (GET /v1/milestones), from memory while the stream is
// out of reach.
//
// The stream keeps one message per subject, tally.milestone.<seq>.<n>,
// and refuses a second one (DiscardNewPerSubject): whatever retries
// publish, each milestone is stored once.
type Feed struct {
	cfg FeedConfig
	log hclog.Logger

	smu    sync.Mutex // protects stream; held across JetStream calls
	stream jetstream.Stream

	mu      sync.Mutex       // protects the fields below; never held across I/O
	events  map[string]Event // by subject
	synced  bool             // read to the end of the stream at least once
	lastErr error

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewFeed builds a feed; Start reads the stream.
func NewFeed(cfg FeedConfig) (*Feed, error) {
	if cfg.JS == nil {
		return nil, errors.New("milestone: feed needs JetStream")
	}
	if cfg.Stream == "" {
		cfg.Stream = DefaultStream
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.Poll == 0 {
		cfg.Poll = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Feed{cfg: cfg, log: cfg.Logger.Named("milestones"), events: make(map[string]Event)}, nil
}

// ensure opens or creates the stream. It may wait on JetStream, so it
// holds smu, never mu: serving the events must not wait for the stream.
func (f *Feed) ensure(ctx context.Context) (jetstream.Stream, error) {
	f.smu.Lock()
	defer f.smu.Unlock()
	if f.stream != nil {
		return f.stream, nil
	}
	s, err := f.cfg.JS.Stream(ctx, f.cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		sc := jetstream.StreamConfig{
			Name:                 f.cfg.Stream,
			Description:          "tally milestones: one message per sequence number",
			Subjects:             []string{subjectAll},
			Storage:              jetstream.FileStorage,
			Replicas:             f.cfg.Replicas,
			MaxMsgsPerSubject:    1,
			Discard:              jetstream.DiscardNew,
			DiscardNewPerSubject: true,
			Duplicates:           10 * time.Minute,
		}
		if f.cfg.Cluster != "" {
			sc.Placement = &jetstream.Placement{Cluster: f.cfg.Cluster}
		}
		s, err = f.cfg.JS.CreateStream(ctx, sc)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			s, err = f.cfg.JS.Stream(ctx, f.cfg.Stream)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open stream %s: %w", f.cfg.Stream, err)
	}
	f.stream = s
	return s, nil
}

// publish stores ev once. A refusal because the subject already holds a
// message is success: an earlier attempt got there.
func (f *Feed) publish(ctx context.Context, ev Event) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := f.ensure(ctx)
	if err != nil {
		return err
	}
	subj := subject(ev.Sequence, ev.Number)
	if f.cfg.ByAuthority {
		if _, err := s.GetLastMsgForSubject(ctx, subj); err != nil {
			return fmt.Errorf("milestone %s not in the stream yet: %w", subj, err)
		}
		return nil
	}
	_, err = f.cfg.JS.Publish(ctx, subj, encodeEvent(ev), jetstream.WithMsgID(subj))
	if err == nil {
		return nil
	}
	if _, gerr := s.GetLastMsgForSubject(ctx, subj); gerr == nil {
		return nil
	}
	return fmt.Errorf("publish milestone %s: %w", subj, err)
}

// Start reads the stream from the beginning, and follows it, until Close.
func (f *Feed) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	f.wg.Add(1)
	go f.run(ctx)
}

// Close stops reading.
func (f *Feed) Close() {
	if f.cancel != nil {
		f.cancel()
		f.wg.Wait()
	}
}

func (f *Feed) run(ctx context.Context) {
	defer f.wg.Done()
	for ctx.Err() == nil {
		err := f.follow(ctx)
		if ctx.Err() != nil {
			return
		}
		f.mu.Lock()
		f.lastErr = err
		f.mu.Unlock()
		f.log.Debug("milestone stream unavailable; retrying", "error", err)
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// follow reads the stream by sequence until ctx ends or a read fails: at
// once, then whenever a milestone is published (a plain subscription
// wakes it) and every Poll. It needs no consumer on the stream, so a
// replica's NATS user may create, read or delete none (an application's
// durable consumer is out of its reach).
func (f *Feed) follow(ctx context.Context) error {
	octx, cancel := context.WithTimeout(ctx, 5*time.Second)
	s, err := f.ensure(octx)
	cancel()
	if err != nil {
		return err
	}
	wake := make(chan struct{}, 1)
	if nc := f.cfg.JS.Conn(); nc != nil {
		sub, err := nc.Subscribe(subjectAll, func(*nats.Msg) {
			select {
			case wake <- struct{}{}:
			default:
			}
		})
		if err != nil {
			return fmt.Errorf("watch %s: %w", subjectAll, err)
		}
		defer func() { _ = sub.Unsubscribe() }()
	}
	t := time.NewTicker(f.cfg.Poll)
	defer t.Stop()
	// A wake-up may come before the stream has stored the message: look
	// again shortly, a few times, before leaving it to the next Poll.
	again := time.NewTimer(0)
	defer again.Stop()
	<-again.C
	retries := 0
	for {
		n, err := f.readNew(ctx, s)
		if err != nil {
			return err
		}
		if n > 0 {
			retries = 0
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
			retries = 5
		case <-t.C:
		case <-again.C:
		}
		if retries > 0 {
			retries--
			again.Reset(50 * time.Millisecond)
		}
	}
}

// subjectAll matches every milestone's subject.
const subjectAll = "tally.milestone.>"

// readNew reads every message after the last one read, up to the end of
// the stream, with the stream's message get (the next message on
// tally.milestone.> from a sequence on).
func (f *Feed) readNew(ctx context.Context, s jetstream.Stream) (n int, err error) {
	var last uint64
	f.mu.Lock()
	for _, e := range f.events {
		last = max(last, e.StreamSeq)
	}
	f.mu.Unlock()
	for {
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		msg, err := s.GetMsg(octx, last+1, jetstream.WithGetMsgSubject(subjectAll))
		cancel()
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			f.setSynced(nil)
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("read %s after %d: %w", f.cfg.Stream, last, err)
		}
		last = msg.Sequence
		n++
		ev, err := DecodeEvent(msg.Data)
		if err != nil {
			f.log.Warn("skipping a bad milestone message", "subject", msg.Subject, "error", err)
			continue
		}
		ev.StreamSeq = msg.Sequence
		f.mu.Lock()
		f.events[msg.Subject] = ev
		f.mu.Unlock()
	}
}

func (f *Feed) setSynced(err error) {
	f.mu.Lock()
	f.synced, f.lastErr = true, err
	f.mu.Unlock()
}

// Events returns every milestone seen, by sequence then number.
func (f *Feed) Events() []Event {
	f.mu.Lock()
	out := make([]Event, 0, len(f.events))
	for _, e := range f.events {
		out = append(out, e)
	}
	f.mu.Unlock()
	slices.SortFunc(out, func(a, b Event) int {
		if a.Sequence != b.Sequence {
			if a.Sequence < b.Sequence {
				return -1
			}
			return 1
		}
		switch {
		case a.Number < b.Number:
			return -1
		case a.Number > b.Number:
			return 1
		}
		return 0
	})
	return out
}

// Synced reports whether the feed has read the whole stream at least once,
// and the last error reading it, if the last attempt failed.
func (f *Feed) Synced() (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.synced, f.lastErr
}

// PublishClaim publishes the milestone a claim's value holds, once: the
// lease authority's alloc.AuthorityConfig.Publish.
func (f *Feed) PublishClaim(ctx context.Context, _ string, value []byte) error {
	ev, err := DecodeEvent(value)
	if err != nil {
		return err
	}
	return f.publish(ctx, ev)
}

// DecodeClaim reads a milestone claim written at key: the lease
// authority's alloc.AuthorityConfig.Claim. The key must name the claim's
// own sequence and number.
func DecodeClaim(key string, value []byte) (alloc.Claim, error) {
	ev, err := DecodeEvent(value)
	if err != nil {
		return alloc.Claim{}, err
	}
	if key != kvKey(ev.Sequence, ev.Number) || ev.StreamSeq != 0 {
		return alloc.Claim{}, fmt.Errorf("milestone: claim of %s %d at key %s", ev.Sequence, ev.Number, key)
	}
	return alloc.Claim{Sequence: ev.Sequence, Rank: ev.Number, Replica: ev.Replica}, nil
}
