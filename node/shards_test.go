package node

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/internal/testkit"
	"github.com/tally-dev/tally/shard"
)

// A holder that does not accept writes yet (it recovers after a restart
// or a wipe) takes no forwarded requests: NATS finds no responder on its
// shards' subjects, so it gives the requests to the holders that are
// ready. Once it accepts writes it answers them.
func TestHolderTakesForwardedRequestsOnceItAcceptsWrites(t *testing.T) {
	ns := testkit.StartNATS(t, false)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	m, err := shard.Assign("us", []string{"us-1"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	sr := newShardRouter("us", "us-1", m, nc, 5*time.Second, hclog.NewNullLogger())
	accepted := make(chan struct{})
	sr.accepted = accepted
	served := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	if err := sr.serve(served, nil); err != nil {
		t.Fatal(err)
	}
	defer sr.close()
	ask := func() error {
		msg := nats.NewMsg(routeSubject("us", 7))
		msg.Header.Set(hdrMethod, http.MethodGet)
		msg.Header.Set(hdrURI, "/v1/likes/x")
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := nc.RequestMsgWithContext(ctx, msg)
		return err
	}
	if err := ask(); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("a forwarded request to a replica holding writes: %v, want no responders", err)
	}
	close(accepted)
	deadline := time.Now().Add(10 * time.Second)
	for err := ask(); err != nil; err = ask() {
		if time.Now().After(deadline) {
			t.Fatalf("the replica accepts writes and still takes no forwarded request: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
