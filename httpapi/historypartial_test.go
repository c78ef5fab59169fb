package httpapi

import (
	"context"
	"fmt"
	"testing"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

// A replica whose recovery took back own state its store did not hold
// answers its like history as partial: complete:false, naming itself.
func TestHistoryPartialAfterLostState(t *testing.T) {
	e := newEnv(t, envOpts{hold: true})
	b := e.do("GET", "/v1/likes/post/alice/history", "").ok(t)
	if b["complete"] != true || b["partial"] != nil {
		t.Fatalf("before: %v", b)
	}
	peer := crdt.Vector{}.Set("us-1", crdt.PN{P: 1})
	if err := e.rep.Merge(context.Background(), []region.VectorMerge{{Kind: storage.Likes, Item: "post", Vec: peer}}, nil); err != nil {
		t.Fatal(err)
	}
	e.rep.AcceptWrites()
	b = e.do("GET", "/v1/likes/post/alice/history", "").ok(t)
	if b["complete"] != false || fmt.Sprint(b["partial"]) != "[us-1]" {
		t.Fatalf("after recovering an own entry: %v", b)
	}
}
