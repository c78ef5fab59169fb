package authguard

import (
	"fmt"
	"testing"
	"time"
)

// A clock the test moves.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// An address's first Burst failures are free; the next attempt waits for
// a refill, longer as failures pile up, and is refused past MaxWait.
// Another address is not slowed; time gives the tokens back.
func TestFailuresSlowTheirAddressOnly(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	g := New(Config{Rate: 1, Burst: 3, MaxWait: 5 * time.Second, Now: c.now})
	for i := range 3 {
		if w, ok := g.Wait("a"); w != 0 || !ok {
			t.Fatalf("attempt %d: wait %v %v, want none", i, w, ok)
		}
		g.Fail("a")
	}
	if w, ok := g.Wait("a"); w != time.Second || !ok {
		t.Fatalf("after a burst of failures: wait %v %v, want 1s", w, ok)
	}
	g.Fail("a")
	g.Fail("a")
	if w, ok := g.Wait("a"); w != 3*time.Second || !ok {
		t.Fatalf("two failures more: wait %v %v, want 3s", w, ok)
	}
	for range 3 {
		g.Fail("a")
	}
	if w, ok := g.Wait("a"); ok {
		t.Fatalf("past MaxWait: wait %v, want refused", w)
	}
	if w, ok := g.Wait("b"); w != 0 || !ok {
		t.Fatalf("another address: wait %v %v", w, ok)
	}
	c.t = c.t.Add(time.Minute)
	if w, ok := g.Wait("a"); w != 0 || !ok {
		t.Fatalf("a minute later: wait %v %v", w, ok)
	}
}

// The addresses remembered stay within MaxAddrs, the least recently
// failed forgotten first.
func TestBoundedAddresses(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	g := New(Config{Rate: 1, Burst: 1, MaxAddrs: 100, Now: c.now})
	g.Fail("kept")
	g.Fail("kept")
	for i := range 1000 {
		if i%10 == 0 {
			g.Fail("kept") // recently failed: stays
		}
		g.Fail(fmt.Sprint("addr", i))
	}
	if n := g.Len(); n != 100 {
		t.Fatalf("%d addresses remembered, want 100", n)
	}
	if _, ok := g.m["kept"]; !ok {
		t.Fatal("a recently failing address was forgotten")
	}
	if _, ok := g.m["addr0"]; ok {
		t.Fatal("the least recently failed address was kept")
	}
}

func TestHost(t *testing.T) {
	for in, want := range map[string]string{"127.0.0.2:5000": "127.0.0.2", "[::1]:80": "::1", "forwarded": "forwarded"} {
		if got := Host(in); got != want {
			t.Errorf("Host(%q) = %q, want %q", in, got, want)
		}
	}
}
