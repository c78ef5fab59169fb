package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tally-dev/tally/crdt"
)

// openTest opens a store or fails the test.
func openTest(t testing.TB, cfg Config) *Store {
	t.Helper()
	s, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open(%+v): %v", cfg, err)
	}
	return s
}

// commit runs fill on a fresh batch and commits it.
func commit(t testing.TB, s *Store, fill func(b *Batch)) {
	t.Helper()
	b := s.NewBatch()
	defer b.Close()
	fill(b)
	if err := b.Commit(); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

func mustVector(t testing.TB, s *Store, k Kind, item string) crdt.Vector {
	t.Helper()
	v, err := s.Vector(k, item)
	if err != nil {
		t.Fatalf("Vector(%s, %q): %v", k, item, err)
	}
	return v
}

func wantVector(t testing.TB, s *Store, k Kind, item string, want crdt.Vector) {
	t.Helper()
	got := mustVector(t, s, k, item)
	if !got.Equal(want) {
		t.Errorf("Vector(%s, %q) = %+v, want %+v", k, item, got, want)
	}
}

func sampleRecord() *crdt.LikeRecord {
	return &crdt.LikeRecord{
		Liked:  true,
		HLC:    crdt.MakeHLC(1_700_000_000_123, 7),
		Origin: "eu-1",
		Contrib: crdt.Vector{
			{Replica: "eu-1", PN: crdt.PN{P: 2, N: 1}},
			{Replica: "us-1", PN: crdt.PN{P: 1}},
		},
	}
}

// keyedSample is a keyed record: an increment by amount applied at eu-1.
func keyedSample(amount, ms int64) *crdt.KeyedRecord {
	r := &crdt.KeyedRecord{}
	r.ApplyCounted("eu-1", amount, amount, crdt.MakeHLC(ms, 0))
	return r
}

// fillAll writes one of everything the store knows about.
func fillAll(b *Batch) {
	b.PutVectorEntry(Likes, "post:1", "us-1", crdt.PN{}, crdt.PN{P: 5, N: 1})
	b.PutVectorEntry(Likes, "post:1", "eu-1", crdt.PN{}, crdt.PN{P: 3})
	b.PutVectorEntry(Counters, "post:1", "eu-1", crdt.PN{}, crdt.PN{P: 100, N: 58})
	b.PutLikeRecord("post:1", "alice", nil, sampleRecord())
	b.PutLikeRecord("post:1", "bob", nil, &crdt.LikeRecord{}) // zero record
	b.SetMarker(Likes, "post:1", "alice", true)
	b.PutKeyedRecord("views", "req-1", nil, keyedSample(-42, 1_700_000_000_000))
	b.PutMeta("replica", []byte("eu-1"))
	b.PutMeta("bin", []byte{0, 1, 0, 0xff})
}

// checkAll asserts that everything fillAll wrote reads back.
func checkAll(t *testing.T, s *Store) {
	t.Helper()
	wantVector(t, s, Likes, "post:1", crdt.Vector{
		{Replica: "eu-1", PN: crdt.PN{P: 3}},
		{Replica: "us-1", PN: crdt.PN{P: 5, N: 1}},
	})
	wantVector(t, s, Counters, "post:1", crdt.Vector{{Replica: "eu-1", PN: crdt.PN{P: 100, N: 58}}})

	r, ok, err := s.LikeRecord("post:1", "alice")
	if err != nil || !ok {
		t.Fatalf("LikeRecord(alice) = %v, %v, %v", r, ok, err)
	}
	if !r.Equal(sampleRecord()) {
		t.Errorf("LikeRecord(alice) = %+v, want %+v", r, sampleRecord())
	}
	r, ok, err = s.LikeRecord("post:1", "bob")
	if err != nil || !ok || !r.Equal(&crdt.LikeRecord{}) {
		t.Errorf("LikeRecord(bob) = %+v, %v, %v; want zero record", r, ok, err)
	}

	kr, ok, err := s.KeyedRecord("views", "req-1")
	if err != nil || !ok || !kr.Equal(keyedSample(-42, 1_700_000_000_000)) {
		t.Errorf("KeyedRecord = %+v, %v, %v", kr, ok, err)
	}
	if _, ok, err := s.LikeRecord("views", "req-1"); ok || err != nil {
		t.Errorf("a keyed record read as a like record: %v, %v", ok, err)
	}

	m, ok, err := s.Meta("replica")
	if err != nil || !ok || string(m) != "eu-1" {
		t.Errorf("Meta(replica) = %q, %v, %v", m, ok, err)
	}
	m, ok, err = s.Meta("bin")
	if err != nil || !ok || string(m) != "\x00\x01\x00\xff" {
		t.Errorf("Meta(bin) = %q, %v, %v", m, ok, err)
	}

	if got := collectMarkers(t, s); !reflect.DeepEqual(got, []string{"post:1/alice"}) {
		t.Errorf("Markers = %q, want [post:1/alice]", got)
	}
}

func collectMarkers(t testing.TB, s *Store) []string {
	t.Helper()
	var got []string
	if err := s.Markers(func(_ Kind, item, user string) bool {
		got = append(got, item+"/"+user)
		return true
	}); err != nil {
		t.Fatalf("Markers: %v", err)
	}
	return got
}

func TestRoundTrip(t *testing.T) {
	s := openTest(t, Config{Dir: t.TempDir()})
	defer s.Close()
	if s.Durability() != DurabilitySync {
		t.Errorf("default Durability = %v, want fsync", s.Durability())
	}
	commit(t, s, fillAll)
	checkAll(t, s)
}

func TestMissingReads(t *testing.T) {
	s := openTest(t, Config{Dir: t.TempDir()})
	defer s.Close()
	commit(t, s, fillAll)

	if v := mustVector(t, s, Likes, "nope"); len(v) != 0 {
		t.Errorf("Vector(nope) = %+v, want empty", v)
	}
	// Same item, other kind: "v/c/post:9" has nothing.
	if v := mustVector(t, s, Counters, "post:9"); len(v) != 0 {
		t.Errorf("Vector(counters, post:9) = %+v, want empty", v)
	}
	if r, ok, err := s.LikeRecord("post:1", "carol"); err != nil || ok || r != nil {
		t.Errorf("LikeRecord(carol) = %v, %v, %v; want nil, false, nil", r, ok, err)
	}
	// A record key of another item with the same user must not leak.
	if _, ok, err := s.LikeRecord("post:2", "alice"); err != nil || ok {
		t.Errorf("LikeRecord(post:2, alice) = %v, %v; want absent", ok, err)
	}
	if v, ok, err := s.KeyedRecord("views", "req-2"); err != nil || ok || v != nil {
		t.Errorf("KeyedRecord(req-2) = %+v, %v, %v; want absent", v, ok, err)
	}
	if v, ok, err := s.KeyedRecord("post:1", "alice"); err != nil || ok || v != nil {
		t.Errorf("a like record read as a keyed record: %+v, %v, %v", v, ok, err)
	}
	if v, ok, err := s.Meta("nope"); err != nil || ok || v != nil {
		t.Errorf("Meta(nope) = %q, %v, %v; want absent", v, ok, err)
	}
}

func TestOverwriteAndDelete(t *testing.T) {
	s := openTest(t, Config{Dir: t.TempDir()})
	defer s.Close()
	commit(t, s, fillAll)
	commit(t, s, func(b *Batch) {
		b.PutVectorEntry(Likes, "post:1", "us-1", crdt.PN{P: 5, N: 1}, crdt.PN{P: 9, N: 2})
		r := sampleRecord()
		r.Liked = false
		r.HLC++
		b.PutLikeRecord("post:1", "alice", sampleRecord(), r)
		b.SetMarker(Likes, "post:1", "alice", false)
		b.SetMarker(Likes, "post:1", "never-set", false) // clearing an absent marker is fine
		b.PutKeyedRecord("views", "req-1", keyedSample(-42, 1_700_000_000_000), keyedSample(1, 2))
		b.PutMeta("replica", []byte{})
	})
	wantVector(t, s, Likes, "post:1", crdt.Vector{
		{Replica: "eu-1", PN: crdt.PN{P: 3}},
		{Replica: "us-1", PN: crdt.PN{P: 9, N: 2}},
	})
	r, _, err := s.LikeRecord("post:1", "alice")
	if err != nil || r.Liked || r.HLC != sampleRecord().HLC+1 {
		t.Errorf("LikeRecord after overwrite = %+v, %v", r, err)
	}
	if got := collectMarkers(t, s); len(got) != 0 {
		t.Errorf("Markers after clear = %q, want none", got)
	}
	if v, _, _ := s.KeyedRecord("views", "req-1"); !v.Equal(keyedSample(1, 2)) {
		t.Errorf("KeyedRecord after overwrite = %+v", v)
	}
	if m, ok, err := s.Meta("replica"); err != nil || !ok || len(m) != 0 {
		t.Errorf("Meta(replica) = %q, %v, %v; want present and empty", m, ok, err)
	}
}

func TestBatchNotCommittedIsInvisible(t *testing.T) {
	s := openTest(t, Config{Dir: t.TempDir()})
	defer s.Close()
	b := s.NewBatch()
	if b.Len() != 0 {
		t.Fatalf("empty batch Len = %d", b.Len())
	}
	fillAll(b)
	if b.Len() != 10 { // the keyed record also writes its expiry entry
		t.Errorf("Len = %d, want 10", b.Len())
	}
	b.Close()
	if v := mustVector(t, s, Likes, "post:1"); len(v) != 0 {
		t.Errorf("uncommitted vector visible: %+v", v)
	}
	if _, ok, _ := s.Meta("replica"); ok {
		t.Error("uncommitted meta visible")
	}
	if got := collectMarkers(t, s); len(got) != 0 {
		t.Errorf("uncommitted markers visible: %q", got)
	}
}

// The buffer a Batch reuses for encoding must not alias values already added.
func TestBatchBufferReuse(t *testing.T) {
	s := openTest(t, Config{Dir: t.TempDir()})
	defer s.Close()
	commit(t, s, func(b *Batch) {
		for i := range 50 {
			b.PutVectorEntry(Likes, "x", fmt.Sprintf("r%03d", i), crdt.PN{}, crdt.PN{P: uint64(i + 1), N: uint64(i)})
		}
	})
	v := mustVector(t, s, Likes, "x")
	if len(v) != 50 {
		t.Fatalf("len = %d, want 50", len(v))
	}
	for _, e := range v {
		i, err := strconv.Atoi(strings.TrimPrefix(e.Replica, "r"))
		if err != nil {
			t.Fatal(err)
		}
		if e.PN != (crdt.PN{P: uint64(i + 1), N: uint64(i)}) {
			t.Errorf("%s = %+v", e.Replica, e.PN)
		}
	}
}

// Vector("a") must see every replica of item "a" and nothing of items whose
// names start with "a" (in bytes, '.' and '-' sort before the '/' separator,
// ':' and 'b' after it) or of the same item under the other kind.
func TestVectorPrefixIsolation(t *testing.T) {
	s := openTest(t, Config{Dir: t.TempDir()})
	defer s.Close()
	items := map[string]crdt.Vector{
		"a": {
			{Replica: "eu-1", PN: crdt.PN{P: 1}},
			{Replica: "eu-10", PN: crdt.PN{P: 10, N: 3}},
			{Replica: "us-1", PN: crdt.PN{P: 7, N: 7}},
		},
		"a.b": {{Replica: "eu-1", PN: crdt.PN{P: 1000}}},
		"ab":  {{Replica: "eu-1", PN: crdt.PN{P: 2000}}, {Replica: "zz", PN: crdt.PN{P: 1}}},
		"a-":  {{Replica: "us-1", PN: crdt.PN{P: 3000}}},
		"a:":  {{Replica: "us-1", PN: crdt.PN{P: 4000}}},
		"A":   {{Replica: "us-1", PN: crdt.PN{P: 5000}}},
		"":    nil,
	}
	// Write in several batches and in reverse replica order so that the read
	// really assembles entries rather than echoing one write.
	for item, v := range items {
		for i := len(v) - 1; i >= 0; i-- {
			commit(t, s, func(b *Batch) { b.PutVectorEntry(Likes, item, v[i].Replica, crdt.PN{}, v[i].PN) })
		}
	}
	commit(t, s, func(b *Batch) {
		b.PutVectorEntry(Counters, "a", "eu-1", crdt.PN{}, crdt.PN{P: 99})
		b.PutLikeRecord("a", "eu-1", nil, sampleRecord()) // a record key, not a vector key
	})
	for item, want := range items {
		if item == "" {
			continue
		}
		wantVector(t, s, Likes, item, want)
	}
	wantVector(t, s, Counters, "a", crdt.Vector{{Replica: "eu-1", PN: crdt.PN{P: 99}}})
	if got := mustVector(t, s, Likes, "a").Value(); got != 1+7+0 {
		t.Errorf("Value(a) = %d, want 8", got)
	}
}

func TestMarkers(t *testing.T) {
	s := openTest(t, Config{Dir: t.TempDir()})
	defer s.Close()
	commit(t, s, func(b *Batch) {
		b.SetMarker(Likes, "b", "u2", true)
		b.SetMarker(Likes, "a", "u1", true)
		b.SetMarker(Likes, "a.b", "u1", true)
		b.SetMarker(Likes, "b", "u1", true)
		b.SetMarker(Likes, "c", "u9", true)
		// Neighbouring key families must not show up as markers.
		b.PutLikeRecord("a", "u0", nil, sampleRecord())
		b.PutMeta("x", []byte("y"))
		b.PutIdempotency("a", "u1", IdemValue{Value: 1})
	})
	commit(t, s, func(b *Batch) { b.SetMarker(Likes, "c", "u9", false) })

	// Key order: '.' sorts before '/', so "x/a.b/..." comes before "x/a/...".
	want := []string{"a.b/u1", "a/u1", "b/u1", "b/u2"}
	if got := collectMarkers(t, s); !reflect.DeepEqual(got, want) {
		t.Errorf("Markers = %q, want %q", got, want)
	}

	// fn returning false stops the scan.
	var got []string
	if err := s.Markers(func(_ Kind, item, user string) bool {
		got = append(got, item+"/"+user)
		return len(got) < 2
	}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want[:2]) {
		t.Errorf("Markers with early stop = %q, want %q", got, want[:2])
	}

	// An empty store has no markers.
	s2 := openTest(t, Config{Dir: t.TempDir()})
	defer s2.Close()
	if got := collectMarkers(t, s2); len(got) != 0 {
		t.Errorf("empty store markers = %q", got)
	}
}

func TestMeta(t *testing.T) {
	s := openTest(t, Config{Dir: t.TempDir()})
	defer s.Close()
	big := []byte(strings.Repeat("0123456789", 10_000))
	commit(t, s, func(b *Batch) {
		b.PutMeta("replica", []byte("eu-1"))
		b.PutMeta("replica.old", []byte("stale"))
		b.PutMeta("big", big)
	})
	for name, want := range map[string]string{"replica": "eu-1", "replica.old": "stale", "big": string(big)} {
		got, ok, err := s.Meta(name)
		if err != nil || !ok || string(got) != want {
			t.Errorf("Meta(%q) = %.20q, %v, %v", name, got, ok, err)
		}
	}
	// The returned slice is a copy: scribbling on it changes nothing.
	got, _, _ := s.Meta("replica")
	copy(got, "XXXX")
	if again, _, _ := s.Meta("replica"); string(again) != "eu-1" {
		t.Errorf("Meta after mutating returned slice = %q", again)
	}
	if _, ok, _ := s.Meta("repl"); ok {
		t.Error("Meta(repl) found a prefix of another name")
	}
}

func TestReopenKeepsEverything(t *testing.T) {
	for _, d := range []Durability{DurabilitySync, DurabilityNone} {
		t.Run(d.String(), func(t *testing.T) {
			dir := t.TempDir()
			s := openTest(t, Config{Dir: dir, Durability: d})
			commit(t, s, fillAll)
			commit(t, s, func(b *Batch) {
				b.PutVectorEntry(Likes, "post:1", "us-1", crdt.PN{P: 5, N: 1}, crdt.PN{P: 6, N: 1})
				b.PutVectorEntry(Likes, "post:1", "us-1", crdt.PN{P: 6, N: 1}, crdt.PN{P: 5, N: 1})
			})
			root := s.Root()
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			s = openTest(t, Config{Dir: dir})
			defer s.Close()
			checkAll(t, s)
			// The digests kept commit by commit equal the ones a reopened
			// store computes by scanning.
			if got := s.Root(); got != root {
				t.Errorf("digest root after reopen = %x, before close %x", got, root)
			}

			// And it keeps accepting writes after the reopen.
			commit(t, s, func(b *Batch) { b.PutMeta("after", []byte("reopen")) })
			if m, ok, _ := s.Meta("after"); !ok || string(m) != "reopen" {
				t.Errorf("Meta(after) = %q, %v", m, ok)
			}
		})
	}
}

func TestSyncOnNoneStore(t *testing.T) {
	s := openTest(t, Config{Dir: t.TempDir(), Durability: DurabilityNone})
	defer s.Close()
	if s.Durability() != DurabilityNone {
		t.Errorf("Durability = %v", s.Durability())
	}
	commit(t, s, fillAll)
	if err := s.Sync(); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	checkAll(t, s)
}

// Corrupt values surface as errors wrapping crdt.ErrCorrupt, never as zero
// values.
func TestCorruptValues(t *testing.T) {
	s := openTest(t, Config{Dir: t.TempDir()})
	defer s.Close()
	commit(t, s, func(b *Batch) {
		// Bypass the typed setters to store garbage.
		_ = b.b.Set(vectorEntryKey(Likes, "bad", "eu-1"), []byte{9, 9}, nil)
		b.s.vfilter.addVector(Likes, "bad") // as PutVectorEntry does
		_ = b.b.Set(recordKey("bad", "u"), []byte{1}, nil)
		b.s.filter.add("bad", "u") // as PutLikeRecord does
		_ = b.b.Set(appendKeyedKey(nil, "bad", "k"), []byte{1, 2}, nil)
		b.s.filter.add("bad", "k") // as PutKeyedRecord does
	})
	if _, err := s.Vector(Likes, "bad"); !errors.Is(err, crdt.ErrCorrupt) || !strings.Contains(err.Error(), "eu-1") {
		t.Errorf("Vector(bad) err = %v, want ErrCorrupt naming the replica", err)
	}
	if r, ok, err := s.LikeRecord("bad", "u"); !errors.Is(err, crdt.ErrCorrupt) || ok || r != nil {
		t.Errorf("LikeRecord(bad) = %v, %v, %v; want ErrCorrupt", r, ok, err)
	}
	if v, ok, err := s.KeyedRecord("bad", "k"); !errors.Is(err, crdt.ErrCorrupt) || ok || v != nil {
		t.Errorf("KeyedRecord(bad) = %v, %v, %v; want ErrCorrupt", v, ok, err)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{Dir: "x"}).Validate(); err != nil {
		t.Errorf("minimal config: %v", err)
	}
	def := DefaultConfig()
	def.Dir = "x"
	if err := def.Validate(); err != nil {
		t.Errorf("DefaultConfig: %v", err)
	}
	if def.CacheBytes <= 0 || def.MemTableBytes == 0 || def.Durability != DurabilitySync {
		t.Errorf("DefaultConfig = %+v", def)
	}

	bad := Config{Durability: Durability(7), CacheBytes: -1, WALMinSyncInterval: -time.Second}
	err := bad.Validate()
	if err == nil {
		t.Fatal("Validate accepted a config with four problems")
	}
	for _, want := range []string{"Dir is required", "unknown durability 7", "CacheBytes -1", "WALMinSyncInterval -1s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error %q lacks %q", err, want)
		}
	}
	if j, ok := err.(interface{ Unwrap() []error }); !ok || len(j.Unwrap()) != 4 {
		t.Errorf("Validate returned %T %q, want 4 joined errors", err, err)
	}

	// Open validates too and creates nothing.
	dir := filepath.Join(t.TempDir(), "db")
	bad.Dir = dir
	if _, err := Open(bad); err == nil || strings.Contains(err.Error(), "Dir is required") || !strings.Contains(err.Error(), "CacheBytes") {
		t.Errorf("Open(bad) err = %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open with bad config touched %s: %v", dir, err)
	}
}

func TestParseDurability(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Durability
	}{
		{"", DurabilitySync},
		{"fsync", DurabilitySync},
		{"sync", DurabilitySync},
		{"none", DurabilityNone},
		{"nosync", DurabilityNone},
	} {
		got, err := ParseDurability(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseDurability(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"always", "NONE", " fsync", "0"} {
		if d, err := ParseDurability(in); err == nil {
			t.Errorf("ParseDurability(%q) = %v, want error", in, d)
		} else if !strings.Contains(err.Error(), "\""+in+"\"") {
			t.Errorf("ParseDurability(%q) error %q does not quote the input", in, err)
		}
	}
	for _, d := range []Durability{DurabilitySync, DurabilityNone} {
		if got, err := ParseDurability(d.String()); err != nil || got != d {
			t.Errorf("ParseDurability(%v.String()) = %v, %v", d, got, err)
		}
	}
}

func TestOpenOnFileFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(path, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Open(Config{Dir: path})
	if err == nil {
		s.Close()
		t.Fatal("Open on a regular file succeeded")
	}
	if !strings.HasPrefix(err.Error(), "open store "+path+": ") {
		t.Errorf("error %q does not start with \"open store %s: \"", err, path)
	}
	if errors.Unwrap(err) == nil {
		t.Errorf("error %q is not wrapped", err)
	}
	if !errors.Is(err, syscall.ENOTDIR) && !errors.Is(err, syscall.EEXIST) {
		t.Errorf("error %q does not wrap the OS cause (ENOTDIR/EEXIST)", err)
	}
	// The file is untouched.
	if b, _ := os.ReadFile(path); string(b) != "hello" {
		t.Errorf("file now holds %q", b)
	}
}

func TestSecondOpenOfSameDirFails(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, Config{Dir: dir})
	defer s.Close()
	if s2, err := Open(Config{Dir: dir}); err == nil {
		s2.Close()
		t.Fatal("second Open of a dir in use succeeded")
	} else if !strings.Contains(err.Error(), dir) {
		t.Errorf("error %q does not mention %s", err, dir)
	}
}

func TestKindString(t *testing.T) {
	if Likes.String() != "likes" || Counters.String() != "counters" || Kind('z').String() != "unknown" {
		t.Error("Kind.String")
	}
	if !Likes.Valid() || !Counters.Valid() || Kind('v').Valid() {
		t.Error("Kind.Valid")
	}
}

func TestPrefixEnd(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"v/l/a/", "v/l/a0"},
		{"x/", "x0"},
		{"a\xff", "b"},
		{"a\xff\xff", "b"},
		{"\xff\xff", ""},
	} {
		got := prefixEnd([]byte(tc.in))
		if string(got) != tc.want || (tc.want == "" && got != nil) {
			t.Errorf("prefixEnd(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// prefixEnd must not modify its argument.
	p := []byte("ab\xff")
	prefixEnd(p)
	if string(p) != "ab\xff" {
		t.Errorf("prefixEnd modified its input: %q", p)
	}
}

// Operations after Close return ErrClosed (they used to panic inside Pebble
// with "pebble: closed", and a second Close panicked too).
func TestClosedStore(t *testing.T) {
	s := openTest(t, Config{Dir: t.TempDir()})
	commit(t, s, fillAll)
	pending := s.NewBatch()
	pending.PutMeta("late", []byte("x"))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	checks := map[string]func() error{
		"Close":  s.Close,
		"Sync":   s.Sync,
		"Vector": func() error { _, err := s.Vector(Likes, "post:1"); return err },
		"LikeRecord": func() error {
			_, _, err := s.LikeRecord("post:1", "alice")
			return err
		},
		"KeyedRecord": func() error { _, _, err := s.KeyedRecord("views", "req-1"); return err },
		"Meta":        func() error { _, _, err := s.Meta("replica"); return err },
		"Markers":     func() error { return s.Markers(func(Kind, string, string) bool { return true }) },
		"Commit":      pending.Commit,
		"NewBatch.Commit": func() error {
			b := s.NewBatch()
			defer b.Close()
			b.PutMeta("x", nil)
			return b.Commit()
		},
	}
	for name, f := range checks {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s on a closed store panicked: %v", name, r)
				}
			}()
			if err := f(); !errors.Is(err, ErrClosed) {
				t.Errorf("%s on a closed store = %v, want ErrClosed", name, err)
			}
		}()
	}
	pending.Close()
}
