package replication

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
)

// Transport is what replication needs from a message bus. NATS is the
// production one; MemNetwork's is an in-memory one for tests, and
// FaultyTransport wraps any of them to drop, duplicate or delay messages.
type Transport interface {
	// Publish sends data on subject, at most once. It must not block for long.
	Publish(subject string, data []byte) error
	// Subscribe calls h for every message on subject (wildcards allowed),
	// one message at a time, with the subject it was published on.
	Subscribe(subject string, h func(subject string, data []byte)) (unsubscribe func() error, err error)
	// Request sends data to whoever answers subject and waits for the reply.
	Request(ctx context.Context, subject string, data []byte) ([]byte, error)
	// Respond answers requests on subject with h's reply.
	Respond(subject string, h func(data []byte) []byte) (unsubscribe func() error, err error)
}

// NATS is a Transport over a NATS connection.
type NATS struct {
	nc *nats.Conn
}

// NewNATS wraps an open connection.
func NewNATS(nc *nats.Conn) *NATS { return &NATS{nc: nc} }

// Conn is the underlying connection.
func (t *NATS) Conn() *nats.Conn { return t.nc }

// Publish implements Transport.
func (t *NATS) Publish(subject string, data []byte) error {
	if err := t.nc.Publish(subject, data); err != nil {
		return fmt.Errorf("publish %s: %w", subject, err)
	}
	return nil
}

// Subscribe implements Transport.
func (t *NATS) Subscribe(subject string, h func(string, []byte)) (func() error, error) {
	sub, err := t.nc.Subscribe(subject, func(m *nats.Msg) { h(m.Subject, m.Data) })
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", subject, err)
	}
	// Deltas are repaired by anti-entropy if dropped, so a bounded backlog is
	// better than unbounded memory when the merger falls behind.
	_ = sub.SetPendingLimits(65536, 256<<20)
	return sub.Unsubscribe, nil
}

// Request implements Transport.
func (t *NATS) Request(ctx context.Context, subject string, data []byte) ([]byte, error) {
	m, err := t.nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		return nil, fmt.Errorf("request %s: %w", subject, err)
	}
	return m.Data, nil
}

// Respond implements Transport.
func (t *NATS) Respond(subject string, h func([]byte) []byte) (func() error, error) {
	sub, err := t.nc.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond(h(m.Data)) })
	if err != nil {
		return nil, fmt.Errorf("respond on %s: %w", subject, err)
	}
	return sub.Unsubscribe, nil
}

// DialConfig configures a NATS connection for replication.
type DialConfig struct {
	// URL of the region's NATS server(s), comma-separated. Required unless
	// Options supplies a way to connect (e.g. nats.InProcessServer).
	URL string
	// Name identifies the connection in NATS monitoring, e.g. "tally us-1".
	Name string
	// PingInterval: how often the client pings the server; a dead link is
	// noticed after about PingInterval × 2. Default 2s (the NATS default of
	// two minutes would leave a cut-off replica unaware for minutes).
	PingInterval time.Duration
	// Options are extra nats.Options (credentials, TLS, in-process server).
	Options []nats.Option
	// Logger receives connection events.
	Logger hclog.Logger
}

// InboxPrefix is the prefix of replica's reply subjects (nats.CustomInboxPrefix):
// its NATS user may subscribe to its own replies only, never to the shared
// _INBOX.> where other clients' replies pass.
func InboxPrefix(replica string) string { return "_INBOX_" + token(replica) }

// Dial connects to NATS with settings suited to replication: fast dead-link
// detection, endless reconnects, and a reconnect buffer so publishes never
// block while the link is down.
func Dial(cfg DialConfig) (*nats.Conn, error) {
	if cfg.PingInterval == 0 {
		cfg.PingInterval = 2 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.PingInterval(cfg.PingInterval),
		nats.MaxPingsOutstanding(2),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectBufSize(8 << 20),
		nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn("nats disconnected", "error", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "url", nc.ConnectedUrl())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			log.Warn("nats async error", "subject", subj, "error", err)
		}),
	}
	opts = append(opts, cfg.Options...)
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to nats %s: %w", cfg.URL, err)
	}
	return nc, nil
}
