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

	"github.com/tally-dev/tally/internal/testkit"
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
		if _, err := rep.Like(ctx, "post", fmt.Sprintf("u%d", i)); err != nil {
			t.Fatal(err)
		}
		if _, err := rep.Incr(ctx, "views", 2, fmt.Sprintf("k%d", i)); err != nil {
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
	if _, err := rep.Unlike(ctx, "post", "u0"); err != nil {
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
	rep, err := region.New(region.Config{Region: "us", Replica: "us-1", Store: st, EventLog: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	ctx := context.Background()
	like := func(from, to int) {
		for i := from; i < to; i++ { // one commit each
			if _, err := rep.Like(ctx, "post", fmt.Sprintf("u%d", i)); err != nil {
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
