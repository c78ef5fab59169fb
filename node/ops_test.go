package node

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/route"
)

// Every region operation a replica sends typed reads back at the holder
// as it was, a backfill's Import mark with it (its own wire kinds); one
// it does not send is refused before anything leaves.
func TestWireOpsRoundTrip(t *testing.T) {
	ops := []region.Op{
		{Kind: region.OpLike, Item: "v", User: "ann", At: 5, IdemKey: "l-1"},
		{Kind: region.OpLike, Item: "v", User: "ann", At: 5, Import: true},
		{Kind: region.OpUnlike, Item: "v", User: "bob", Import: true},
		{Kind: region.OpIncr, Item: "views", By: 3, IdemKey: "imp:00.1", At: 7, Import: true},
		{Kind: region.OpIncr, Item: "views", By: -3},
		{Kind: region.OpUniques, Item: "visitors", IDs: []string{"ann"}, Import: true},
		{Kind: region.OpToggle, Item: "v", User: "cy", IdemKey: "t-1"},
		{Kind: region.OpCashback, Item: "pool", Merchant: "shop", User: "ann", By: 2, IdemKey: "c-1"},
	}
	kinds := map[route.OpKind]bool{}
	for i := range ops {
		w, err := wireOp(&ops[i])
		if err != nil {
			t.Fatalf("%+v: %v", ops[i], err)
		}
		if w.Kind.Read() {
			t.Errorf("%+v sent as a read (kind %d)", ops[i], w.Kind)
		}
		kinds[w.Kind] = true
		req := route.Request{Kind: route.KindOps, Shard: 1, Ops: []route.Op{w}}
		got, err := route.UnmarshalRequest(req.Marshal())
		if err != nil {
			t.Fatal(err)
		}
		if back := regionOp(&got.Ops[0]); !reflect.DeepEqual(back, ops[i]) {
			t.Errorf("sent %+v, the holder reads %+v", ops[i], back)
		}
	}
	if len(kinds) != len(ops) {
		t.Errorf("%d wire kinds for %d operations of distinct kinds or marks: %v", len(kinds), len(ops), kinds)
	}
	for _, o := range []region.Op{{Kind: region.OpBlock, User: "ann"}, {Kind: region.OpSpend, Item: "pool", By: 1, Import: true}} {
		if _, err := wireOp(&o); !errors.Is(err, region.ErrInvalid) {
			t.Errorf("%+v: %v, want it refused (region.ErrInvalid)", o, err)
		}
	}
}

// A like's history is read alone: a request holding it with another read
// is refused whole, answered as a history (the encoding its sender
// reads), and nothing is read.
func TestHistoryIsReadAlone(t *testing.T) {
	sr := &shardRouter{}
	req := route.Request{Kind: route.KindOps, Shard: 1, Ops: []route.Op{route.HistoryOp("v", "ann", 10), {Kind: route.OpGet, Key: "k"}}}
	a, ok := sr.serveOps(req, time.Now().Add(time.Second))
	if !ok || a.Kind != route.Served {
		t.Fatalf("answer %+v, %v: want served", a, ok)
	}
	h, err := route.UnmarshalHistory(a.Body)
	if err != nil || h.Code != "bad_request" || len(h.Actions) != 0 {
		t.Fatalf("history %+v, %v: want refused, bad_request", h, err)
	}
}
