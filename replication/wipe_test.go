package replication_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/replication"
)

// startJetStreamServer runs one real embedded nats-server with JetStream,
// for the event streams.
func startJetStreamServer(t *testing.T) *server.Server { return testkit.StartNATS(t, true) }

// streamedEvent is the identity of an event on a region's stream, and
// what it did.
type streamedEvent struct {
	Seq     uint64 `json:"seq"`
	Log     string `json:"log"`
	Replica string `json:"replica"`
	Type    string `json:"type"`
	Key     string `json:"key"`
	User    string `json:"user"`
}

// regionEvents reads every event on region's stream.
func regionEvents(t *testing.T, js jetstream.JetStream, region string) []streamedEvent {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, replication.EventsStream(region))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var out []streamedEvent
	for range info.State.Msgs {
		m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range bytes.Split(bytes.TrimSpace(m.Data()), []byte("\n")) {
			var e streamedEvent
			if err := json.Unmarshal(line, &e); err != nil {
				t.Fatal(err)
			}
			out = append(out, e)
		}
	}
	return out
}

// history GETs a pair's like history from a node's real HTTP listener.
func history(t *testing.T, n *replica, item, user string) map[string]any {
	t.Helper()
	code, b := testkit.CallJSON(t, "GET", "http://"+n.Addr().String()+"/v1/likes/"+item+"/"+user+"/history")
	if code != 200 {
		t.Fatalf("history at %s: %d %v", n.id(), code, b)
	}
	return b
}

// The tour's "lose a disk" step (docs/tour.md), with real Pebble and NATS: us-1 is
// wiped and numbers its events from 1 again. Every event on the stream
// still has its own (replica, log, seq); and the like the lost disk
// accepted is gone from the like history, which now says so
// (complete:false, partial:[us-1]) in every region, also after us-1
// restarts again.
func TestWipedReplicaEventIdentityAndPartialHistory(t *testing.T) {
	t.Parallel() // mostly waits on NATS and replication timers
	s := startJetStreamServer(t)
	url := s.ClientURL()
	ids := []string{"us-1", "eu-1"}
	dirs := []string{filepath.Join(t.TempDir(), "us-1"), filepath.Join(t.TempDir(), "eu-1")}
	var us, eu *replica
	t.Cleanup(func() {
		for _, n := range []*replica{us, eu} {
			if n != nil {
				n.close(t)
			}
		}
	})
	accepting := func(n *replica) {
		testkit.WaitFor(t, 15*time.Second, func() error {
			if !n.Replica().Accepting() {
				return fmt.Errorf("%s not accepting writes", n.id())
			}
			return nil
		})
	}
	us = startNode(t, url, "us", "us-1", dirs[0], ids)
	eu = startNode(t, url, "eu", "eu-1", dirs[1], ids)
	accepting(us)
	accepting(eu)

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	streamed := func(want int) []streamedEvent {
		var got []streamedEvent
		testkit.WaitFor(t, 15*time.Second, func() error {
			if _, err := js.Stream(context.Background(), replication.EventsStream("us")); err != nil {
				return err
			}
			if got = regionEvents(t, js, "us"); len(got) < want {
				return fmt.Errorf("%d events on the stream, want %d", len(got), want)
			}
			return nil
		})
		return got
	}

	ctx := context.Background()
	if _, err := us.Replica().Likes().Like(ctx, "post", "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := us.Replica().Likes().Like(ctx, "post", "carol"); err != nil {
		t.Fatal(err)
	}
	converged(t, []*replica{us, eu}, "post", 2, 10*time.Second)
	before := streamed(2)
	for _, n := range []*replica{us, eu} {
		if h := history(t, n, "post", "alice"); h["complete"] != true || len(h["actions"].([]any)) != 1 {
			t.Fatalf("history at %s before the wipe: %v", n.id(), h)
		}
	}

	// us-1 loses its disk and comes back empty.
	us.close(t)
	us = nil
	if err := os.RemoveAll(dirs[0]); err != nil {
		t.Fatal(err)
	}
	us = startNode(t, url, "us", "us-1", dirs[0], ids)
	if !us.Replica().Fresh() {
		t.Fatal("wiped store not seen as fresh")
	}
	accepting(us)
	if _, err := us.Replica().Likes().Like(ctx, "post", "bob"); err != nil {
		t.Fatal(err)
	}
	converged(t, []*replica{us, eu}, "post", 3, 10*time.Second)
	after := streamed(len(before) + 2) // bob's like, and the recovery of us-1's own entry

	// Every event keeps its own identity: the new incarnation's seqs start
	// at 1 again, under another log id.
	type ident struct {
		replica, log string
		seq          uint64
	}
	seen := map[ident]streamedEvent{}
	logs := map[string][]uint64{}
	for _, e := range after {
		if e.Log == "" {
			t.Fatalf("event without a log id: %+v", e)
		}
		id := ident{e.Replica, e.Log, e.Seq}
		if prev, dup := seen[id]; dup {
			t.Fatalf("two events share %+v: %+v and %+v", id, prev, e)
		}
		seen[id] = e
		logs[e.Log] = append(logs[e.Log], e.Seq)
	}
	if len(logs) != 2 {
		t.Fatalf("want the two incarnations' logs, got %v", logs)
	}
	for l, seqs := range logs {
		if !slices.Contains(seqs, 1) {
			t.Fatalf("log %s does not start at seq 1: %v", l, seqs)
		}
	}
	if before[0].Log == after[len(after)-1].Log {
		t.Fatalf("the wiped replica kept its log id %s", before[0].Log)
	}

	// alice's like was accepted by the lost disk: no region can list it,
	// and every region says the history is not whole, naming us-1.
	check := func(when string) {
		for _, n := range []*replica{us, eu} {
			h := history(t, n, "post", "alice")
			if h["complete"] != false || fmt.Sprint(h["partial"]) != "[us-1]" || h["missing"] != nil {
				t.Fatalf("history at %s %s: %v", n.id(), when, h)
			}
		}
	}
	check("after the wipe")
	if !us.Replica().StateLost() {
		t.Fatal("the wiped replica does not know it lost state")
	}
	if eu.Replica().StateLost() {
		t.Fatal("eu-1, which lost nothing, says it lost state")
	}
	// It stays so: the data directory remembers.
	us.close(t)
	us = nil
	us = startNode(t, url, "us", "us-1", dirs[0], ids)
	accepting(us)
	check("after a plain restart")
}
