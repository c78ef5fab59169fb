package replication

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

// recordingNet is a MemNetwork member "rx" that records what it receives
// on t.>, and a member "tx" to publish from.
func recordingNet(t *testing.T) (tx Transport, got func() []string) {
	t.Helper()
	n := NewMemNetwork(MemConfig{})
	var mu sync.Mutex
	var msgs []string
	unsub, err := n.Join("rx").Subscribe("t.>", func(_ string, data []byte) {
		mu.Lock()
		msgs = append(msgs, string(data))
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unsub() })
	return n.Join("tx"), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), msgs...)
	}
}

// publishAll publishes n numbered messages through f, then waits for the
// delayed ones to go out.
func publishAll(t *testing.T, f *FaultyTransport, n int) {
	t.Helper()
	for i := range n {
		if err := f.Publish("t.x", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	f.wg.Wait() // the delivery goroutine exits when the queue is empty
}

// The wrapper drops, duplicates and delays (so reorders) what it
// publishes, and its delivery goroutine ends once nothing is queued.
func TestFaultyTransportDropsDuplicatesAndDelays(t *testing.T) {
	for _, tc := range []struct {
		faults  Faults
		n, want int
	}{
		{Faults{Drop: 1}, 50, 0},
		{Faults{Dup: 1}, 50, 100},
		{Faults{}, 50, 50},
	} {
		tx, got := recordingNet(t)
		f := NewFaultyTransport(tx, tc.faults)
		publishAll(t, f, tc.n)
		if g := len(got()); g != tc.want {
			t.Errorf("%v: %d delivered of %d, want %d", tc.faults, g, tc.n, tc.want)
		}
		f.Close()
	}

	tx, got := recordingNet(t)
	f := NewFaultyTransport(tx, Faults{Delay: 20 * time.Millisecond, Seed: 3})
	defer f.Close()
	publishAll(t, f, 200)
	msgs := got()
	if len(msgs) != 200 {
		t.Fatalf("delay delivered %d, want 200", len(msgs))
	}
	inOrder := true
	for i, m := range msgs {
		inOrder = inOrder && m == fmt.Sprint(i)
	}
	if inOrder {
		t.Fatalf("random delays did not reorder 200 messages: %s", strings.Join(msgs[:10], ","))
	}
}

// Half the messages lost, seeded: the same seed loses the same ones.
func TestFaultyTransportIsRepeatable(t *testing.T) {
	run := func(seed uint64) []string {
		tx, got := recordingNet(t)
		f := NewFaultyTransport(tx, Faults{Drop: 0.5, Dup: 0.5, Seed: seed})
		defer f.Close()
		publishAll(t, f, 100)
		return got()
	}
	a, b, c := run(1), run(1), run(2)
	if strings.Join(a, ",") != strings.Join(b, ",") {
		t.Fatal("one seed, two outcomes")
	}
	if strings.Join(a, ",") == strings.Join(c, ",") {
		t.Fatal("two seeds, one outcome")
	}
	if len(a) < 20 || len(a) > 130 {
		t.Fatalf("drop=0.5,dup=0.5 delivered %d of 100", len(a))
	}
}

// Close drops what is still delayed and stops the delivery goroutine; what
// is published afterwards is dropped too.
func TestFaultyTransportClose(t *testing.T) {
	tx, got := recordingNet(t)
	f := NewFaultyTransport(tx, Faults{Delay: time.Hour})
	for range 10 {
		if err := f.Publish("t.x", []byte("late")); err != nil {
			t.Fatal(err)
		}
	}
	f.Close() // returns although the messages are an hour away: the goroutine stopped
	f.SetFaults(Faults{})
	if err := f.Publish("t.x", []byte("after")); err != nil {
		t.Fatal(err)
	}
	if msgs := got(); len(msgs) != 0 {
		t.Fatalf("delivered %v after Close", msgs)
	}
}

func TestParseChaosNet(t *testing.T) {
	f, err := ParseChaosNet("drop=0.1, dup=0.25,delay=30ms,seed=7")
	if err != nil || f != (Faults{Drop: 0.1, Dup: 0.25, Delay: 30 * time.Millisecond, Seed: 7}) {
		t.Fatalf("%+v, %v", f, err)
	}
	if f, err := ParseChaosNet(""); err != nil || !f.None() {
		t.Fatalf("empty spec: %+v, %v", f, err)
	}
	if f, err := ParseChaosNet("dup=1"); err != nil || f.Dup != 1 || f.Drop != 0 {
		t.Fatalf("dup=1: %+v, %v", f, err)
	}
	for _, bad := range []string{"drop=2", "dup=x", "delay=-1s", "nope=1", "drop", "drop=NaN", "seed=-1", "drop=0.1,", "drop=-0.5"} {
		if _, err := ParseChaosNet(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// Whatever ParseChaosNet accepts is valid, and String gives it back.
func FuzzParseChaosNet(f *testing.F) {
	for _, s := range []string{"", "drop=0.1,dup=0.1,delay=30ms,seed=7", "drop=1", "delay=1h2m", "seed=18446744073709551615", "drop=1e-3, dup=0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		faults, err := ParseChaosNet(spec)
		if err != nil {
			return
		}
		if err := faults.Validate(); err != nil {
			t.Fatalf("%q parsed to invalid %+v: %v", spec, faults, err)
		}
		again, err := ParseChaosNet(faults.String())
		if err != nil || again != faults {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", spec, faults, faults.String(), again, err)
		}
		if math.IsNaN(faults.Drop) || math.IsNaN(faults.Dup) {
			t.Fatalf("%q: NaN probability", spec)
		}
	})
}
