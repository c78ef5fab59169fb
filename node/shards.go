package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/tidwall/redcon"

	"github.com/tally-dev/tally/httpapi"
	"github.com/tally-dev/tally/replication"
	"github.com/tally-dev/tally/shard"
)

// routePrefix is the subject prefix of a region's forwarded requests:
// tally.route.<region>.<shard>. Each holder of a shard subscribes to its
// subject in one queue group, so NATS gives each forwarded request to one
// holder, spreads them over the holders and skips one that is gone.
const routePrefix = "tally.route."

// RouteSubjects is the subject pattern of region's forwarded requests,
// for NATS permissions: its replicas publish and subscribe there.
func RouteSubjects(region string) string { return routePrefix + token(region) + ".>" }

// replicaSubject is where one replica takes requests gathered from every
// replica of its region (httpapi.Shards Gather): not a queue group.
func replicaSubject(region, replica string) string {
	return routePrefix + token(region) + ".replica." + token(replica)
}

func routeSubject(region string, s int) string {
	return routePrefix + token(region) + "." + strconv.Itoa(s)
}

// token makes an id safe as one NATS subject token, as replication's
// subjects do.
func token(id string) string { return replication.SubjectToken(id) }

// Headers of a forwarded request and its answer, beside the HTTP headers
// they carry.
const (
	hdrMethod = "Tally-Method"
	hdrURI    = "Tally-Uri"
	hdrRemote = "Tally-Remote"
	hdrStatus = "Tally-Status"
	// The sender's deadline, unix ms: a holder that picks the request up
	// later drops it, since the sender has answered timeout by then.
	hdrDeadline = "Tally-Deadline"
	// A forwarded RESP command: its data is the command as a RESP array,
	// its answer the reply as RESP.
	hdrProto = "Tally-Proto"
	hdrToken = "Tally-Token"
	hdrRESP  = "Tally-Resp"
)

// maxForwarded bounds the forwarded requests a holder serves at once; more
// wait in the NATS subscription.
const maxForwarded = 256

// shardRouter is a sharded replica's routing (httpapi.Shards): its
// region's map, and forwarding over NATS request-reply.
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
	// (region.Replica.Accepted); until then the replica takes no
	// forwarded requests (follow), nil: at once.
	accepted <-chan struct{}

	api http.Handler // set by serve
	// resp runs a forwarded RESP command; set by serve, nil without a
	// RESP listener.
	resp      func(args [][]byte, token string, proto int) []byte
	subMu     sync.Mutex                 // guards shardSubs and subsDone
	shardSubs map[int]*nats.Subscription // the queue groups of the shards served
	subsDone  bool                       // closed: subscribe to nothing more
	subs      []*nats.Subscription       // the replica's own subject
	sem       chan struct{}
	wg        sync.WaitGroup
	ctx       context.Context
	stop      context.CancelFunc
}

func newShardRouter(region, self string, own shard.Map, nc *nats.Conn, timeout time.Duration, log hclog.Logger) *shardRouter {
	ctx, stop := context.WithCancel(context.Background())
	sr := &shardRouter{region: region, self: self, nc: nc, timeout: timeout,
		log: log.Named("shards"), sem: make(chan struct{}, maxForwarded), ctx: ctx, stop: stop, shardSubs: map[int]*nats.Subscription{}}
	sr.serving.Store(&servingMap{own: own, held: own.Held(self)})
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
	return sr.follow()
}

// follow subscribes to the queue group of every shard served and leaves
// those of the others. A replica that does not accept writes yet (it
// recovers after a restart or a wipe) joins none: NATS gives the region's
// forwarded requests to the holders that are ready, instead of to one
// that would answer every write not_ready and read a state still short
// of its own entries.
func (sr *shardRouter) follow() error {
	sr.subMu.Lock()
	defer sr.subMu.Unlock()
	if sr.subsDone || sr.api == nil || !sr.ready() {
		return nil
	}
	held := sr.serving.Load().held
	for s := range shard.Count {
		sub, on := sr.shardSubs[s]
		switch serve := s != shard.Global && held.Has(s); { // no key routes to Global: its names are not ids
		case serve && !on:
			sub, err := sr.nc.QueueSubscribe(routeSubject(sr.region, s), "holders", sr.onRequest)
			if err != nil {
				return fmt.Errorf("serve forwarded requests of shard %d: %w", s, err)
			}
			sr.shardSubs[s] = sub
		case !serve && on:
			_ = sub.Unsubscribe()
			delete(sr.shardSubs, s)
		}
	}
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

// serve answers the requests forwarded for every shard this replica
// holds with api, once it accepts writes.
func (sr *shardRouter) serve(api http.Handler, resp func(args [][]byte, token string, proto int) []byte) error {
	sr.subMu.Lock()
	sr.api, sr.resp = api, resp
	sr.subMu.Unlock()
	if err := sr.follow(); err != nil {
		sr.close()
		return err
	}
	if !sr.ready() {
		sr.wg.Add(1)
		go func() {
			defer sr.wg.Done()
			select {
			case <-sr.accepted:
				if err := sr.follow(); err != nil {
					sr.log.Error("cannot take forwarded requests", "error", err)
				}
			case <-sr.ctx.Done():
			}
		}()
	}
	sub, err := sr.nc.Subscribe(replicaSubject(sr.region, sr.self), sr.onRequest)
	if err != nil {
		sr.close()
		return fmt.Errorf("serve gathered requests: %w", err)
	}
	sr.subs = append(sr.subs, sub)
	if err := sr.nc.Flush(); err != nil {
		sr.close()
		return fmt.Errorf("serve forwarded requests: %w", err)
	}
	return nil
}

// close stops taking forwarded requests and waits for those in hand.
func (sr *shardRouter) close() {
	sr.subMu.Lock()
	sr.subsDone = true
	for _, sub := range sr.shardSubs {
		_ = sub.Unsubscribe()
	}
	clear(sr.shardSubs)
	sr.subMu.Unlock()
	for _, sub := range sr.subs {
		_ = sub.Unsubscribe()
	}
	sr.subs = nil
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

func (sr *shardRouter) answer(msg *nats.Msg) {
	if late(msg) {
		return // answered timeout where it arrived: applying it now would surprise a retry
	}
	if msg.Header.Get(hdrProto) == "resp" {
		sr.answerRESP(msg)
		return
	}
	ctx := httpapi.WithForwarded(sr.ctx)
	if msg.Subject == replicaSubject(sr.region, sr.self) {
		ctx = httpapi.WithGathered(sr.ctx)
	}
	// The sender's deadline bounds the request here too: the writer does
	// not apply ops whose deadline has passed (region.Replica.Do).
	deadline := time.Now().Add(sr.timeout)
	if d, ok := msgDeadline(msg); ok && d.Before(deadline) {
		deadline = d
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	h := http.Header(msg.Header)
	req, err := http.NewRequestWithContext(ctx, h.Get(hdrMethod), h.Get(hdrURI), bytes.NewReader(msg.Data))
	if err != nil {
		sr.log.Warn("bad forwarded request", "error", err)
		return // the sender times out and answers 503
	}
	req.RemoteAddr = h.Get(hdrRemote)
	for _, k := range []string{hdrMethod, hdrURI, hdrRemote} {
		h.Del(k)
	}
	req.Header = h
	rec := httpapi.NewRecorder()
	sr.api.ServeHTTP(rec, req)
	out := nats.NewMsg(msg.Reply)
	out.Header = nats.Header(rec.Header())
	out.Header.Set(hdrStatus, strconv.Itoa(rec.Status()))
	out.Data = rec.Body()
	if err := msg.RespondMsg(out); err != nil {
		sr.log.Warn("answer forwarded request", "error", err)
	}
}

// Forward sends r to a holder of shard s and writes its answer.
func (sr *shardRouter) Forward(w http.ResponseWriter, r *http.Request, body []byte, s int) error {
	ctx, cancel := context.WithTimeout(r.Context(), sr.timeout)
	defer cancel()
	msg := sr.requestMsg(ctx, routeSubject(sr.region, s), r, body)
	resp, err := sr.nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return httpapi.ErrNoHolder
		}
		return err
	}
	status, err := strconv.Atoi(resp.Header.Get(hdrStatus))
	if err != nil || status < 100 || status > 999 {
		return fmt.Errorf("holder answered without a status")
	}
	resp.Header.Del(hdrStatus)
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(status)
	_, _ = w.Write(resp.Data)
	return nil
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
	var (
		mu  sync.Mutex
		out []httpapi.Gathered
		wg  sync.WaitGroup
	)
	for _, replica := range sr.Map().Replicas() {
		if replica == sr.self {
			continue
		}
		msg := sr.requestMsg(ctx, replicaSubject(sr.region, replica), r, body)
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := sr.nc.RequestMsgWithContext(ctx, msg)
			if err != nil {
				return // left out: the read says partial
			}
			status, err := strconv.Atoi(resp.Header.Get(hdrStatus))
			if err != nil {
				return
			}
			mu.Lock()
			out = append(out, httpapi.Gathered{Replica: replica, Status: status, Body: resp.Data})
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// requestMsg is r, with body, as a NATS request on subject, sent under
// ctx: its deadline (the client's, when it said one, else the request
// timeout) goes along.
func (sr *shardRouter) requestMsg(ctx context.Context, subject string, r *http.Request, body []byte) *nats.Msg {
	msg := nats.NewMsg(subject)
	for k, v := range r.Header {
		msg.Header[k] = v
	}
	msg.Header.Set(hdrMethod, r.Method)
	msg.Header.Set(hdrURI, r.URL.RequestURI())
	msg.Header.Set(hdrRemote, r.RemoteAddr)
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(sr.timeout)
	}
	msg.Header.Set(hdrDeadline, strconv.FormatInt(deadline.UnixMilli(), 10))
	msg.Data = body
	return msg
}

// msgDeadline is a forwarded request's deadline, if it has one.
func msgDeadline(msg *nats.Msg) (time.Time, bool) {
	d, err := strconv.ParseInt(msg.Header.Get(hdrDeadline), 10, 64)
	return time.UnixMilli(d), err == nil
}

// late reports whether a forwarded request's sender has given up on it.
func late(msg *nats.Msg) bool {
	d, ok := msgDeadline(msg)
	return ok && time.Now().After(d)
}

// answerRESP runs a forwarded RESP command and answers its reply.
func (sr *shardRouter) answerRESP(msg *nats.Msg) {
	var reply []byte
	complete, args, _, _, err := redcon.ReadNextCommand(msg.Data, nil)
	proto, _ := strconv.Atoi(msg.Header.Get(hdrRESP))
	switch {
	case err != nil || !complete || len(args) == 0:
		reply = redcon.AppendError(nil, "ERR malformed forwarded command (code bad_request)")
	case sr.resp == nil:
		reply = redcon.AppendError(nil, "ERR this shard's holder serves no RESP (code shard_unavailable)")
	default:
		reply = sr.resp(args, msg.Header.Get(hdrToken), proto)
	}
	if err := msg.Respond(reply); err != nil {
		sr.log.Warn("answer forwarded command", "error", err)
	}
}

// respShards is the router as package resp routes: a command forwarded
// as a RESP array, its reply as RESP.
type respShards struct{ sr *shardRouter }

func (rs respShards) Holds(s int) bool { return rs.sr.Holds(s) }

func (rs respShards) Forward(ctx context.Context, s int, args [][]byte, token string, proto int) ([]byte, error) {
	msg := nats.NewMsg(routeSubject(rs.sr.region, s))
	msg.Header.Set(hdrProto, "resp")
	msg.Header.Set(hdrRESP, strconv.Itoa(proto))
	msg.Header.Set(hdrDeadline, strconv.FormatInt(time.Now().Add(rs.sr.timeout).UnixMilli(), 10))
	if token != "" {
		msg.Header.Set(hdrToken, token)
	}
	b := redcon.AppendArray(nil, len(args))
	for _, a := range args {
		b = redcon.AppendBulk(b, a)
	}
	msg.Data = b
	ctx, cancel := context.WithTimeout(ctx, rs.sr.timeout)
	defer cancel()
	resp, err := rs.sr.nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, httpapi.ErrNoHolder
		}
		return nil, err
	}
	if len(resp.Data) == 0 {
		return nil, fmt.Errorf("holder answered nothing")
	}
	return resp.Data, nil
}
