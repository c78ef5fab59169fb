package storage

import (
	"fmt"
	"testing"
)

func TestUnnumberedQueueAndClaims(t *testing.T) {
	s := openTest(t, Config{Dir: t.TempDir()})
	t.Cleanup(func() { _ = s.Close() })
	root := s.Root()
	b := s.NewBatch()
	for i, u := range []string{"u1", "u2", "u3"} {
		b.PutUnnumbered("likes", uint64(10+i), CountedLike{Item: "post", User: u, AtMs: int64(100 + i)})
	}
	b.PutClaim("likes", 1000, CountedLike{Item: "post", User: "u9", AtMs: 7})
	b.PutClaim("likes", 20, CountedLike{Item: "p2", User: "u8", AtMs: 8})
	b.PutClaim("other", 5, CountedLike{Item: "p3", User: "u7", AtMs: 9})
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()

	var ords []uint64
	var users []string
	if err := s.Unnumbered("likes", func(ord uint64, l CountedLike) bool {
		ords, users = append(ords, ord), append(users, l.User)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(ords) != 3 || ords[0] != 10 || ords[2] != 12 || users[1] != "u2" {
		t.Fatalf("queue %v %v", ords, users)
	}
	if last, ok, err := s.LastUnnumbered("likes"); err != nil || !ok || last != 12 {
		t.Fatalf("last %d %v %v", last, ok, err)
	}
	var claims []uint64
	if err := s.Claims("likes", func(n uint64, l CountedLike) bool {
		claims = append(claims, n)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(claims) != 2 || claims[0] != 20 || claims[1] != 1000 {
		t.Fatalf("claims %v, want [20 1000] (numeric order, one sequence)", claims)
	}

	b = s.NewBatch()
	for ord := uint64(10); ord <= 12; ord++ {
		b.DeleteUnnumbered("likes", ord)
	}
	b.DeleteClaim("likes", 20)
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if _, ok, err := s.LastUnnumbered("likes"); err != nil || ok {
		t.Fatalf("queue not empty after deletes: %v %v", ok, err)
	}
	claims = nil
	_ = s.Claims("likes", func(n uint64, _ CountedLike) bool { claims = append(claims, n); return true })
	if len(claims) != 1 || claims[0] != 1000 {
		t.Fatalf("claims %v after delete", claims)
	}
	// Numbering keys are local: they never enter the anti-entropy digests.
	if s.Root() != root {
		t.Fatalf("root digest %x, was %x: numbering keys leaked into the segments", s.Root(), root)
	}
}

func FuzzDecodeCountedLike(f *testing.F) {
	f.Add(AppendCountedLike(nil, CountedLike{Item: "post", User: "alice", AtMs: 1700000000000}))
	f.Add([]byte{0x80, 0x00, 'a', '/', 'b'})
	f.Add(AppendCountedLike(nil, CountedLike{Item: "search:q", AtMs: 5, Units: 1000}))
	f.Add([]byte{0x05, 'k', '/', '/', '0', '1'})
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := DecodeCountedLike(b)
		if err != nil {
			return
		}
		if got := AppendCountedLike(nil, l); string(got) != string(b) {
			t.Fatalf("not canonical: %x re-encodes as %x", b, got)
		}
	})
}

// An increment that took many numbers is found from any of them, and the
// numbers nothing took are not; a queue left by the one-sequence version
// moves into a sequence's queue in order.
func TestNumberedRunsAndLegacyQueue(t *testing.T) {
	s := openTest(t, Config{Dir: t.TempDir()})
	t.Cleanup(func() { _ = s.Close() })
	b := s.NewBatch()
	b.PutNumbered("q", 10, CountedLike{Item: "search:a", AtMs: 1, Units: 5}) // 10..14
	b.PutNumbered("q", 15, CountedLike{Item: "search:b", AtMs: 2})           // 15
	b.PutNumbered("q", 20, CountedLike{Item: "search:c", AtMs: 3, Units: 2}) // 20..21
	b.PutNumbered("r", 16, CountedLike{Item: "other", User: "u", AtMs: 4})
	for ord := uint64(3); ord < 6; ord++ {
		_ = b.b.Set(hex16([]byte{prefixUnnumbered, '/'}, ord), AppendCountedLike(nil, CountedLike{Item: "post", User: fmt.Sprint("u", ord)}), nil)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	for _, c := range []struct {
		n     uint64
		item  string
		start uint64
	}{{9, "", 0}, {10, "search:a", 10}, {14, "search:a", 10}, {15, "search:b", 15}, {16, "", 0}, {19, "", 0}, {21, "search:c", 20}, {22, "", 0}, {1<<64 - 1, "", 0}} {
		l, start, ok, err := s.Numbered("q", c.n)
		if err != nil {
			t.Fatal(err)
		}
		if ok != (c.item != "") || l.Item != c.item || start != c.start {
			t.Errorf("Numbered(%d) = %+v from %d, %v; want %q from %d", c.n, l, start, ok, c.item, c.start)
		}
	}
	if n, err := s.MigrateUnnumbered("likes"); err != nil || n != 3 {
		t.Fatalf("migrated %d, %v; want 3", n, err)
	}
	var users []string
	_ = s.Unnumbered("likes", func(ord uint64, l CountedLike) bool { users = append(users, fmt.Sprint(ord, l.User)); return true })
	if fmt.Sprint(users) != "[3u3 4u4 5u5]" {
		t.Fatalf("migrated queue %v", users)
	}
	if n, err := s.MigrateUnnumbered("likes"); err != nil || n != 0 {
		t.Fatalf("second migration moved %d, %v", n, err)
	}
}
