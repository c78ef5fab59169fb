//go:build chaos

package replication

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

func TestParseChaosNet(t *testing.T) {
	f, err := parseChaosNet("drop=0.1, dup=0.25,delay=30ms,seed=7")
	if err != nil || f.drop != 0.1 || f.dup != 0.25 || f.delay != 30*time.Millisecond {
		t.Fatalf("%+v, %v", f, err)
	}
	for _, bad := range []string{"drop=2", "dup=x", "delay=-1s", "nope=1", "drop"} {
		if _, err := parseChaosNet(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// The injector drops, duplicates and delays (so reorders) what it
// publishes, and its delivery goroutine ends once nothing is queued.
func TestChaosNetDropsDuplicatesAndDelays(t *testing.T) {
	s := startNATS(t)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync("t.>")
	if err != nil {
		t.Fatal(err)
	}
	count := func(subject string, n int, f *chaosNet) []string {
		t.Helper()
		for i := range n {
			if err := f.publish(nc, subject, []byte(fmt.Sprint(i))); err != nil {
				t.Fatal(err)
			}
		}
		f.wg.Wait() // the delivery goroutine exits when the queue is empty
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			m, err := sub.NextMsg(100 * time.Millisecond)
			if err != nil {
				return got
			}
			got = append(got, string(m.Data))
		}
	}
	mk := func(spec string) *chaosNet {
		f, err := parseChaosNet(spec)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	if got := count("t.drop", 50, mk("drop=1")); len(got) != 0 {
		t.Fatalf("drop=1 delivered %d", len(got))
	}
	if got := count("t.dup", 50, mk("dup=1")); len(got) != 100 {
		t.Fatalf("dup=1 delivered %d, want 100", len(got))
	}
	got := count("t.delay", 200, mk("delay=20ms,seed=3"))
	if len(got) != 200 {
		t.Fatalf("delay delivered %d, want 200", len(got))
	}
	inOrder := true
	for i, m := range got {
		inOrder = inOrder && m == fmt.Sprint(i)
	}
	if inOrder {
		t.Fatalf("random delays did not reorder 200 messages: %s", strings.Join(got[:10], ","))
	}
}
