package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/httpapi"
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

	api http.Handler // set by serve
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

// serve answers the requests forwarded to this replica: HTTP with api,
// typed operations with the replica (ops.go).
func (sr *shardRouter) serve(api http.Handler) error {
	sr.api = api
	sub, err := sr.nc.Subscribe(route.Subject(sr.region, sr.self), sr.onRequest)
	if err != nil {
		return fmt.Errorf("serve forwarded requests: %w", err)
	}
	sr.sub = sub
	if err := sr.nc.Flush(); err != nil {
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
	deadline := time.UnixMilli(req.DeadlineMs)
	if req.DeadlineMs == 0 || deadline.After(time.Now().Add(sr.timeout)) {
		deadline = time.Now().Add(sr.timeout)
	}
	if time.Now().After(deadline) {
		return route.Answer{}, false // answered timeout where it arrived: applying it now would surprise a retry
	}
	var a route.Answer
	if why := sr.notServed(req); why != "" {
		a = route.Answer{Kind: route.NotServed, Reason: why}
	} else if req.Kind == route.KindQuestion {
		a = sr.serveQuestion(req, deadline) // question.go
	} else if sr.chaosAckUnapplied && req.Kind != route.KindGather && req.Method != http.MethodGet && !reads(req) {
		a = chaosUnapplied(req) // the chaos build's bug forwarded-ack-unapplied
	} else if req.Kind == route.KindOps {
		var ok bool
		if a, ok = sr.serveOps(req, deadline); !ok {
			return route.Answer{}, false // maybe applied: the sender's timeout says so
		}
	} else {
		a = sr.serveHTTP(req, deadline)
	}
	return a, true
}

// notServed says why this replica does not serve req now ("" if it does):
// a request for a shard it does not hold (a read also where it keeps the
// shard passively), or any before it accepts writes. A gathered read is
// answered from whatever shards it holds.
func (sr *shardRouter) notServed(req route.Request) string {
	if req.Kind == route.KindGather || req.Kind == route.KindQuestion {
		return ""
	}
	if !sr.ready() {
		return "not accepting writes yet"
	}
	if req.Shard < 0 || req.Shard >= shard.Count {
		return fmt.Sprintf("no shard %d", req.Shard)
	}
	read := req.Kind == route.KindHTTP && req.Method == http.MethodGet || reads(req)
	if !sr.Holds(req.Shard) && !(read && sr.Passive(req.Shard)) {
		return fmt.Sprintf("shard %d is not held here", req.Shard)
	}
	return ""
}

// serveHTTP runs a forwarded HTTP request through the API, marked
// forwarded (or gathered) in its context: no client can set those marks.
func (sr *shardRouter) serveHTTP(req route.Request, deadline time.Time) route.Answer {
	ctx := httpapi.WithForwarded(sr.ctx)
	if req.Kind == route.KindGather {
		ctx = httpapi.WithGathered(sr.ctx)
	}
	// The sender's deadline bounds the request here too: the writer does
	// not apply ops whose deadline has passed (region.Replica.Do).
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	r, err := http.NewRequestWithContext(ctx, req.Method, req.URI, bytes.NewReader(req.Body))
	if err != nil {
		return route.Answer{Kind: route.Served, Status: http.StatusBadRequest}
	}
	r.RemoteAddr = req.Remote
	if req.ContentType != "" {
		r.Header.Set("Content-Type", req.ContentType)
	}
	if req.IdempotencyKey != "" {
		r.Header.Set("Idempotency-Key", req.IdempotencyKey)
	}
	rec := httpapi.NewRecorder()
	sr.api.ServeHTTP(rec, r)
	a := route.Answer{Kind: route.Served, Status: rec.Status(), Body: rec.Body()}
	for k, vs := range rec.Header() {
		for _, v := range vs {
			if len(a.Header) < route.MaxHeader {
				a.Header = append(a.Header, [2]string{k, v})
			}
		}
	}
	return a
}

// chaosUnapplied is what the bug forwarded-ack-unapplied answers a
// forwarded write, having applied nothing: served.
func chaosUnapplied(req route.Request) route.Answer {
	if req.Kind == route.KindOps {
		rs := make([]route.Result, len(req.Ops))
		for i := range rs {
			rs[i].Liked, rs[i].Changed = req.Ops[i].Kind == route.OpLike, true
		}
		return route.Answer{Kind: route.Served, Body: route.MarshalResults(rs)}
	}
	return route.Answer{Kind: route.Served, Status: http.StatusOK,
		Header: [][2]string{{"Content-Type", "application/json"}}, Body: []byte(`{"ok":true,"liked":true,"changed":true}`)}
}

// reads reports whether req is typed reads only (route.OpKind.Read).
func reads(req route.Request) bool {
	if req.Kind != route.KindOps {
		return false
	}
	r, ok := readsOnly(req.Ops)
	return r && ok
}

// send forwards req to a holder of its shard that serves it
// (route.Sender), bounded by the request timeout.
func (sr *shardRouter) send(ctx context.Context, req route.Request) (route.Answer, error) {
	ctx, cancel := context.WithTimeout(ctx, sr.timeout)
	defer cancel()
	a, _, err := sr.sender.Send(ctx, req)
	return a, err
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

// Forward sends r to a holder of shard s and writes its answer.
func (sr *shardRouter) Forward(w http.ResponseWriter, r *http.Request, body []byte, s int) error {
	a, err := sr.send(r.Context(), httpRequest(route.KindHTTP, s, r, body))
	if err != nil {
		return err
	}
	theirs := http.Header{}
	for _, h := range a.Header {
		theirs.Add(h[0], h[1])
	}
	for k, v := range theirs {
		w.Header()[k] = v // the holder's word on what it answered
	}
	w.WriteHeader(a.Status)
	_, _ = w.Write(a.Body)
	return nil
}

// httpRequest is what of r, with body, goes to another replica: its
// method, URI and the two headers the API reads besides the token (the
// client's deadline goes as the request's). The token stays here: the
// entry replica checked it.
func httpRequest(kind route.Kind, s int, r *http.Request, body []byte) route.Request {
	return route.Request{Kind: kind, Shard: s, Remote: r.RemoteAddr,
		Method: r.Method, URI: r.URL.RequestURI(), ContentType: r.Header.Get("Content-Type"),
		IdempotencyKey: r.Header.Get("Idempotency-Key"), Body: body}
}

// gatherTimeout bounds how long a gathered read waits for the region's
// other replicas: a replica that does not answer by then is left out,
// and the read says partial.
const gatherTimeout = 2 * time.Second

// Gather sends r to every other replica of the region at once and
// returns the answers that came within gatherTimeout.
func (sr *shardRouter) Gather(r *http.Request, body []byte) []httpapi.Gathered {
	ctx, cancel := context.WithTimeout(r.Context(), min(sr.timeout, gatherTimeout))
	defer cancel()
	deadline, _ := ctx.Deadline()
	req := httpRequest(route.KindGather, -1, r, body)
	req.From, req.DeadlineMs = sr.self, deadline.UnixMilli()
	data := req.Marshal()
	var (
		mu  sync.Mutex
		out []httpapi.Gathered
		wg  sync.WaitGroup
	)
	for _, replica := range sr.Map().Replicas() {
		if replica == sr.self {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := sr.sender.Ask(ctx, replica, data)
			if err != nil {
				sr.log.Debug("gathered read left a replica out", "replica", replica, "uri", req.URI, "error", err)
				return // left out: the read says partial
			}
			mu.Lock()
			out = append(out, httpapi.Gathered{Replica: replica, Status: a.Status, Body: a.Body})
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
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
