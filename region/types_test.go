package region

import (
	"context"
	"errors"
	"testing"

	"github.com/tally-dev/tally/crdt"
)

// An event type registered at one replica reaches the other as a record;
// the last write wins everywhere; an inactive type's keys (the name
// itself, and keys under it past a ':') refuse writes at the replica
// that heard of it, other keys do not; active again, they take writes.
func TestTypesReplicateAndInactiveRefusesWrites(t *testing.T) {
	ctx := context.Background()
	net := newBudgetNet(t, 2, nil)
	a, b := net.reps[0], net.reps[1]
	if _, err := a.Admin().SetType(ctx, "video", "media-team", crdt.TypeActive, "views of a video"); err != nil {
		t.Fatal(err)
	}
	net.settle()
	m, ok, err := b.Admin().Type("video")
	if err != nil || !ok || m.Value.Owner != "media-team" || m.Value.Status != crdt.TypeActive || m.Origin != "r0" {
		t.Fatalf("b's view of video: %+v %v %v", m, ok, err)
	}
	if name, _, ok := b.Admin().TypeOf("video:v123"); !ok || name != "video" {
		t.Fatalf("type of video:v123: %q %v", name, ok)
	}
	if _, _, ok := b.Admin().TypeOf("videos:1"); ok {
		t.Fatal("videos:1 is of type video")
	}
	// B deactivates; A hears of it; both refuse writes under video.
	if res, err := b.Admin().SetType(ctx, "video", "media-team", crdt.TypeInactive, "retired"); err != nil || !res.Changed {
		t.Fatalf("deactivate: %+v %v", res, err)
	}
	net.settle()
	for _, r := range net.reps {
		for _, op := range []Op{
			{Kind: OpIncr, Item: "video:v123", By: 1},
			{Kind: OpIncr, Item: "video", By: 1},
			{Kind: OpLike, Item: "video:v1", User: "u456"},
			{Kind: OpUniques, Item: "video:v1", IDs: []string{"x"}},
		} {
			if _, err := r.Apply(ctx, op); !errors.Is(err, ErrInactiveType) {
				t.Fatalf("%s: %+v on an inactive type: %v", r.ID(), op, err)
			}
		}
		if _, err := r.Apply(ctx, Op{Kind: OpIncr, Item: "videos:1", By: 1}); err != nil {
			t.Fatalf("%s: a key of no type: %v", r.ID(), err)
		}
	}
	// A longer registered prefix decides: video:live is active.
	if _, err := a.Admin().SetType(ctx, "video:live", "", crdt.TypeActive, ""); err != nil {
		t.Fatal(err)
	}
	net.settle()
	if _, err := b.Apply(ctx, Op{Kind: OpIncr, Item: "video:live:9", By: 1}); err != nil {
		t.Fatalf("under the active video:live: %v", err)
	}
	if _, err := a.Admin().SetType(ctx, "video", "media-team", crdt.TypeActive, "back"); err != nil {
		t.Fatal(err)
	}
	net.settle()
	if _, err := b.Apply(ctx, Op{Kind: OpIncr, Item: "video:v123", By: 1}); err != nil {
		t.Fatalf("active again: %v", err)
	}
	types, more, err := b.Admin().Types("", 10)
	if err != nil || more || len(types) != 2 || types[0].Name != "video" || types[0].Meta.Value.Description != "back" || types[1].Name != "video:live" {
		t.Fatalf("types: %+v %v %v", types, more, err)
	}
	// Bad input.
	for _, op := range []Op{
		{Kind: OpType, Item: "bad/name", Meta: &crdt.TypeMeta{Value: crdt.TypeInfo{Status: crdt.TypeActive}}},
		{Kind: OpType, Item: "t"}, // no metadata
		{Kind: OpType, Item: "t", Meta: &crdt.TypeMeta{Value: crdt.TypeInfo{Status: "paused"}}},
		{Kind: OpType, Item: "t", Meta: &crdt.TypeMeta{Value: crdt.TypeInfo{Status: crdt.TypeActive, Owner: string(make([]byte, 129))}}},
	} {
		if _, err := a.Apply(ctx, op); !errors.Is(err, ErrInvalid) {
			t.Fatalf("%+v: %v", op, err)
		}
	}
}

// A replica reopened on its data directory has its types back (the
// store loads them at open) and still refuses the inactive ones.
func TestTypesSurviveReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	r, closeA := openReplica(t, dir, "A", nil)
	if _, err := r.Admin().SetType(ctx, "ads", "growth", crdt.TypeInactive, ""); err != nil {
		t.Fatal(err)
	}
	closeA()
	r2, _ := openReplica(t, dir, "A", nil)
	if m, ok, err := r2.Admin().Type("ads"); err != nil || !ok || m.Value.Owner != "growth" || !m.Value.Inactive() {
		t.Fatalf("after reopen: %+v %v %v", m, ok, err)
	}
	if _, err := r2.Apply(ctx, Op{Kind: OpIncr, Item: "ads:1", By: 1}); !errors.Is(err, ErrInactiveType) {
		t.Fatalf("after reopen: %v", err)
	}
}
