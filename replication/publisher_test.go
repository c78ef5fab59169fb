package replication

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

// startJetStream runs an embedded nats-server with JetStream, fsyncing
// every write as the shipped configs do.
func startJetStream(t *testing.T) *server.Server {
	return startNATSWith(t, func(o *server.Options) {
		o.JetStream, o.StoreDir, o.SyncAlways = true, t.TempDir(), true
	})
}

// streamEvents reads every message of the region's stream.
// loggingReplica starts a JetStream server and replica us-1 of region us
// with its event log on, and returns a JetStream client of the server,
// the replica's store and the replica; all stop with the test.
func loggingReplica(t *testing.T) (jetstream.JetStream, *storage.Store, *region.Replica) {
	t.Helper()
	ns := startJetStream(t)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := storage.Open(storage.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	rep, err := region.New(region.Config{Region: "us", Replica: "us-1", Store: st, EventLog: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rep.Close() })
	return js, st, rep
}

func streamEvents(t *testing.T, js jetstream.JetStream, region string) []eventJSON {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, EventsStream(region))
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []eventJSON
	for range info.State.Msgs {
		m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range bytes.Split(bytes.TrimSpace(m.Data()), []byte("\n")) {
			var e eventJSON
			if err := json.Unmarshal(line, &e); err != nil {
				t.Fatal(err)
			}
			out = append(out, e)
		}
	}
	return out
}

// Every acknowledged write reaches the stream once, in order, also when the
// publisher starts over from an older cursor (a crash before it recorded
// the stream's acknowledgement): a message is a chunk of the log, its id
// names the chunk's events, and the resend is a no-op.
func TestPublisherShipsTheLogOnce(t *testing.T) {
	ns := startJetStream(t)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := storage.Open(storage.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var pub *Publisher
	rep, err := region.New(region.Config{Region: "us", Replica: "us-1", Store: st, EventLog: true,
		OnCommit: func(region.Changes) {
			if pub != nil {
				pub.Kick()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	pub, err = NewPublisher(PublisherConfig{JS: js, Store: st, Replica: "us-1", Region: "us", Batch: 7})
	if err != nil {
		t.Fatal(err)
	}
	pub.Start()
	ctx := context.Background()
	for i := range 30 {
		if _, err := rep.Likes().Like(ctx, "post", fmt.Sprintf("u%d", i)); err != nil {
			t.Fatal(err)
		}
		if _, err := rep.Counters().Incr(ctx, "views", 2, fmt.Sprintf("k%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		if st := pub.Status(); st.Published != 60 || st.Error != "" {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	pub.Close()
	// Start over from 20 (each write was its own commit, so its own
	// chunk): events 21..60 are sent again.
	if err := st.SetLogPublished(20, 0); err != nil {
		t.Fatal(err)
	}
	pub, err = NewPublisher(PublisherConfig{JS: js, Store: st, Replica: "us-1", Region: "us"})
	if err != nil {
		t.Fatal(err)
	}
	pub.Start()
	defer pub.Close()
	if _, err := rep.Likes().Unlike(ctx, "post", "u0"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		if st := pub.Status(); st.Published != 61 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	evs := streamEvents(t, js, "us")
	if len(evs) != 61 {
		t.Fatalf("the stream holds %d events, want 61 (each once)", len(evs))
	}
	for i, e := range evs {
		if e.Seq != uint64(i+1) || e.Replica != "us-1" || e.Region != "us" {
			t.Fatalf("event %d: %+v", i, e)
		}
	}
	if e := evs[1]; e.Type != "incr" || e.Key != "views" || e.Idem != "k0" || e.By != 2 || e.P != 2 {
		t.Fatalf("second event: %+v", e)
	}
	if e := evs[60]; e.Type != "unlike" || e.User != "u0" || e.N != 1 {
		t.Fatalf("last event: %+v", e)
	}
}

// The commits logged between two publishing rounds travel as one message
// (their chunks merged first), every event still once and in order; a
// publisher that starts over from an older cursor never merges what its
// predecessor may have sent, so the resend under the old ids is dropped
// whole and the new commits follow.
func TestPublisherMergesCommitsIntoOneMessage(t *testing.T) {
	js, st, rep := loggingReplica(t)
	ctx := context.Background()
	like := func(from, to int) {
		for i := from; i < to; i++ { // one commit each
			if _, err := rep.Likes().Like(ctx, "post", fmt.Sprintf("u%d", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	messages := func() uint64 {
		s, err := js.Stream(ctx, EventsStream("us"))
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	// Not started: the test runs its rounds by hand.
	pub, err := NewPublisher(PublisherConfig{JS: js, Store: st, Replica: "us-1", Region: "us"})
	if err != nil {
		t.Fatal(err)
	}
	like(0, 20)
	if err := pub.catchUp(ctx); err != nil {
		t.Fatal(err)
	}
	like(20, 25)
	if err := pub.catchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if got := messages(); got != 2 {
		t.Fatalf("two rounds of 20 and 5 commits made %d messages, want 2", got)
	}
	// A restart from cursor 0 after more commits: the new publisher must
	// not merge 1..30 (the first two messages' chunks may be on the
	// stream), so it resends them as they are, and 26..30 after them.
	like(25, 30)
	if err := st.SetLogPublished(0, 0); err != nil {
		t.Fatal(err)
	}
	pub, err = NewPublisher(PublisherConfig{JS: js, Store: st, Replica: "us-1", Region: "us"})
	if err != nil {
		t.Fatal(err)
	}
	like(30, 40)
	if err := pub.catchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if st := pub.Status(); st.Published != 40 || st.Error != "" {
		t.Fatalf("status %+v", st)
	}
	evs := streamEvents(t, js, "us")
	if len(evs) != 40 {
		t.Fatalf("the stream holds %d events, want 40 (each once)", len(evs))
	}
	for i, e := range evs {
		if e.Seq != uint64(i+1) || e.User != fmt.Sprintf("u%d", i) {
			t.Fatalf("event %d: %+v", i, e)
		}
	}
	// 20 and 5 from the first rounds, five single commits (26..30, logged
	// before the restart, sent as they were), the ten after it as one.
	if got := messages(); got != 2+5+1 {
		t.Fatalf("the stream holds %d messages, want 8", got)
	}
}

// duringPublish runs fn before the first message a publisher sends.
type duringPublish struct {
	jetstream.JetStream
	fn func()
}

func (d *duringPublish) PublishAsync(subject string, data []byte, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	if d.fn != nil {
		d.fn()
		d.fn = nil
	}
	return d.JetStream.PublishAsync(subject, data, opts...)
}

// A round publishes what was logged before it began: what the writer
// logs meanwhile waits for the next round (Linger), rather than going
// out as one more message, one more stream write and fsync, as soon as
// the round's acknowledgement is in.
func TestPublisherRoundLeavesLaterCommitsToTheNext(t *testing.T) {
	js, st, rep := loggingReplica(t)
	ctx := context.Background()
	like := func(from, to int) {
		for i := from; i < to; i++ { // one commit each
			if _, err := rep.Likes().Like(ctx, "post", fmt.Sprintf("u%d", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	hook := &duringPublish{JetStream: js}
	pub, err := NewPublisher(PublisherConfig{JS: hook, Store: st, Replica: "us-1", Region: "us"}) // rounds by hand
	if err != nil {
		t.Fatal(err)
	}
	like(0, 5)
	hook.fn = func() { like(5, 10) }
	if err := pub.catchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if got := pub.Status().Published; got != 5 {
		t.Fatalf("a round begun after 5 events published up to %d", got)
	}
	if err := pub.catchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if got := pub.Status().Published; got != 10 {
		t.Fatalf("the next round published up to %d, want 10", got)
	}
	if evs := streamEvents(t, js, "us"); len(evs) != 10 {
		t.Fatalf("the stream holds %d events, want 10", len(evs))
	}
}

// A round sends one message while the writer keeps committing: the
// commits logged while the round's merge waits for the writer's fsync
// (each a chunk of its own) wait for the next round's merge, rather than
// going out one message, one stream write and fsync, each.
func TestPublisherRoundSendsOneMessageWhileTheWriterCommits(t *testing.T) {
	js, st, rep := loggingReplica(t)
	ctx := context.Background()
	pub, err := NewPublisher(PublisherConfig{JS: js, Store: st, Replica: "us-1", Region: "us", Linger: time.Second}) // rounds by hand
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	liked := make(chan error, 1)
	go func() { // one commit per like, each logging a chunk of its own
		for i := 0; ; i++ {
			select {
			case <-stop:
				liked <- nil
				return
			default:
			}
			if _, err := rep.Likes().Like(ctx, "post", fmt.Sprintf("u%d", i)); err != nil {
				liked <- err
				return
			}
		}
	}()
	msgs := func() uint64 {
		s, err := js.Stream(ctx, EventsStream("us"))
		if err != nil {
			return 0 // not created before the first round
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	rounds := 0
	for rounds < 5 {
		if st.LogLast() <= pub.Status().Published+1 {
			time.Sleep(time.Millisecond) // let several commits gather
			continue
		}
		before := msgs()
		if err := pub.catchUp(ctx); err != nil {
			t.Fatal(err)
		}
		if got := msgs() - before; got != 1 {
			t.Fatalf("round %d sent %d messages while the writer committed, want 1", rounds+1, got)
		}
		rounds++
	}
	close(stop)
	if err := <-liked; err != nil {
		t.Fatal(err)
	}
}

// keepPublished records each message body a publisher hands to
// PublishAsync, and a copy of it as it was then.
type keepPublished struct {
	jetstream.JetStream
	handed, copies [][]byte
}

func (k *keepPublished) PublishAsync(subject string, data []byte, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	k.handed = append(k.handed, data)
	k.copies = append(k.copies, bytes.Clone(data))
	return k.JetStream.PublishAsync(subject, data, opts...)
}

// A body handed to PublishAsync stays as it was: nats.go keeps it to send
// again, under the same message id, when the stream's server answers "no
// responders" (a leader change, a restart), so a body the publisher
// reused for its next chunk would be stored in that chunk's place, and
// the events it held lost from the stream.
func TestPublisherKeepsEachBodyUntilAcknowledged(t *testing.T) {
	js, st, rep := loggingReplica(t)
	ctx := context.Background()
	// More events than one chunk holds, so that one round sends several
	// messages of about the same size.
	n := 3*storage.LogChunk + 7
	ops := make([]region.Op, n)
	for i := range ops {
		ops[i] = region.Op{Kind: region.OpLike, Item: "post", User: fmt.Sprintf("user%06d", i)}
	}
	if _, err := rep.Do(ctx, ops); err != nil {
		t.Fatal(err)
	}
	keep := &keepPublished{JetStream: js}
	pub, err := NewPublisher(PublisherConfig{JS: keep, Store: st, Replica: "us-1", Region: "us"}) // rounds by hand
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.catchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if len(keep.handed) < 3 {
		t.Fatalf("the round sent %d messages, want several", len(keep.handed))
	}
	for i := range keep.handed {
		if !bytes.Equal(keep.handed[i], keep.copies[i]) {
			t.Errorf("message %d of %d changed after it was handed to PublishAsync", i+1, len(keep.handed))
		}
	}
	if evs := streamEvents(t, js, "us"); len(evs) != n {
		t.Fatalf("the stream holds %d events, want %d", len(evs), n)
	}
}

// The publisher's own JSON encoding of an event is json.Marshal's of
// eventJSON, byte for byte, for every type and kind, empty and set
// optional fields, and strings that JSON must escape.
func TestEventJSONIsMarshals(t *testing.T) {
	marshal := func(region, replica, logID string, e *storage.Event) []byte {
		b, err := json.Marshal(eventJSON{Seq: e.Seq, Log: logID, Replica: replica, Region: region, Type: e.Type.String(), Kind: e.Kind.String(),
			Key: e.Key, User: e.User, Idem: e.Idem, By: e.By, Count: e.Count, P: e.P, N: e.N, HLC: e.HLC.String(),
			At: time.UnixMilli(e.HLC.WallMs()).UTC().Format("2006-01-02T15:04:05.000Z")})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	events := []storage.Event{
		{Seq: 1, Type: storage.EventLike, Kind: storage.Likes, Key: "post1", User: "alice", P: 1, Count: 1, HLC: crdt.MakeHLC(1_700_000_000_123, 3)},
		{Seq: 1 << 60, Type: storage.EventUnlike, Kind: storage.Likes, Key: "post1#2", User: "a.b:c@d-e_f", N: 1, Count: 1, HLC: 7},
		{Seq: 3, Type: storage.EventIncr, Kind: storage.Counters, Key: "views", By: -1 << 40, N: 1 << 40, Count: 1, Idem: "req-1", HLC: crdt.MakeHLC(1, 65535)},
		{Seq: 4, Type: storage.EventIncr, Kind: storage.Counters, Key: "views", By: 6_000, P: 6_000, Count: 1000, HLC: 9},
		{Seq: 5, Type: storage.EventSpend, Kind: storage.Budgets, Key: "b", User: "us-2", N: 5, HLC: crdt.MakeHLC(1_800_000_000_000, 0)},
		{Seq: 6, Type: storage.EventLike, Kind: storage.Likes, Key: `<a href="x">&'\`, User: "é\u2028\x01\x7f", Idem: "\xff", P: 1},
		{},
	}
	var lines []byte
	for _, region := range []string{"us", `r"<&>`} {
		for i := range events {
			e := &events[i]
			want := marshal(region, "us-1", "0123456789abcdef", e)
			if got := EncodeEventJSON(region, "us-1", "0123456789abcdef", e); !bytes.Equal(got, want) {
				t.Errorf("event %d in %q:\n got %s\nwant %s", i, region, got, want)
			}
			lines = append(append(lines, want...), '\n')
		}
		if got := AppendEventsJSON(nil, region, "us-1", "0123456789abcdef", events); !bytes.Equal(got, lines) {
			t.Errorf("AppendEventsJSON in %q:\n got %s\nwant %s", region, got, lines)
		}
		lines = lines[:0]
	}
}
