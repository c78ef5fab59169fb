package replication

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestMatchSubject(t *testing.T) {
	for _, tc := range []struct {
		pattern, subject string
		want             bool
	}{
		{"a.b", "a.b", true},
		{"a.b", "a.c", false},
		{"a.*", "a.b", true},
		{"a.*", "a.b.c", false},
		{"a.>", "a.b.c", true},
		{"a.>", "a", false},
		{"a.*.c", "a.x.c", true},
		{"a.b", "a.b.c", false},
	} {
		p, err := parsePattern(tc.pattern)
		if err != nil {
			t.Fatal(err)
		}
		if got := matchSubject(p, tc.subject); got != tc.want {
			t.Errorf("%s ~ %s = %v, want %v", tc.pattern, tc.subject, got, tc.want)
		}
	}
	for _, bad := range []string{"a..b", ">.a", ""} {
		if _, err := parsePattern(bad); err == nil {
			t.Errorf("pattern %q accepted", bad)
		}
	}
}

// memInbox subscribes member name to everything and records
// "from-subject:data" lines.
func memInbox(t *testing.T, n *MemNetwork, name string) *[]string {
	t.Helper()
	var got []string
	if _, err := n.Join(name).Subscribe(">", func(subject string, data []byte) {
		got = append(got, subject+":"+string(data))
	}); err != nil {
		t.Fatal(err)
	}
	return &got
}

func TestMemNetworkCutsAndHeals(t *testing.T) {
	n := NewMemNetwork(MemConfig{Manual: true})
	a, b := memInbox(t, n, "a"), memInbox(t, n, "b")
	ta, tb := n.Join("a"), n.Join("b")
	send := func(tr *MemTransport, msg string) {
		if err := tr.Publish("m."+tr.Name(), []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	send(ta, "1")
	if len(*a)+len(*b) != 0 {
		t.Fatal("manual mode delivered before Deliver")
	}
	if got := n.Deliver(); got != 2 {
		t.Fatalf("delivered %d, want 2 (a reaches itself and b)", got)
	}
	n.CutOneWay("a", "b")
	send(ta, "2")
	send(tb, "3")
	n.Deliver()
	n.Cut("a", "b")
	send(tb, "4")
	n.Deliver()
	n.Heal("a", "b")
	send(ta, "5")
	send(tb, "6")
	n.DeliverReversed()
	if got, want := fmt.Sprint(*a), "[m.a:1 m.a:2 m.b:3 m.b:6 m.a:5]"; got != want {
		t.Errorf("a got %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(*b), "[m.a:1 m.b:3 m.b:4 m.b:6 m.a:5]"; got != want {
		t.Errorf("b got %s, want %s", got, want)
	}
}

func TestMemNetworkRequests(t *testing.T) {
	n := NewMemNetwork(MemConfig{})
	unsub, err := n.Join("b").Respond("ask.b", func(data []byte) []byte { return append([]byte("b says "), data...) })
	if err != nil {
		t.Fatal(err)
	}
	a := n.Join("a")
	ctx := context.Background()
	if got, err := a.Request(ctx, "ask.b", []byte("hi")); err != nil || string(got) != "b says hi" {
		t.Fatalf("%q, %v", got, err)
	}
	// A request needs both directions: the reply comes back.
	n.CutOneWay("b", "a")
	if _, err := a.Request(ctx, "ask.b", nil); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("reply over a cut link: %v", err)
	}
	n.HealAll()
	if _, err := a.Request(ctx, "ask.b", nil); err != nil {
		t.Fatal(err)
	}
	_ = unsub()
	if _, err := a.Request(ctx, "ask.b", nil); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("request after unsubscribe: %v", err)
	}
}

// A lossy link loses about its share, repeatably for a seed.
func TestMemNetworkLossIsSeeded(t *testing.T) {
	run := func(seed uint64) int {
		n := NewMemNetwork(MemConfig{Seed: seed})
		b := memInbox(t, n, "b")
		n.SetLoss("a", "b", 0.5)
		a := n.Join("a")
		for i := range 200 {
			_ = a.Publish("x", []byte(fmt.Sprint(i)))
		}
		return len(*b)
	}
	got := run(4)
	if got < 50 || got > 150 || got != run(4) {
		t.Fatalf("loss 0.5 over 200: %d delivered (again: %d)", got, run(4))
	}
}

// Which subscriptions a subject reaches is cached per subject: one that
// comes after a subject was delivered gets its later messages, one that
// goes gets none, and a responder that comes answers at once.
func TestMemNetworkFollowsSubscriptionChanges(t *testing.T) {
	n := NewMemNetwork(MemConfig{})
	a := n.Join("a")
	var got []string
	sub := func(member, pattern string) func() error {
		unsub, err := n.Join(member).Subscribe(pattern, func(subject string, _ []byte) { got = append(got, member+" "+subject) })
		if err != nil {
			t.Fatal(err)
		}
		return unsub
	}
	unsubB := sub("b", "d.*")
	_ = a.Publish("d.1", nil)
	sub("c", "d.1")
	_ = a.Publish("d.1", nil)
	_ = unsubB()
	_ = a.Publish("d.1", nil)
	_ = a.Publish("d.2", nil)
	want := []string{"b d.1", "b d.1", "c d.1", "c d.1"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("delivered %q, want %q", got, want)
	}
	ctx := context.Background()
	if _, err := a.Request(ctx, "ask.x", nil); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("request with no responder: %v", err)
	}
	if _, err := n.Join("x").Respond("ask.x", func([]byte) []byte { return []byte("x") }); err != nil {
		t.Fatal(err)
	}
	if r, err := a.Request(ctx, "ask.x", nil); err != nil || string(r) != "x" {
		t.Fatalf("request after the responder came: %q, %v", r, err)
	}
}
