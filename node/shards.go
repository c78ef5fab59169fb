package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/internal/base/natsflush"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/replication"
	"github.com/tally-dev/tally/route"
	"github.com/tally-dev/tally/shard"
)

// maxForwarded bounds the forwarded requests a replica serves at once;
// more wait in the NATS subscription.
const maxForwarded = 256

// shardRouter is a sharded replica's routing (httpapi.Shards): its
// region's map, and forwarding over NATS request-reply in package route's
// encoding, each request to one chosen holder's own subject.
type shardRouter struct {
	region, self string
	// serving is the region's map in force and the shards this replica
	// serves by it; it changes when a move switches the map (update).
	serving atomic.Pointer[servingMap]
	nc      *nats.Conn
	timeout time.Duration
	log     hclog.Logger

	// url is this replica's advertised URL (advertised), set once it
	// listens.
	url atomic.Pointer[string]
	// moveState is Node.moveState (httpapi.Shards.MoveState).
	moveState func() (synced, released *bool)
	// accepted is closed once the replica accepts writes
	// (region.Replica.Accepted); until then it answers forwarded
	// requests NotServed, so senders go to a holder that is ready. nil:
	// at once.
	accepted <-chan struct{}

	api answerer // gathered reads' answers (question.go); set by serve
	// do runs region operations with this replica's writer (ops.go), and
	// rep answers typed reads (route.Read); both set once the replica is
	// open.
	do  func(ctx context.Context, ops []region.Op) ([]region.Result, error)
	rep *region.Replica
	// stale is the replication's staleness the view reads carry
	// (route.Detail); nil without replication. Set with rep.
	stale *replication.Replicator
	sub   *nats.Subscription // this replica's route.Subject
	// sender picks the holder a forwarded request goes to; transport
	// carries requests to a replica's own subject (natsTransport; the
	// scripts under testdata/shards use one in memory).
	sender    *route.Sender
	transport route.Transport
	// chaosAckUnapplied: the chaos build's bug forwarded-ack-unapplied
	// (failpoint.ForwardAckUnapplied); always false in another build.
	chaosAckUnapplied bool
	sem               chan struct{}
	wg                sync.WaitGroup
	ctx               context.Context
	stop              context.CancelFunc
}

// newShardRouter is the routing of replica self of region, by the map
// own until a move changes it, sending over t (natsTransport on nc in
// production), its suspicions of holders on the clock now (nil:
// time.Now).
func newShardRouter(region, self string, own shard.Map, nc *nats.Conn, t route.Transport, now func() time.Time,
	timeout time.Duration, log hclog.Logger) *shardRouter {
	ctx, stop := context.WithCancel(context.Background())
	sr := &shardRouter{region: region, self: self, nc: nc, timeout: timeout,
		log: log.Named("shards"), sem: make(chan struct{}, maxForwarded), ctx: ctx, stop: stop}
	sr.serving.Store(&servingMap{own: own, held: own.Held(self)})
	sr.transport = t
	sr.sender = route.NewSender(route.SenderConfig{Self: self, Map: sr.Map, Transport: sr.transport, Now: now})
	sr.url.Store(new(string))
	return sr
}

// servingMap is a region's map and what this replica serves by it.
type servingMap struct {
	own  shard.Map
	held shard.Set
}

func (sr *shardRouter) Map() shard.Map { return sr.serving.Load().own }

// MoveState implements httpapi.Shards.
func (sr *shardRouter) MoveState() (synced, released *bool) {
	if sr.moveState == nil {
		return nil, nil
	}
	return sr.moveState()
}
func (sr *shardRouter) URL() string { return *sr.url.Load() }

// advertised is the URL GET /v1/shards gives for this replica: the
// config's advertise_url, else the bound address when it names a host.
func advertised(cfg Config, addr net.Addr) *string {
	u := strings.TrimSuffix(cfg.AdvertiseURL, "/")
	if tcp, ok := addr.(*net.TCPAddr); ok && u == "" && !tcp.IP.IsUnspecified() {
		scheme := "http"
		if cfg.TLSCert != "" {
			scheme = "https"
		}
		u = scheme + "://" + tcp.String()
	}
	return &u
}
func (sr *shardRouter) Holds(s int) bool { return sr.serving.Load().held.Has(s) }

// Passive implements httpapi.Shards: s is a shard this replica left in a
// move and keeps until the map settles.
func (sr *shardRouter) Passive(s int) bool {
	m := sr.serving.Load()
	l := m.own.Leaving(sr.self)
	return l.Has(s)
}

// update serves by m, a new map of the region (a move's switch): the
// writer and the forwarding follow its held shards at once.
func (sr *shardRouter) update(m shard.Map) error {
	sr.serving.Store(&servingMap{own: m, held: m.Held(sr.self)})
	return nil
}

// ready reports whether the replica accepts writes.
func (sr *shardRouter) ready() bool {
	select {
	case <-sr.accepted:
		return true
	default:
		return sr.accepted == nil
	}
}

// serve answers the requests forwarded to this replica: typed operations
// with the replica (ops.go), gathered reads with api (question.go).
func (sr *shardRouter) serve(api answerer) error {
	sr.api = api
	sub, err := sr.nc.Subscribe(route.Subject(sr.region, sr.self), sr.onRequest)
	if err != nil {
		return fmt.Errorf("serve forwarded requests: %w", err)
	}
	sr.sub = sub
	if err := natsflush.Flush(sr.nc); err != nil {
		sr.close()
		return fmt.Errorf("serve forwarded requests: %w", err)
	}
	return nil
}

// close stops taking forwarded requests and waits for those in hand.
func (sr *shardRouter) close() {
	if sr.sub != nil {
		_ = sr.sub.Unsubscribe()
	}
	sr.stop()
	sr.wg.Wait()
}

// onRequest serves one forwarded request on its own goroutine (a NATS
// subscription delivers one message at a time, and a write waits for its
// fsync), at most maxForwarded at once.
func (sr *shardRouter) onRequest(msg *nats.Msg) {
	select {
	case sr.sem <- struct{}{}:
	case <-sr.ctx.Done():
		return
	}
	sr.wg.Add(1)
	go func() {
		defer func() { <-sr.sem; sr.wg.Done() }()
		sr.answer(msg)
	}()
}

// answer serves one forwarded request and answers it, or answers
// NotServed when this replica does not serve its shard now.
func (sr *shardRouter) answer(msg *nats.Msg) {
	a, ok := sr.handle(msg.Data)
	if !ok {
		return // the sender times out
	}
	if err := msg.Respond(a.Marshal()); err != nil {
		sr.log.Warn("answer forwarded request", "error", err)
	}
}

// handle serves one forwarded request, encoded, and returns its answer;
// false: none (a malformed request, or one past its deadline), so the
// sender times out.
func (sr *shardRouter) handle(data []byte) (route.Answer, bool) {
	req, err := route.UnmarshalRequest(data)
	if err != nil {
		sr.log.Warn("refused a malformed forwarded request", "error", err)
		return route.Answer{}, false
	}
	if req.Kind == route.KindBatch {
		return sr.serveBatch(req.Batch), true // batch.go
	}
	return sr.serveOne(req)
}

// deadline is when the holder stops working on req: its sender's
// deadline, bounded by the router's timeout.
func (sr *shardRouter) deadline(req *route.Request) time.Time {
	deadline := time.UnixMilli(req.DeadlineMs)
	if req.DeadlineMs == 0 || deadline.After(time.Now().Add(sr.timeout)) {
		deadline = time.Now().Add(sr.timeout)
	}
	return deadline
}

// serveOne serves one forwarded request, decoded, as handle.
func (sr *shardRouter) serveOne(req route.Request) (route.Answer, bool) {
	deadline := sr.deadline(&req)
	if time.Now().After(deadline) {
		return route.Answer{}, false // answered timeout where it arrived: applying it now would surprise a retry
	}
	var a route.Answer
	if why := sr.notServed(req); why != "" {
		a = route.Answer{Kind: route.NotServed, Reason: why}
	} else if req.Kind == route.KindQuestion {
		a = sr.serveQuestion(req, deadline) // question.go
	} else if sr.chaosAckUnapplied && !reads(req) {
		a = chaosUnapplied(req) // the chaos build's bug forwarded-ack-unapplied
	} else {
		var ok bool
		if a, ok = sr.serveOps(req, deadline); !ok {
			return route.Answer{}, false // maybe applied: the sender's timeout says so
		}
	}
	return a, true
}

// notServed says why this replica does not serve req now ("" if it does):
// a request for a shard it does not hold (a read also where it keeps the
// shard passively), or any before it accepts writes. A gathered read is
// answered from whatever shards it holds.
func (sr *shardRouter) notServed(req route.Request) string {
	if req.Kind == route.KindQuestion {
		return ""
	}
	if !sr.ready() {
		return "not accepting writes yet"
	}
	if req.Shard < 0 || req.Shard >= shard.Count {
		return fmt.Sprintf("no shard %d", req.Shard)
	}
	if !sr.Holds(req.Shard) && !(reads(req) && sr.Passive(req.Shard)) {
		return fmt.Sprintf("shard %d is not held here", req.Shard)
	}
	return ""
}

// chaosUnapplied is what the bug forwarded-ack-unapplied answers
// forwarded writes, having applied none: each applied.
func chaosUnapplied(req route.Request) route.Answer {
	rs := make([]route.Result, len(req.Ops))
	for i := range rs {
		rs[i].Liked, rs[i].Changed = req.Ops[i].Kind == route.OpLike, true
	}
	return route.Answer{Kind: route.Served, Body: route.MarshalResults(rs)}
}

// reads reports whether req is typed reads only (route.OpKind.Read).
func reads(req route.Request) bool {
	if req.Kind != route.KindOps {
		return false
	}
	r, ok := readsOnly(req.Ops)
	return r && ok
}

// natsTransport carries route requests over NATS request-reply, to each
// replica's own subject.
type natsTransport struct {
	nc     *nats.Conn
	region string
}

func (t natsTransport) Request(ctx context.Context, replica string, data []byte) ([]byte, error) {
	msg, err := t.nc.RequestWithContext(ctx, route.Subject(t.region, replica), data)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, route.ErrNoResponders
	case errors.Is(err, nats.ErrTimeout):
		return nil, fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	case err != nil:
		return nil, err
	}
	return msg.Data, nil
}

// respShards is the router as package resp routes: typed writes and
// reads of the RESP front door's commands, parsed and authenticated at
// the entry replica (Apply, Read).
type respShards struct{ sr *shardRouter }

func (rs respShards) Holds(s int) bool { return rs.sr.Holds(s) }

func (rs respShards) Apply(ctx context.Context, s int, ops []region.Op) ([]region.Result, error) {
	res, _, err := rs.sr.Apply(ctx, s, ops, false)
	return res, err
}

func (rs respShards) Read(ctx context.Context, s int, ops []route.Op) ([]route.Result, error) {
	res, _, err := rs.sr.Read(ctx, s, ops)
	return res, err
}
