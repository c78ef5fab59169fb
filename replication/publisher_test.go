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
