package sink

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func event(t *testing.T, log string, seq uint64, at time.Time) Event {
	t.Helper()
	e, err := ParseEvent(fmt.Appendf(nil, `{"seq":%d,"log":%q,"replica":"us-1","region":"us","type":"like","kind":"likes","key":"p","user":"u%d","p":1,"hlc":"x","at":%q}`,
		seq, log, seq, at.UTC().Format("2006-01-02T15:04:05.000Z")))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// A write cut short by a crash leaves half a line; the next process cuts
// it off before appending, finds the whole lines' events (delivered
// again) in the file, and writes only what is missing, each event into
// the file of its hour.
func TestFilesTornLineAndRedelivery(t *testing.T) {
	dir := t.TempDir()
	h8 := time.Date(2026, 11, 27, 8, 59, 59, 0, time.UTC)
	h9 := h8.Add(time.Second)
	fs, err := OpenFiles(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	first := []Event{event(t, "a", 1, h8), event(t, "a", 2, h8), event(t, "b", 1, h9)}
	if w, err := fs.Write(context.Background(), "us", first); err != nil || w.Added != 3 {
		t.Fatalf("write: %d %v", w.Added, err)
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	p8 := filepath.Join(dir, "us", "2026-11-27T08.jsonl")
	f, err := os.OpenFile(p8, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"seq":3,"log":"a","reg`); err != nil {
		t.Fatal(err)
	}
	f.Close()

	fs, err = OpenFiles(dir, 1) // one open file: h9's is closed and read again
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	again := append(first, event(t, "a", 3, h8), event(t, "b", 2, h9), event(t, "a", 1, h8))
	if w, err := fs.Write(context.Background(), "us", again); err != nil || w.Added != 2 {
		t.Fatalf("write again: %d added, %v; want 2 (a/3, b/2)", w.Added, err)
	}
	for path, want := range map[string][]string{
		p8: {"a/1", "a/2", "a/3"},
		filepath.Join(dir, "us", "2026-11-27T09.jsonl"): {"b/1", "b/2"},
	} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for line := range strings.Lines(string(b)) {
			e, err := ParseEvent([]byte(strings.TrimSuffix(line, "\n")))
			if err != nil || !strings.HasSuffix(line, "\n") {
				t.Fatalf("%s: line %q: %v", path, line, err)
			}
			got = append(got, fmt.Sprintf("%s/%d", e.Log, e.Seq))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s holds %v, want %v", path, got, want)
		}
	}
}

// spans agrees with a map on random adds.
func TestSpans(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var s spans
	m := map[uint64]bool{}
	for range 20000 {
		v := r.Uint64N(3000) + 1
		if got, want := s.add(v), !m[v]; got != want {
			t.Fatalf("add(%d) = %v, want %v", v, got, want)
		}
		m[v] = true
	}
	total := uint64(0)
	for i, sp := range s {
		if sp.lo > sp.hi || i > 0 && s[i-1].hi+1 >= sp.lo {
			t.Fatalf("spans not sorted, disjoint and apart at %d: %v", i, s[max(i-1, 0):i+1])
		}
		total += sp.hi - sp.lo + 1
	}
	if total != uint64(len(m)) {
		t.Fatalf("spans hold %d values, want %d", total, len(m))
	}
}
