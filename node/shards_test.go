package node

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/route"
	"github.com/tally-dev/tally/shard"
)

// applies is a writer that applies every operation: each result zero.
func applies(_ context.Context, ops []region.Op) ([]region.Result, error) {
	return make([]region.Result, len(ops)), nil
}

// threeReplicas is a NATS server to connect to (conn; each connection
// closed with the test) and us's map over three replicas, copies 2.
func threeReplicas(t testing.TB) (conn func() *nats.Conn, m shard.Map) {
	ns := testkit.StartNATS(t, false)
	conn = func() *nats.Conn {
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	m, err := shard.Assign("us", []string{"us-1", "us-2", "us-3"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	return conn, m
}

// A holder that does not accept writes yet (it recovers after a restart
// or a wipe) answers forwarded requests NotServed, having applied
// nothing, and the sender goes on to the next holder of the shard; once
// it accepts writes it serves them. With no holder serving, Apply
// fails with ErrNoHolder.
func TestForwardSkipsAHolderThatIsNotReady(t *testing.T) {
	conn, m := threeReplicas(t)
	// A shard us-1 does not hold: its two holders are us-2 and us-3.
	s, held := 0, m.Held("us-1")
	for held.Has(s) {
		s++
	}
	holders := m.Holders(s)
	first := holders[s%len(holders)] // the one the sender tries first
	other := holders[(s+1)%len(holders)]

	routers := map[string]*shardRouter{}
	gates := map[string]chan struct{}{}
	for _, r := range []string{"us-1", "us-2", "us-3"} {
		nc := conn()
		sr := newShardRouter("us", r, m, nc, natsTransport{nc: nc, region: "us"}, nil, 5*time.Second, hclog.NewNullLogger())
		gates[r] = make(chan struct{})
		sr.accepted = gates[r]
		sr.do = applies
		if err := sr.serve(nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sr.close)
		routers[r] = sr
	}
	forward := func() (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, by, err := routers["us-1"].Apply(ctx, s, []region.Op{{Kind: region.OpIncr, Item: "x", By: 1}}, false)
		return by, err
	}
	if by, err := forward(); err == nil || !strings.Contains(err.Error(), "no replica holding the shard is up") {
		t.Fatalf("no holder ready: served by %q, %v; want ErrNoHolder", by, err)
	}
	close(gates[other])
	if by, err := forward(); err != nil || by != other {
		t.Fatalf("only %s ready (the sender tries %s first): served by %q, %v", other, first, by, err)
	}
	close(gates[first])
	if by, err := forward(); err != nil || by != first {
		t.Fatalf("both ready: served by %q, %v; want %s, the first", by, err, first)
	}
	// A replica asked for a shard it does not hold says so, and serves
	// nothing.
	close(gates["us-1"])
	a, err := routers["us-2"].sender.Ask(context.Background(), "us-1",
		(&route.Request{Kind: route.KindOps, Shard: s, Ops: []route.Op{{Kind: route.OpIncr, Key: "x", By: 1}}}).Marshal())
	if !errors.Is(err, route.ErrNotServed) || !strings.Contains(err.Error(), "not held") {
		t.Fatalf("us-1 asked for shard %d it does not hold: %+v %v", s, a, err)
	}
}

// A holder that lets a request time out (stopped with it in hand) is
// tried last for a while: the timed-out request is not sent again
// elsewhere, since it may have been applied, but the next ones go to the
// shard's other holder instead of waiting on the stuck one.
func TestForwardTriesAStuckHolderLast(t *testing.T) {
	conn, m := threeReplicas(t)
	s, held := 0, m.Held("us-1")
	for held.Has(s) {
		s++
	}
	pref := m.Preferred(s)
	stuck, other := pref[0], pref[1]
	// The stuck holder takes requests and never answers. The flush makes
	// the server hold the subscription before the first request: else
	// that request can find no responder there and go to the other holder.
	sc := conn()
	if _, err := sc.Subscribe(route.Subject("us", stuck), func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := sc.Flush(); err != nil {
		t.Fatal(err)
	}
	nc := conn()
	sr := newShardRouter("us", other, m, nc, natsTransport{nc: nc, region: "us"}, nil, 5*time.Second, hclog.NewNullLogger())
	sr.do = applies
	if err := sr.serve(nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sr.close)
	nc = conn()
	entry := newShardRouter("us", "us-1", m, nc, natsTransport{nc: nc, region: "us"}, nil, 300*time.Millisecond, hclog.NewNullLogger())
	forward := func() (string, error) {
		_, by, err := entry.Apply(context.Background(), s, []region.Op{{Kind: region.OpLike, Item: "x", User: "u"}}, false)
		return by, err
	}
	if by, err := forward(); err == nil || strings.Contains(err.Error(), "no replica holding") {
		t.Fatalf("the first request, to the stuck %s: served by %q, %v; want a timeout", stuck, by, err)
	}
	if by, err := forward(); err != nil || by != other {
		t.Fatalf("the next request: served by %q, %v; want %s, while %s is suspected", by, err, other, stuck)
	}
}
