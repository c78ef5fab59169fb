package alloc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/internal/base/natsflush"
	"github.com/tally-dev/tally/internal/base/poll"
)

// AuthoritySubjectPrefix: a replica asks the lease authority for a write
// on AuthoritySubjectPrefix + its id as a subject token. NATS permissions
// let only the replica's own user publish there, so the subject names the
// writer.
const AuthoritySubjectPrefix = "tally.alloc."

// AuthoritySubject is the subject replica writes through.
func AuthoritySubject(replica string) string { return AuthoritySubjectPrefix + token(replica) }

// authorityQueue lets several authorities share the requests.
const authorityQueue = "tally-alloc-authority"

// maxWriteBytes bounds a write request (a state is far smaller).
const maxWriteBytes = 256 << 10

// writeRequest is one compare-and-swap a replica asks for: value at key,
// if the key is at revision Rev (0: if it never had a value).
type writeRequest struct {
	Key   string `json:"key"`
	Rev   uint64 `json:"rev"`
	Value []byte `json:"value"`
}

// writeReply is the authority's answer: the new revision, or why not.
type writeReply struct {
	Rev uint64 `json:"rev,omitempty"`
	// Code: "mismatch" (the key moved on), "exists" (a create found a
	// value), "refused" (not a change the writer may make), "failed".
	Code  string `json:"code,omitempty"`
	Error string `json:"error,omitempty"`
}

// Claim describes a milestone claim the authority is asked to write: its
// sequence, its rank and the replica claiming it.
type Claim struct {
	Sequence string
	Rank     uint64
	Replica  string
}

// AuthorityConfig configures an Authority.
type AuthorityConfig struct {
	// NC receives the requests. Required.
	NC *nats.Conn
	// KV is the allocator's bucket, which the authority alone may write.
	// Required.
	KV KV
	// MaxBlock bounds a lease one write may take. Default DefaultMaxBlock.
	MaxBlock uint64
	// Claim decodes a milestone claim's value written at key (a key
	// "ms.<sequence>.<rank>"). Required to allow claims.
	Claim func(key string, value []byte) (Claim, error)
	// Publish announces a claim that was written (the milestone stream),
	// idempotently: it is called again when a claim is asked for twice.
	Publish func(ctx context.Context, key string, value []byte) error
	// OpTimeout bounds one KV request. Default DefaultOpTimeout.
	OpTimeout time.Duration
	Logger    hclog.Logger
}

// Authority is the lease authority: the only writer of the allocator's
// bucket. Replicas send it the compare-and-swap they would have written
// (RemoteKV); it writes it only if it is a change their own state allows:
// CheckTransition for a sequence's state, and for a milestone claim a rank
// in one of the writer's own folded blocks. A replica's forged value is
// refused, never stored, so no other replica ever reads it. The authority
// keeps no state of its own: any number may run (they share the requests),
// every write being a compare-and-swap.
type Authority struct {
	cfg AuthorityConfig
	log hclog.Logger
	sub *nats.Subscription

	busy chan struct{} // one token per request in hand

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// maxInFlight bounds the requests an authority serves at once; beyond it
// a request is answered "failed" and its writer tries again.
const maxInFlight = 64

// NewAuthority checks cfg; Start serves.
func NewAuthority(cfg AuthorityConfig) (*Authority, error) {
	if cfg.NC == nil || cfg.KV == nil {
		return nil, errors.New("alloc: the authority needs NC and KV")
	}
	if cfg.MaxBlock == 0 {
		cfg.MaxBlock = DefaultMaxBlock
	}
	if cfg.OpTimeout == 0 {
		cfg.OpTimeout = DefaultOpTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Authority{cfg: cfg, log: cfg.Logger.Named("authority"), busy: make(chan struct{}, maxInFlight), ctx: ctx, cancel: cancel}, nil
}

// Start subscribes to the requests; each is served on its own goroutine.
func (a *Authority) Start() error {
	sub, err := a.cfg.NC.QueueSubscribe(AuthoritySubjectPrefix+"*", authorityQueue, func(m *nats.Msg) {
		select {
		case a.busy <- struct{}{}:
		default:
			b, _ := json.Marshal(writeReply{Code: "failed", Error: "the lease authority is busy"})
			_ = m.Respond(b)
			return
		}
		a.wg.Add(1)
		go func() {
			defer func() { <-a.busy; a.wg.Done() }()
			rep := a.serve(a.ctx, strings.TrimPrefix(m.Subject, AuthoritySubjectPrefix), m.Data)
			b, _ := json.Marshal(rep)
			_ = m.Respond(b)
		}()
	})
	if err != nil {
		return fmt.Errorf("alloc: authority: subscribe: %w", err)
	}
	a.sub = sub
	return natsflush.Flush(a.cfg.NC)
}

// Close stops serving and waits for the requests in hand.
func (a *Authority) Close() {
	if a.sub != nil {
		_ = a.sub.Unsubscribe()
	}
	a.cancel()
	a.wg.Wait()
}

// serve answers one request of writer (a replica id as a subject token).
func (a *Authority) serve(ctx context.Context, writer string, data []byte) writeReply {
	if len(data) > maxWriteBytes {
		return a.reply(fmt.Errorf("%w: request of %d bytes from %s", ErrRefused, len(data), writer))
	}
	var req writeRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return a.reply(fmt.Errorf("%w: request from %s: %v", ErrRefused, writer, err))
	}
	var err error
	switch {
	case strings.HasPrefix(req.Key, "seq.") && sequenceName.MatchString(strings.TrimPrefix(req.Key, "seq.")):
		err = a.checkState(ctx, writer, req)
	case strings.HasPrefix(req.Key, "ms.") && a.cfg.Claim != nil:
		return a.claim(ctx, writer, req)
	default:
		err = fmt.Errorf("%w: key %q from %s", ErrRefused, req.Key, writer)
	}
	if err != nil {
		return a.reply(err)
	}
	octx, cancel := context.WithTimeout(ctx, a.cfg.OpTimeout)
	rev, err := a.cfg.KV.Update(octx, req.Key, req.Value, req.Rev)
	cancel()
	if err != nil {
		return a.reply(err)
	}
	return writeReply{Rev: rev}
}

// reply is err as an answer.
func (a *Authority) reply(err error) writeReply {
	switch {
	case errors.Is(err, ErrRefused):
		a.log.Warn("refused a write", "error", err)
		return writeReply{Code: "refused", Error: err.Error()}
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		return writeReply{Code: "mismatch", Error: err.Error()}
	case errors.Is(err, jetstream.ErrKeyExists):
		return writeReply{Code: "exists", Error: err.Error()}
	}
	return writeReply{Code: "failed", Error: err.Error()}
}

// checkState checks a sequence state written over revision req.Rev.
func (a *Authority) checkState(ctx context.Context, writer string, req writeRequest) error {
	next, err := DecodeState(req.Value)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRefused, err)
	}
	if req.Rev == 0 { // a sequence nobody has used
		if !bytes.Equal(next.Encode(), NewState().Encode()) {
			return fmt.Errorf("%w: a new sequence must start empty", ErrRefused)
		}
		return nil
	}
	octx, cancel := context.WithTimeout(ctx, a.cfg.OpTimeout)
	e, err := a.cfg.KV.Get(octx, req.Key)
	cancel()
	if err != nil {
		return fmt.Errorf("read %s: %w", req.Key, err)
	}
	if e.Revision() != req.Rev {
		return fmt.Errorf("%s at revision %d, not %d: %w", req.Key, e.Revision(), req.Rev, jetstream.ErrKeyRevisionMismatch)
	}
	prev, err := DecodeState(e.Value())
	if err != nil {
		return fmt.Errorf("read %s: %w", req.Key, err)
	}
	if err := CheckTransition(prev, next, writer, a.cfg.MaxBlock); err != nil {
		return fmt.Errorf("%s by %s: %w", req.Key, writer, err)
	}
	return nil
}

// claim writes a milestone claim if its rank is in one of the writer's
// folded blocks, and publishes it. A claim asked for again finds its own
// value and publishes it again: success, as a first write would be.
func (a *Authority) claim(ctx context.Context, writer string, req writeRequest) writeReply {
	c, err := a.cfg.Claim(req.Key, req.Value)
	if err != nil || req.Rev != 0 || token(c.Replica) != writer {
		return a.reply(fmt.Errorf("%w: claim %s by %s: %v", ErrRefused, req.Key, writer, err))
	}
	if err := a.ownsRank(ctx, writer, c); err != nil {
		return a.reply(err)
	}
	octx, cancel := context.WithTimeout(ctx, a.cfg.OpTimeout)
	rev, err := a.cfg.KV.Update(octx, req.Key, req.Value, 0)
	cancel()
	if errors.Is(err, jetstream.ErrKeyExists) {
		octx, cancel := context.WithTimeout(ctx, a.cfg.OpTimeout)
		e, gerr := a.cfg.KV.Get(octx, req.Key)
		cancel()
		if gerr != nil || !bytes.Equal(e.Value(), req.Value) {
			return a.reply(err) // someone else's claim, or deleted: exists
		}
		rev, err = e.Revision(), nil
	}
	if err != nil {
		return a.reply(err)
	}
	if a.cfg.Publish != nil {
		if err := a.cfg.Publish(ctx, req.Key, req.Value); err != nil {
			return a.reply(fmt.Errorf("publish %s: %w", req.Key, err))
		}
	}
	return writeReply{Rev: rev}
}

// ownsRank checks that c's rank lies in a folded block of writer's not yet
// settled. A leaseholder takes its blocks' ranks and claims them before it
// settles them (node wiring), so an honest claim always finds its block;
// the state is read up to three times, since a read may lag the write
// that folded the block.
func (a *Authority) ownsRank(ctx context.Context, writer string, c Claim) error {
	var err error
	for try := 0; try < 3; try++ {
		if try > 0 && !poll.Sleep(ctx, 300*time.Millisecond) {
			return ctx.Err()
		}
		octx, cancel := context.WithTimeout(ctx, a.cfg.OpTimeout)
		var e jetstream.KeyValueEntry
		e, err = a.cfg.KV.Get(octx, "seq."+c.Sequence)
		cancel()
		if err != nil {
			continue
		}
		var st *State
		if st, err = DecodeState(e.Value()); err != nil {
			return err
		}
		for _, b := range st.Closed {
			if b.Folded && token(b.Leaseholder) == writer && b.Base < c.Rank && c.Rank <= b.Base+(b.Used-b.Start) {
				return nil
			}
		}
		err = fmt.Errorf("%w: rank %d of %s is in no block of %s awaiting its ranks", ErrRefused, c.Rank, c.Sequence, writer)
	}
	return err
}

// RemoteKV is the allocator's bucket for a replica under a lease
// authority: reads go to the bucket, writes to the authority (which the
// replica's NATS user may not bypass).
type RemoteKV struct {
	// NC reaches the authority; Bucket is read directly.
	NC      *nats.Conn
	Bucket  KV
	Replica string
}

// Get reads a key from the bucket.
func (r *RemoteKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	return r.Bucket.Get(ctx, key)
}

// Create asks the authority to write a key that never had a value.
func (r *RemoteKV) Create(ctx context.Context, key string, value []byte, _ ...jetstream.KVCreateOpt) (uint64, error) {
	return r.Update(ctx, key, value, 0)
}

// Update asks the authority to write value at key if the key is at
// revision (0: if it never had a value). Its answers map to the bucket's
// own errors, and a refusal to ErrRefused.
func (r *RemoteKV) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	b, err := json.Marshal(writeRequest{Key: key, Rev: revision, Value: value})
	if err != nil {
		return 0, fmt.Errorf("alloc: write %s: %w", key, err)
	}
	m, err := r.NC.RequestWithContext(ctx, AuthoritySubject(r.Replica), b)
	if err != nil {
		return 0, fmt.Errorf("alloc: write %s through the lease authority: %w", key, err)
	}
	var rep writeReply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return 0, fmt.Errorf("alloc: write %s: the authority's answer: %w", key, err)
	}
	switch rep.Code {
	case "":
		return rep.Rev, nil
	case "mismatch":
		return 0, fmt.Errorf("alloc: write %s: %s: %w", key, rep.Error, jetstream.ErrKeyRevisionMismatch)
	case "exists":
		return 0, fmt.Errorf("alloc: write %s: %s: %w", key, rep.Error, jetstream.ErrKeyExists)
	case "refused":
		return 0, fmt.Errorf("alloc: write %s: %s: %w", key, rep.Error, ErrRefused)
	}
	return 0, fmt.Errorf("alloc: write %s: %s", key, rep.Error)
}
