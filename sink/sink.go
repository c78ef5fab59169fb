// Package sink copies the regions' event streams into an analytics store
// (`tallyd events sink`): PostgreSQL, or hourly JSON-lines files for
// object storage. Each region is read by a durable JetStream consumer; a
// batch is acknowledged only once the store has it durably, and the store
// drops an event it already holds, so a crash and the redelivery that
// follows never duplicate one.
//
// An event's identity is its (replica, log, seq), as on the stream: seq
// counts from 1 in a replica's event log and log names that log (random
// per data directory, see storage.Store.LogID). A message republished
// after the stream's duplicate window carries the same identities under
// a new stream sequence, so the stream sequence is not used.
package sink

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-dev/tally/internal/base/poll"
	"github.com/tally-dev/tally/replication"
)

// Event is one event of a region's stream (the JSON of
// replication.EncodeEventJSON) with the line it came in.
type Event struct {
	Seq     uint64    `json:"seq"`
	Log     string    `json:"log"`
	Replica string    `json:"replica"`
	Region  string    `json:"region"`
	Type    string    `json:"type"`
	Kind    string    `json:"kind"`
	Key     string    `json:"key"`
	User    string    `json:"user"`
	Idem    string    `json:"idempotency_key"`
	By      int64     `json:"by"`
	Count   uint64    `json:"count"`
	P       uint64    `json:"p"`
	N       uint64    `json:"n"`
	HLC     string    `json:"hlc"`
	At      time.Time `json:"at"`
	// Line is the event as the stream has it, one JSON object.
	Line []byte `json:"-"`
}

// ParseEvent decodes one line of a stream message. An event without its
// identity (replica, log and seq) cannot be deduplicated and is an error.
func ParseEvent(line []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(line, &e); err != nil {
		return Event{}, fmt.Errorf("event %.80q: %w", line, err)
	}
	if e.Replica == "" || e.Log == "" || e.Seq == 0 || e.At.IsZero() {
		return Event{}, fmt.Errorf("event %.80q: want replica, log, seq and at", line)
	}
	e.Line = line
	return e, nil
}

// Writer is a store the sink writes to.
type Writer interface {
	// Write stores events of region durably, skipping those (by replica,
	// log and seq) it already holds, and says how many it added. An
	// event the store refuses for its content, which no retry would
	// change, it sets aside as a dead letter (Postgres: the table
	// tally_events_dead) and counts. Once it returns nil the events
	// survive a crash, stored or dead-lettered: the sink acknowledges
	// them then. Any other error, and the sink retries the batch. Calls
	// for different regions may run concurrently.
	Write(ctx context.Context, region string, events []Event) (Written, error)
	// Close releases the store.
	Close() error
}

// Written is what a Write did: how many events it added (not counting
// those the store held already), and how many it set aside as dead
// letters.
type Written struct {
	Added, DeadLettered int
}

// Config configures a Sink.
type Config struct {
	// JS reaches the regions' streams (replication.EventsStream).
	// Required.
	JS jetstream.JetStream
	// Regions are the regions whose streams are read, one consumer each.
	// Required.
	Regions []string
	// Writer is where events go. Required; the sink does not close it.
	Writer Writer
	// Durable names each region's consumer (in that region's stream):
	// where the sink stopped is kept under it. Required.
	Durable string
	// Batch is at most how many stream messages (each up to
	// storage.LogChunk events) one write takes. Default 256.
	Batch int
	// Linger is at most how long a batch waits to fill. Default 500ms.
	Linger time.Duration
	// AckWait is how long the stream waits for a batch's acknowledgement
	// before it delivers the batch again (a sink that crashed). Default
	// 30s.
	AckWait time.Duration
	// RetryFor bounds how long a region's writes may keep failing (an
	// error that is not a dead letter: the store down, a full disk, a
	// dropped table): retries back off from 1s to 30s, and once a
	// region's writes have failed for longer than this, Run stops with
	// an error that names the last failure. Nothing is acknowledged that
	// was not written: the events wait in the stream for the next run.
	// Default 10m.
	RetryFor time.Duration
	// Registerer, if set, gets the sink's metrics
	// (tally_sink_dead_letters_total, tally_sink_write_failures_total).
	Registerer prometheus.Registerer
	// Logger gets progress and errors. Default: none.
	Logger hclog.Logger
	// AfterWrite, if set, is called after a batch is written and before
	// it is acknowledged; an error stops Run there, acknowledging nothing,
	// as a crash would. For tests.
	AfterWrite func(region string, events int) error
}

// Stats counts what a Sink did since it started.
type Stats struct {
	// Batches is how many batches were written and acknowledged.
	Batches uint64
	// Events is how many events were read, duplicates included.
	Events uint64
	// Added is how many events the writer added; Duplicates how many it
	// already had (a redelivery).
	Added, Duplicates uint64
	// Malformed is how many lines were not events; they are logged and
	// skipped.
	Malformed uint64
	// DeadLettered is how many events the store refused for their
	// content and set aside (Written.DeadLettered); WriteFailures how
	// many writes failed otherwise and were retried.
	DeadLettered, WriteFailures uint64
}

// Sink copies events from streams to a Writer; see the package comment.
type Sink struct {
	cfg                                         Config
	log                                         hclog.Logger
	batches, events, added, duplicates, badLine atomic.Uint64
	dead, failures                              atomic.Uint64
	deadMetric, failureMetric                   *prometheus.CounterVec
}

// Backoff of a region's failed writes: from retryMin, doubling, to
// retryMax.
const (
	retryMin = time.Second
	retryMax = 30 * time.Second
)

// Validate reports a problem with cfg's names and numbers (not whether
// JS and Writer are set): a command checks its flags with it before it
// connects to anything.
func (cfg Config) Validate() error {
	switch {
	case len(cfg.Regions) == 0:
		return errors.New("sink: want at least one region")
	case cfg.Durable == "" || strings.ContainsAny(cfg.Durable, ".*> \t"):
		return fmt.Errorf("sink: consumer name %q: want a non-empty name without '.', '*', '>' or spaces", cfg.Durable)
	case cfg.Batch < 0 || cfg.Linger < 0 || cfg.AckWait < 0 || cfg.RetryFor < 0:
		return errors.New("sink: batch, linger, ack wait and retry bound must not be negative")
	}
	seen := map[string]bool{}
	for _, r := range cfg.Regions {
		if !validRegion(r) {
			return fmt.Errorf("sink: region %q: want letters, digits, '-' and '_'", r)
		}
		if seen[r] {
			return fmt.Errorf("sink: region %q named twice", r)
		}
		seen[r] = true
	}
	return nil
}

// New checks cfg and fills in its defaults.
func New(cfg Config) (*Sink, error) {
	if cfg.JS == nil || cfg.Writer == nil {
		return nil, errors.New("sink: want JetStream and a writer")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Batch == 0 {
		cfg.Batch = 256
	}
	if cfg.Linger == 0 {
		cfg.Linger = 500 * time.Millisecond
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = 30 * time.Second
	}
	if cfg.RetryFor == 0 {
		cfg.RetryFor = 10 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	s := &Sink{cfg: cfg, log: cfg.Logger.Named("sink"),
		deadMetric: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_sink_dead_letters_total",
			Help: "Events the store refused for their content and set aside as dead letters (tally_events_dead), by region.",
		}, []string{"region"}),
		failureMetric: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_sink_write_failures_total",
			Help: "Writes of a batch that failed for another reason and were retried, by region.",
		}, []string{"region"}),
	}
	for _, r := range cfg.Regions {
		s.deadMetric.WithLabelValues(r)
		s.failureMetric.WithLabelValues(r)
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{s.deadMetric, s.failureMetric} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("sink: register metrics: %w", err)
			}
		}
	}
	return s, nil
}

// validRegion: region names become stream names and directory names.
func validRegion(r string) bool {
	if r == "" {
		return false
	}
	for _, c := range r {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Stats reports what the sink did so far.
func (s *Sink) Stats() Stats {
	return Stats{Batches: s.batches.Load(), Events: s.events.Load(), Added: s.added.Load(),
		Duplicates: s.duplicates.Load(), Malformed: s.badLine.Load(),
		DeadLettered: s.dead.Load(), WriteFailures: s.failures.Load()}
}

// Run copies every region's events until ctx ends (nil) or a region's
// loop stops on an error it cannot retry (AfterWrite's), or on writes
// that kept failing for longer than RetryFor: then the other regions
// stop too and that error is returned. A failed write is logged and
// retried with backoff until then; an unreachable stream is logged and
// retried.
func (s *Sink) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(s.cfg.Regions))
	var wg sync.WaitGroup
	for i, r := range s.cfg.Regions {
		wg.Go(func() {
			if errs[i] = s.region(ctx, r); errs[i] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// consumer opens region's durable consumer, creating it at the start of
// the stream the first time.
func (s *Sink) consumer(ctx context.Context, region string) (jetstream.Consumer, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := s.cfg.JS.Stream(cctx, replication.EventsStream(region))
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", replication.EventsStream(region), err)
	}
	c, err := st.CreateOrUpdateConsumer(cctx, jetstream.ConsumerConfig{
		Durable:       s.cfg.Durable,
		Description:   "tallyd events sink",
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       s.cfg.AckWait,
		MaxAckPending: max(1000, 2*s.cfg.Batch),
	})
	if err != nil {
		return nil, fmt.Errorf("consumer %s of %s: %w", s.cfg.Durable, replication.EventsStream(region), err)
	}
	return c, nil
}

// region is one region's loop: fetch a batch, write it, acknowledge it.
func (s *Sink) region(ctx context.Context, region string) error {
	log := s.log.With("region", region)
	const retry = time.Second
	// failing is when the writes began to fail (zero: the last one
	// succeeded); backoff is the wait before the next try.
	failing, backoff := time.Time{}, retryMin
	var c jetstream.Consumer
	for ctx.Err() == nil {
		if c == nil {
			var err error
			if c, err = s.consumer(ctx, region); err != nil {
				if ctx.Err() == nil {
					log.Warn("cannot read the region's events yet; retrying", "error", err)
				}
				poll.Sleep(ctx, retry)
				continue
			}
			log.Info("reading events", "stream", replication.EventsStream(region), "consumer", s.cfg.Durable)
		}
		batch, err := c.Fetch(s.cfg.Batch, jetstream.FetchMaxWait(s.cfg.Linger))
		if err != nil {
			// Open the consumer again: it may have been deleted.
			log.Warn("fetching events; retrying", "error", err)
			c = nil
			poll.Sleep(ctx, retry)
			continue
		}
		var msgs []jetstream.Msg
		var events []Event
		for m := range batch.Messages() {
			msgs = append(msgs, m)
			for line := range bytes.SplitSeq(bytes.TrimSuffix(m.Data(), []byte("\n")), []byte("\n")) {
				e, err := ParseEvent(line)
				if err != nil {
					s.badLine.Add(1)
					log.Error("skipping a line that is not an event", "error", err)
					continue
				}
				events = append(events, e)
			}
		}
		if err := batch.Error(); err != nil && ctx.Err() == nil {
			log.Warn("fetching events", "error", err) // the messages that came are still written
			if len(msgs) == 0 {
				c = nil // open it again, as above
				poll.Sleep(ctx, retry)
				continue
			}
		}
		if len(msgs) == 0 {
			continue
		}
		written, err := s.cfg.Writer.Write(ctx, region, events)
		if err != nil {
			if ctx.Err() != nil {
				for _, m := range msgs {
					_ = m.Nak() // stopping: the next run gets them at once
				}
				return nil
			}
			s.failures.Add(1)
			s.failureMetric.WithLabelValues(region).Inc()
			if failing.IsZero() {
				failing = time.Now()
			}
			if d := time.Since(failing); d >= s.cfg.RetryFor {
				for _, m := range msgs {
					_ = m.Nak() // the next run gets them at once
				}
				return fmt.Errorf("sink: %s: writes failing for %s (over the bound of %s); last: %w",
					region, d.Round(time.Second), s.cfg.RetryFor, err)
			}
			log.Error("writing events; they come again", "events", len(events), "retry_in", backoff, "error", err)
			for _, m := range msgs {
				_ = m.NakWithDelay(backoff)
			}
			if !poll.Sleep(ctx, backoff) {
				return nil
			}
			backoff = min(2*backoff, retryMax)
			continue
		}
		failing, backoff = time.Time{}, retryMin
		added := written.Added
		s.events.Add(uint64(len(events)))
		s.added.Add(uint64(added))
		s.duplicates.Add(uint64(len(events) - added - written.DeadLettered))
		if written.DeadLettered > 0 {
			s.dead.Add(uint64(written.DeadLettered))
			s.deadMetric.WithLabelValues(region).Add(float64(written.DeadLettered))
			log.Error("the store refused events for their content; set aside as dead letters (docs/sink.md says how to replay them)",
				"dead_letters", written.DeadLettered)
		}
		if s.cfg.AfterWrite != nil {
			if err := s.cfg.AfterWrite(region, len(events)); err != nil {
				return fmt.Errorf("sink: %s: after writing: %w", region, err)
			}
		}
		if err := ack(ctx, msgs); err != nil {
			// Not lost: the stream delivers them again after AckWait,
			// and the writer skips them.
			log.Warn("acknowledging events", "error", err)
			continue
		}
		s.batches.Add(1)
		log.Debug("batch written", "events", len(events), "added", added)
	}
	return nil
}

// ack acknowledges msgs, the last one waiting for the server's answer: a
// connection's acknowledgements are handled in order, so then all are.
func ack(ctx context.Context, msgs []jetstream.Msg) error {
	for _, m := range msgs[:len(msgs)-1] {
		if err := m.Ack(); err != nil {
			return err
		}
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return msgs[len(msgs)-1].DoubleAck(actx)
}
