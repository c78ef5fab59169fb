package replication

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-dev/tally/storage"
)

// The event publisher ships a replica's event log (storage.Event, written
// in the batch of every write) to its region's stream, in order, each
// event once. A message is one chunk of the log (up to storage.LogChunk
// events, as JSON lines: the commits logged since the last round, merged
// into one chunk before it is first sent), and its id,
// <replica>.<log id>.<seq of its first event>, always names the same
// events, so the stream drops a resend within its duplicate window; the
// store records how far the stream has acknowledged the log. A replica cut off from its
// NATS server keeps logging; the publisher catches up from where the
// stream's acknowledgements stopped.

// DefaultPublishBatch is how many messages the publisher has in flight.
const DefaultPublishBatch = 256

// DefaultPublishLinger is PublisherConfig.Linger's default.
const DefaultPublishLinger = 10 * time.Millisecond

// EventsStream is the stream of region's events.
func EventsStream(region string) string { return "TALLY_EVENTS_" + strings.ToUpper(region) }

// EventsSubject is the subject of replica's events in region's stream.
func EventsSubject(region, replica string) string { return "tally.events." + region + "." + replica }

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// JS reaches the region's JetStream. Required.
	JS jetstream.JetStream
	// Store holds the log. Required.
	Store *storage.Store
	// Replica and Region name the events. Required.
	Replica, Region string
	// MaxAge is the stream's retention. Default 7 days.
	MaxAge time.Duration
	// KeepLocal is how long a published event stays in the local log
	// (the audit needs it). Zero keeps every event.
	KeepLocal time.Duration
	// Replicas and Cluster place the stream (Cluster: this region's).
	Replicas int
	Cluster  string
	// Batch is at most how many messages (chunks) are in flight. Default
	// DefaultPublishBatch; JS must allow at least as many async publishes
	// pending (jetstream.WithPublishAsyncMaxPending).
	Batch int
	// Linger is the least time from the start of one publishing round to
	// the start of the next while events keep coming: what is logged
	// meanwhile travels together, as one message of up to LogChunk
	// events, where a round per commit would cost the stream a write and
	// an fsync per commit. It delays an event's arrival on the stream by
	// at most Linger, never a write's acknowledgement (the event is in
	// the local log, durable, before that). Default DefaultPublishLinger;
	// negative: none.
	Linger     time.Duration
	Logger     hclog.Logger
	Registerer prometheus.Registerer
}

// Publisher ships the log; see the top of this file.
type Publisher struct {
	cfg  PublisherConfig
	log  hclog.Logger
	kick chan struct{}
	m    publisherMetrics

	mu        sync.Mutex // protects published and lastErr
	published uint64
	lastErr   error
	// sent is the publisher goroutine's: every chunk that ends at or
	// before it may be on the stream (sent by this process, or by an
	// earlier one that logged it), so it must never change; the chunks
	// after it were never published and may be merged (catchUp).
	sent uint64

	stream jetstream.Stream // the publisher goroutine's only
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type publisherMetrics struct {
	published prometheus.Counter
	lag       prometheus.Histogram
	pending   prometheus.Gauge
	errors    prometheus.Counter
}

// NewPublisher checks cfg and reads where the stream's acknowledgements
// stopped.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if cfg.JS == nil || cfg.Store == nil || cfg.Replica == "" || cfg.Region == "" {
		return nil, errors.New("replication: the event publisher needs JetStream, a store, a replica and a region")
	}
	if cfg.MaxAge == 0 {
		cfg.MaxAge = 7 * 24 * time.Hour
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.Batch == 0 {
		cfg.Batch = DefaultPublishBatch
	}
	if cfg.Linger == 0 {
		cfg.Linger = DefaultPublishLinger
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	published, err := cfg.Store.LogPublished()
	if err != nil {
		return nil, err
	}
	// What an earlier process logged it may also have published.
	p := &Publisher{cfg: cfg, log: cfg.Logger.Named("events"), kick: make(chan struct{}, 1), published: published,
		sent: cfg.Store.LogLast()}
	p.m = publisherMetrics{
		published: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_events_published_total",
			Help: "Events of the log acknowledged by the region's stream."}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tally_event_publish_lag_seconds",
			Help:    "From an event's commit to the stream's acknowledgement of it.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 20)}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tally_events_unpublished",
			Help: "Events of the log the stream has not acknowledged yet."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_event_publish_errors_total",
			Help: "Failed publish rounds (the next round resends from the last acknowledged event)."}),
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(p.m.published, p.m.lag, p.m.pending, p.m.errors)
	}
	return p, nil
}

// Start runs the publisher until Close.
func (p *Publisher) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	p.wg.Add(1)
	go p.run(ctx)
}

// Close stops the publisher. Unpublished events stay in the log for the
// next start.
func (p *Publisher) Close() {
	if p.cancel != nil {
		p.cancel()
		p.wg.Wait()
	}
}

// Kick says the log grew (region.Config.OnCommit). It never blocks.
func (p *Publisher) Kick() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// PublisherStatus is what /v1/status shows of the publisher.
type PublisherStatus struct {
	Stream    string `json:"stream"`
	Published uint64 `json:"published"`
	Logged    uint64 `json:"logged"`
	Error     string `json:"error,omitempty"`
}

// Status reports how far the stream has the log.
func (p *Publisher) Status() PublisherStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := PublisherStatus{Stream: EventsStream(p.cfg.Region), Published: p.published, Logged: p.cfg.Store.LogLast()}
	if p.lastErr != nil {
		st.Error = p.lastErr.Error()
	}
	return st
}

func (p *Publisher) run(ctx context.Context) {
	defer p.wg.Done()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var lastTrim time.Time
	linger := time.NewTimer(0)
	defer linger.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		case <-tick.C:
		}
		linger.Reset(p.cfg.Linger) // a negative Linger fires at once
		if p.stream == nil {
			// Created before the first event, so readers can subscribe.
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, _ = p.ensure(cctx) // on failure, catchUp reports it
			cancel()
		}
		err := p.catchUp(ctx)
		if err == nil {
			// The cursor is committed without an fsync of its own; bound
			// how long a power loss could take it back (a resend, which
			// the stream drops only within its duplicate window).
			err = p.cfg.Store.WaitDurable(max(p.cfg.Linger, 0))
		}
		p.mu.Lock()
		p.lastErr = err
		p.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			p.m.errors.Inc()
			p.log.Warn("publishing events stopped; retrying", "error", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
		if p.cfg.KeepLocal > 0 && time.Since(lastTrim) > time.Minute {
			lastTrim = time.Now()
			if err := p.trim(); err != nil {
				p.log.Warn("trimming the local event log", "error", err)
			}
		}
		// Let the next round's commits gather (Linger).
		select {
		case <-ctx.Done():
			return
		case <-linger.C:
		}
	}
}

// eventJSON is an event on the stream. (replica, log, seq) is its
// identity: seq counts from 1 in each data directory, and log, random per
// data directory (storage.Store.LogID), tells a wiped replica's events
// from its earlier self's.
type eventJSON struct {
	Seq     uint64 `json:"seq"`
	Log     string `json:"log"`
	Replica string `json:"replica"`
	Region  string `json:"region"`
	Type    string `json:"type"`
	Kind    string `json:"kind"`
	Key     string `json:"key"`
	User    string `json:"user,omitempty"`
	Idem    string `json:"idempotency_key,omitempty"`
	By      int64  `json:"by,omitempty"`
	Count   uint64 `json:"count,omitempty"`
	P       uint64 `json:"p,omitempty"`
	N       uint64 `json:"n,omitempty"`
	HLC     string `json:"hlc"`
	At      string `json:"at"`
}

// AppendEventsJSON appends events of the log logID as JSON lines: a
// message body on the stream.
func AppendEventsJSON(dst []byte, region, replica, logID string, events []storage.Event) []byte {
	for i := range events {
		dst = appendEventJSON(dst, region, replica, logID, &events[i])
		dst = append(dst, '\n')
	}
	return dst
}

// EncodeEventJSON is one event of the log logID as JSON.
func EncodeEventJSON(region, replica, logID string, e *storage.Event) []byte {
	return appendEventJSON(nil, region, replica, logID, e)
}

// appendEventJSON appends what json.Marshal makes of the event's
// eventJSON, byte for byte (TestEventJSONIsMarshals), without reflection
// or an allocation per field: the publisher encodes every event it ships.
func appendEventJSON(dst []byte, region, replica, logID string, e *storage.Event) []byte {
	dst = append(dst, `{"seq":`...)
	dst = strconv.AppendUint(dst, e.Seq, 10)
	dst = appendJSONField(dst, `,"log":`, logID)
	dst = appendJSONField(dst, `,"replica":`, replica)
	dst = appendJSONField(dst, `,"region":`, region)
	dst = appendJSONField(dst, `,"type":`, e.Type.String())
	dst = appendJSONField(dst, `,"kind":`, e.Kind.String())
	dst = appendJSONField(dst, `,"key":`, e.Key)
	if e.User != "" {
		dst = appendJSONField(dst, `,"user":`, e.User)
	}
	if e.Idem != "" {
		dst = appendJSONField(dst, `,"idempotency_key":`, e.Idem)
	}
	if e.By != 0 {
		dst = append(dst, `,"by":`...)
		dst = strconv.AppendInt(dst, e.By, 10)
	}
	dst = appendJSONUint(dst, `,"count":`, e.Count)
	dst = appendJSONUint(dst, `,"p":`, e.P)
	dst = appendJSONUint(dst, `,"n":`, e.N)
	dst = append(dst, `,"hlc":"`...)
	dst = strconv.AppendInt(dst, e.HLC.WallMs(), 10)
	dst = append(dst, '.')
	dst = strconv.AppendUint(dst, uint64(e.HLC.Logical()), 10)
	dst = append(dst, `","at":"`...)
	dst = time.UnixMilli(e.HLC.WallMs()).UTC().AppendFormat(dst, "2006-01-02T15:04:05.000Z")
	return append(dst, `"}`...)
}

// appendJSONUint appends name and v unless v is 0 (omitempty).
func appendJSONUint(dst []byte, name string, v uint64) []byte {
	if v == 0 {
		return dst
	}
	return strconv.AppendUint(append(dst, name...), v, 10)
}

// appendJSONField appends name and s as a JSON string, escaped as
// encoding/json escapes it.
func appendJSONField(dst []byte, name, s string) []byte {
	dst = append(dst, name...)
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // rare: ids never need it
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// ensure opens or creates the region's stream.
func (p *Publisher) ensure(ctx context.Context) (jetstream.Stream, error) {
	if p.stream != nil {
		return p.stream, nil
	}
	name := EventsStream(p.cfg.Region)
	sc := jetstream.StreamConfig{
		Name:        name,
		Description: "tally events accepted in region " + p.cfg.Region + ", one subject per replica",
		Subjects:    []string{"tally.events." + p.cfg.Region + ".>"},
		Storage:     jetstream.FileStorage,
		Replicas:    p.cfg.Replicas,
		MaxAge:      p.cfg.MaxAge,
		Duplicates:  10 * time.Minute,
	}
	if p.cfg.Cluster != "" {
		sc.Placement = &jetstream.Placement{Cluster: p.cfg.Cluster}
	}
	// Create only, never update: a replica's NATS user may not reconfigure
	// a stream (docs/architecture.md, "NATS permissions: what a region may
	// do"). A retention changed in the config is applied by an operator.
	s, err := p.cfg.JS.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = p.cfg.JS.CreateStream(ctx, sc)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			s, err = p.cfg.JS.Stream(ctx, name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open stream %s: %w", name, err)
	}
	if got := s.CachedInfo().Config; got.MaxAge != sc.MaxAge || got.Sealed || got.MaxMsgs > 0 || got.MaxBytes > 0 {
		p.log.Warn("the event stream's limits differ from this replica's; an operator must update the stream (a replica may not)",
			"stream", name, "max_age", got.MaxAge, "want_max_age", sc.MaxAge, "sealed", got.Sealed, "max_msgs", got.MaxMsgs, "max_bytes", got.MaxBytes)
	}
	p.stream = s
	return s, nil
}

// catchUp publishes every event logged before it began after the
// acknowledged ones, a batch at a time, and records each batch's
// acknowledgement. What is logged meanwhile waits for the next round
// (Linger): a round that chased it would send a message per merge and
// acknowledgement, a few milliseconds apart under load, each a stream
// write and fsync.
func (p *Publisher) catchUp(ctx context.Context) error {
	subject := EventsSubject(p.cfg.Region, p.cfg.Replica)
	end := p.cfg.Store.LogLast()
	for {
		p.mu.Lock()
		from := p.published
		p.mu.Unlock()
		last := p.cfg.Store.LogLast()
		p.m.pending.Set(float64(last - min(from, last)))
		if from >= end {
			return nil
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if _, err := p.ensure(cctx); err != nil {
			cancel()
			return err
		}
		// One message per commit would cost the stream a write (and, as
		// the shipped servers run, an fsync) per commit: join the commits
		// logged since the last round into chunks of up to LogChunk
		// events first, so a busy writer's hundreds of commits a second
		// travel as a few messages. Only chunks never sent are merged.
		if p.sent < last {
			merged, err := p.cfg.Store.MergeLogChunks(p.sent)
			if err != nil {
				cancel()
				return err
			}
			p.sent = max(p.sent, merged)
			// The merge is committed without an fsync of its own, so as
			// not to put one in front of the writer's commits; it must be
			// durable before its chunks are sent (see MergeLogChunks).
			// Under load the writer's next fsync, a few milliseconds
			// away, covers it.
			if err := p.cfg.Store.WaitDurable(max(p.cfg.Linger, 0)); err != nil {
				cancel()
				return err
			}
		}
		// Only chunks logged before the round began (end): the writer
		// commits while the merge waits for its fsync, and each of those
		// commits' chunks would go out as a message of its own (a stream
		// write and fsync each) rather than merged in the next round.
		var chunks [][]storage.Event
		if err := p.cfg.Store.ScanChunks(from, func(events []storage.Event) bool {
			if events[0].Seq > end {
				return false
			}
			chunks = append(chunks, events)
			return len(chunks) < p.cfg.Batch
		}); err != nil {
			cancel()
			return err
		}
		if len(chunks) == 0 {
			cancel()
			return nil
		}
		// A chunk logged after the merge goes out as it is, and is fixed
		// from now on.
		p.sent = max(p.sent, chunks[len(chunks)-1][len(chunks[len(chunks)-1])-1].Seq)
		futures := make([]jetstream.PubAckFuture, 0, len(chunks))
		var perr error
		for _, events := range chunks {
			id := fmt.Sprintf("%s.%s.%d", p.cfg.Replica, p.cfg.Store.LogID(), events[0].Seq)
			// A body of its own per message: nats.go keeps it until the
			// acknowledgement, to send again under the same id if the
			// stream's server answers "no responders".
			body := AppendEventsJSON(make([]byte, 0, 256*len(events)), p.cfg.Region, p.cfg.Replica, p.cfg.Store.LogID(), events)
			f, err := p.cfg.JS.PublishAsync(subject, body, jetstream.WithMsgID(id))
			if err != nil {
				perr = fmt.Errorf("publish events from %d: %w", events[0].Seq, err)
				break
			}
			futures = append(futures, f)
		}
		acked := from
		for i, f := range futures {
			events := chunks[i]
			select {
			case <-f.Ok():
				acked = events[len(events)-1].Seq
				lag := max(time.Since(time.UnixMilli(events[len(events)-1].HLC.WallMs())).Seconds(), 0)
				for range events {
					p.m.lag.Observe(lag)
				}
			case err := <-f.Err():
				perr = errors.Join(perr, fmt.Errorf("publish events from %d: %w", events[0].Seq, err))
			case <-cctx.Done():
				perr = errors.Join(perr, fmt.Errorf("publish events from %d: %w", events[0].Seq, cctx.Err()))
			}
			if perr != nil {
				break
			}
		}
		cancel()
		if acked > from {
			if err := p.cfg.Store.SetLogPublished(acked, 0); err != nil {
				return err
			}
			p.m.published.Add(float64(acked - from))
			p.mu.Lock()
			p.published = acked
			p.mu.Unlock()
		}
		if perr != nil {
			p.stream = nil // reopen: the stream may have gone with its server
			return perr
		}
	}
}

// trim deletes the published chunks whose events are all older than
// KeepLocal.
func (p *Publisher) trim() error {
	p.mu.Lock()
	published := p.published
	p.mu.Unlock()
	cutoff := time.Now().Add(-p.cfg.KeepLocal).UnixMilli()
	var keep uint64 // first seq of the first chunk kept
	if err := p.cfg.Store.ScanChunks(0, func(events []storage.Event) bool {
		last := events[len(events)-1]
		if last.Seq > published || last.HLC.WallMs() >= cutoff {
			return false
		}
		keep = last.Seq + 1
		return true
	}); err != nil {
		return err
	}
	if keep == 0 {
		return nil
	}
	return p.cfg.Store.SetLogPublished(published, keep)
}

// TailConfig configures TailEvents.
type TailConfig struct {
	JS     jetstream.JetStream
	Region string
	// Durable names the consumer: where it left off is kept under it, and
	// an event is delivered again until handled. Empty: an ephemeral
	// consumer from the start of the stream.
	Durable string
	// Limit stops after this many events (0: never).
	Limit int
}

// TailEvents delivers region's events (one JSON line each), in stream
// order, to fn until ctx ends or Limit events were handled. A message is
// acknowledged once fn took all its events; one fn failed on, or one cut
// short by Limit, is not, and comes again whole.
func TailEvents(ctx context.Context, cfg TailConfig, fn func(data []byte) error) error {
	s, err := cfg.JS.Stream(ctx, EventsStream(cfg.Region))
	if err != nil {
		return fmt.Errorf("events of %s: %w", cfg.Region, err)
	}
	cc := jetstream.ConsumerConfig{Durable: cfg.Durable, AckPolicy: jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy, AckWait: 30 * time.Second}
	if cfg.Durable == "" {
		cc.InactiveThreshold = time.Minute
	}
	c, err := s.CreateOrUpdateConsumer(ctx, cc)
	if err != nil {
		return fmt.Errorf("events of %s: consumer: %w", cfg.Region, err)
	}
	it, err := c.Messages()
	if err != nil {
		return fmt.Errorf("events of %s: %w", cfg.Region, err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	n := 0
	for cfg.Limit == 0 || n < cfg.Limit {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("events of %s: %w", cfg.Region, err)
		}
		lines := bytes.Split(bytes.TrimSuffix(m.Data(), []byte("\n")), []byte("\n"))
		done := true
		for _, line := range lines {
			if cfg.Limit > 0 && n == cfg.Limit {
				done = false
				break
			}
			if err := fn(line); err != nil {
				done = false
				break
			}
			n++
		}
		if !done {
			_ = m.Nak()
			continue
		}
		if err := m.Ack(); err != nil {
			return fmt.Errorf("events of %s: ack: %w", cfg.Region, err)
		}
	}
	return nil
}
