package localnet

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// jetStreamWait bounds the JetStream checks: a fresh three-region
// cluster's meta group and placement settle in seconds when the machine
// is idle, and took more than 20 s in a CI run sharing two cores with the
// race-enabled suite ("create stream in us: context deadline exceeded").
// A bound, not a measure: the test asserts no speed.
const jetStreamWait = time.Minute

func newJS(t *testing.T, c *Cluster, region string) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(connect(t, c, region))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// createStream creates a stream, again while JetStream answers that it is
// "temporarily unavailable" (503): with the meta group current, a new
// cluster's placement can still be settling, as clients see in
// production, where the replicas retry too. If a create that answered 503
// took effect, the stream it made is returned.
func createStream(t *testing.T, ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) (jetstream.Stream, error) {
	t.Helper()
	var s jetstream.Stream
	var err error
	testkit.WaitFor(t, jetStreamWait, func() error {
		s, err = js.CreateStream(ctx, sc)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			s, err = js.Stream(ctx, sc.Name)
		}
		var api *jetstream.APIError
		if errors.As(err, &api) && api.Code == 503 {
			return err
		}
		return nil
	})
	return s, err
}

// testJetStream checks the two cross-region uses tally makes of
// JetStream: (a) a stream of events per region, placed in that region and
// consumed durably by the other regions (by a durable consumer and by a
// sourcing stream), also across a cut and heal; (b) one KV bucket placed in
// one region used as a linearizable store from every region.
func testJetStream(t *testing.T, c *Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), jetStreamWait)
	defer cancel()
	// A cut may have moved the meta leadership; wait until it settled.
	if err := c.WaitJetStream(ctx); err != nil {
		t.Fatal(err)
	}
	jsUS, jsEU, jsAP := newJS(t, c, "us"), newJS(t, c, "eu"), newJS(t, c, "ap")

	// (a) Events of us, stored in us.
	events, err := createStream(t, ctx, jsUS, jetstream.StreamConfig{
		Name:      "EVENTS_us",
		Subjects:  []string{"events.us.>"},
		Placement: &jetstream.Placement{Cluster: "us"},
	})
	if err != nil {
		t.Fatalf("create stream in us: %v", err)
	}
	if got := events.CachedInfo().Cluster; got == nil || got.Name != "us" || got.Leader != "us" {
		t.Fatalf("stream placed in %+v, want us", got)
	}
	// eu consumes it durably: a durable consumer created from eu (it lives
	// with the stream, in us) ...
	cons, err := jsEU.CreateOrUpdateConsumer(ctx, "EVENTS_us", jetstream.ConsumerConfig{
		Durable:   "eu",
		AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatalf("create consumer from eu: %v", err)
	}
	// ... and a stream in eu sourcing it.
	copyEU, err := createStream(t, ctx, jsEU, jetstream.StreamConfig{
		Name:      "EVENTS_us_at_eu",
		Sources:   []*jetstream.StreamSource{{Name: "EVENTS_us"}},
		Placement: &jetstream.Placement{Cluster: "eu"},
	})
	if err != nil {
		t.Fatalf("create sourcing stream in eu: %v", err)
	}
	if got := copyEU.CachedInfo().Cluster; got == nil || got.Name != "eu" {
		t.Fatalf("sourcing stream placed in %+v, want eu", got)
	}

	publish := func(from int, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			if _, err := jsUS.Publish(ctx, "events.us.e", fmt.Appendf(nil, "e%d", i)); err != nil {
				t.Fatalf("publish e%d in us: %v", i, err)
			}
		}
	}
	var got []string
	consume := func(want int) {
		t.Helper()
		testkit.WaitFor(t, 10*time.Second, func() error {
			batch, err := cons.FetchNoWait(want - len(got))
			if err != nil {
				return err
			}
			for m := range batch.Messages() {
				got = append(got, string(m.Data()))
				if err := m.DoubleAck(ctx); err != nil {
					return err
				}
			}
			if len(got) < want {
				return fmt.Errorf("eu consumed %d of %d events (%v)", len(got), want, batch.Error())
			}
			return nil
		})
		for i, d := range got {
			if d != fmt.Sprintf("e%d", i) {
				t.Fatalf("eu consumed %v, want e0..e%d in order", got, want-1)
			}
		}
	}
	sourced := func(want uint64) {
		t.Helper()
		testkit.WaitFor(t, 15*time.Second, func() error {
			info, err := copyEU.Info(ctx)
			if err != nil {
				return err
			}
			if info.State.Msgs != want {
				return fmt.Errorf("eu sourced %d of %d events", info.State.Msgs, want)
			}
			return nil
		})
	}

	publish(0, 3)
	consume(3)
	sourced(3)

	// (b) The allocator bucket, placed in us, created from ap.
	kvAP, err := jsAP.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:    "alloc",
		Placement: &jetstream.Placement{Cluster: "us"},
	})
	if err != nil {
		t.Fatalf("create kv from ap: %v", err)
	}
	kvEU, err := jsEU.KeyValue(ctx, "alloc")
	if err != nil {
		t.Fatalf("bind kv from eu: %v", err)
	}
	if info, err := jsEU.Stream(ctx, "KV_alloc"); err != nil || info.CachedInfo().Cluster.Leader != "us" {
		t.Fatalf("kv stream: %v, want it in us", err)
	}
	rev, err := kvEU.Create(ctx, "next", []byte("1"))
	if err != nil {
		t.Fatalf("create key from eu: %v", err)
	}
	if _, err := kvAP.Create(ctx, "next", []byte("1")); !errors.Is(err, jetstream.ErrKeyExists) {
		t.Fatalf("second create from ap: %v, want ErrKeyExists", err)
	}
	rev2, err := kvAP.Update(ctx, "next", []byte("2"), rev)
	if err != nil {
		t.Fatalf("compare-and-set from ap: %v", err)
	}
	if _, err := kvEU.Update(ctx, "next", []byte("2"), rev); err == nil {
		t.Fatal("stale compare-and-set from eu succeeded")
	}
	if e, err := kvEU.Get(ctx, "next"); err != nil || string(e.Value()) != "2" || e.Revision() != rev2 {
		t.Fatalf("get from eu: %v %v, want 2 at revision %d", e, err, rev2)
	}

	// Across a cut of us-eu: us keeps writing its own events; eu cannot
	// reach them, nor the bucket, until the heal; ap still reaches the
	// bucket.
	if err := c.SetLink("us", "eu", false); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, func() error { return noInboundAcrossCut(c) })
	publish(3, 3)
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = kvEU.Get(short, "next")
	cancelShort()
	if err == nil {
		t.Fatal("eu read the bucket in us across the cut")
	}
	if _, err := kvAP.Update(ctx, "next", []byte("3"), rev2); err != nil {
		t.Fatalf("compare-and-set from ap during the cut: %v", err)
	}
	if err := c.SetLink("us", "eu", true); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	consume(6)
	sourced(6)
	testkit.WaitFor(t, 10*time.Second, func() error {
		e, err := kvEU.Get(ctx, "next")
		if err != nil {
			return err
		}
		if string(e.Value()) != "3" {
			return fmt.Errorf("eu reads %q", e.Value())
		}
		return nil
	})
}
