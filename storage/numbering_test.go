package storage

import (
	"testing"
)

func TestUnnumberedQueueAndClaims(t *testing.T) {
	s := openTest(t, Config{Dir: t.TempDir()})
	t.Cleanup(func() { _ = s.Close() })
	root := s.Root()
	b := s.NewBatch()
	for i, u := range []string{"u1", "u2", "u3"} {
		b.PutUnnumbered(uint64(10+i), CountedLike{Item: "post", User: u, AtMs: int64(100 + i)})
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
	if err := s.Unnumbered(func(ord uint64, l CountedLike) bool {
		ords, users = append(ords, ord), append(users, l.User)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(ords) != 3 || ords[0] != 10 || ords[2] != 12 || users[1] != "u2" {
		t.Fatalf("queue %v %v", ords, users)
	}
	if last, ok, err := s.LastUnnumbered(); err != nil || !ok || last != 12 {
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
		b.DeleteUnnumbered(ord)
	}
	b.DeleteClaim("likes", 20)
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if _, ok, err := s.LastUnnumbered(); err != nil || ok {
		t.Fatalf("queue not empty after deletes: %v %v", ok, err)
	}
	claims = nil
	_ = s.Claims("likes", func(n uint64, _ CountedLike) bool { claims = append(claims, n); return true })
	if len(claims) != 1 || claims[0] != 1000 {
		t.Fatalf("claims %v after delete", claims)
	}
	// Numbering keys are local: they never enter the anti-entropy digests.
	if s.Root() != root {
		t.Fatalf("root digest %x, was %x: numbering keys leaked into the buckets", s.Root(), root)
	}
}

func FuzzDecodeCountedLike(f *testing.F) {
	f.Add(AppendCountedLike(nil, CountedLike{Item: "post", User: "alice", AtMs: 1700000000000}))
	f.Add([]byte{0x80, 0x00, 'a', '/', 'b'})
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
