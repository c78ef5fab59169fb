package alloc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// TestRetireFreesAGoneHoldersLease: a replica dies for good holding a
// lease with numbers left in it; retiring it frees the tail from its last
// report, and the next leaseholder to acquire takes exactly that span.
func TestRetireFreesAGoneHoldersLease(t *testing.T) {
	kv, nc := startKV(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	cfg := testConfig(kv, "gone")
	cfg.IdleRelease = time.Hour // it must die holding the lease, not give it back
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.Start()
	var used Span
	testkit.WaitFor(t, 20*time.Second, func() error {
		sp, ok := a.Take(3)
		if !ok {
			return errors.New("no numbers yet")
		}
		used = sp
		return nil
	})
	a.Durable()
	// Its last report: the renewal that records the three numbers used.
	// (It may hold a second lease, taken ahead as the first ran low.)
	testkit.WaitFor(t, 20*time.Second, func() error {
		st, err := Read(ctx, kv, "likes")
		if err != nil {
			return err
		}
		for _, l := range st.Leases {
			if l.Leaseholder == "gone" && l.Used == used.End {
				return nil
			}
		}
		return fmt.Errorf("no report of use up to %d yet: %+v", used.End, st.Leases)
	})
	a.cancel() // dies: no Close, nothing given back
	<-a.done
	st, err := Read(ctx, kv, "likes")
	if err != nil {
		t.Fatal(err)
	}
	var want []Span
	for _, l := range st.Leases {
		if l.Leaseholder != "gone" {
			t.Fatalf("lease of another leaseholder: %+v", l)
		}
		want = append(want, Span{l.Used, l.End})
	}
	if len(want) == 0 || want[0].Len() == 0 {
		t.Fatalf("want gone to hold a lease with numbers left, got %+v", st.Leases)
	}

	freed, err := RetireReplica(ctx, js, RetireConfig{Sequence: "likes", Replica: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(freed, want) {
		t.Fatalf("freed %+v, want %+v", freed, want)
	}
	st, err = Read(ctx, kv, "likes")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Leases) != 0 {
		t.Fatalf("leases left after retire: %+v", st.Leases)
	}
	// What gone used last reported counts, the rest of its block is a
	// hole, and every number is final: the dense ranks are known.
	if len(st.Closed) != 0 || st.Dense.Pos != st.HWM || st.Dense.Rank != want[0].Start-1 {
		t.Fatalf("state after retire %+v, want every number final, %d used", st, want[0].Start-1)
	}

	// Retiring again frees nothing and is not an error.
	again, err := RetireReplica(ctx, js, RetireConfig{Sequence: "likes", Replica: "gone"})
	if err != nil || len(again) != 0 {
		t.Fatalf("second retire: %+v, %v; want nothing, no error", again, err)
	}

	// Another leaseholder takes fresh numbers.
	b, err := New(testConfig(kv, "next"))
	if err != nil {
		t.Fatal(err)
	}
	b.Start()
	defer func() { _ = b.Close(ctx) }()
	var got Span
	testkit.WaitFor(t, 20*time.Second, func() error {
		sp, ok := b.Take(1)
		if !ok {
			return errors.New("no numbers yet")
		}
		got = sp
		return nil
	})
	b.Durable()
	if got.Start != st.HWM {
		t.Fatalf("next leaseholder took [%d,%d), want fresh numbers from %d (holes are never leased again)", got.Start, got.End, st.HWM)
	}
}

func TestRetireReplicaRefuses(t *testing.T) {
	_, nc := startKV(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := RetireReplica(ctx, js, RetireConfig{Sequence: "likes"}); err == nil {
		t.Error("retired without a holder")
	}
	if _, err := RetireReplica(ctx, js, RetireConfig{Sequence: "no such", Replica: "x"}); err == nil {
		t.Error("retired from an invalid sequence name")
	}
	if _, err := RetireReplica(ctx, js, RetireConfig{Bucket: "nope", Sequence: "likes", Replica: "x"}); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Errorf("missing bucket: %v, want ErrBucketNotFound", err)
	}
	// A sequence nobody used is not created by retiring from it.
	if _, err := RetireReplica(ctx, js, RetireConfig{Sequence: "unused", Replica: "x"}); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("unused sequence: %v, want ErrKeyNotFound", err)
	}
}
