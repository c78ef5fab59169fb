package storage

import (
	"fmt"
	"testing"

	"github.com/tally-dev/tally/crdt"
)

// TestKeyBytesAreFixed pins the exact bytes of every replicated and local
// key family, the anti-entropy placement of a few keys and a digest
// contribution. Stores on disk and peers of other versions hold these
// bytes: a rename or refactor must leave every line here unchanged.
// (Segment layout 2, where segments nest in shards, moved the "b<B>/" of
// every replicated key; Open migrates layout 1: TestMigrateSegments.)
func TestKeyBytesAreFixed(t *testing.T) {
	slot := crdt.Slot{Key: "video:1", Width: 60, Start: 1_700_000_040, Keep: 900}
	got := []string{
		string(vectorEntryKey(Likes, "video:1", "us-1")),
		string(vectorEntryKey(LikesWindows, slot.Name(), "us-1")),
		string(vectorPrefix(Counters, "hits")),
		string(recordKey("video:1", "alice")),
		string(appendKeyedKey(nil, "views", "req-1")),
		string(newRegisters[crdt.Block](prefixFlag, "flag").appendKey(nil, "alice")),
		string(newRegisters[crdt.TypeInfo](prefixType, "type").appendKey(nil, "video:live")),
		string(appendSketchPageKey(nil, UniquesWindows, slot.Name(), "us-1", 0x2a)),
		string(appendWindowExpiryKey(nil, WindowIndexMs(slot), CountersWindows, slot.Name())),
		string(appendExpiryKey(nil, 1_700_000_000_000, "views", "req-1")),
		string(segmentPrefix(4095)),
		fmt.Sprintf("%d %d %d %d", VectorSegment("video:1"), RecordSegment("video:1", "alice"), FlagSegment("alice"), TypeSegment("video:live")),
		fmt.Sprintf("%x", entryHash([]byte("b123/v/l/video:1/us-1"), []byte{1, 2, 3})),
	}
	want := []string{
		"bb01/v/l/video:1/us-1",
		"bb01/v/L/video:1#60.006553f128.900/us-1",
		"b21d/v/c/hits/",
		"bb02/r/video:1/alice",
		"bc28/k/views/req-1",
		"bffe/f/alice",
		"bffd/t/video:live",
		"bb01/h/U/video:1#60.006553f128.900/us-1/2a",
		"u/0000018bcff67f00/C/video:1#60.006553f128.900",
		"e/0000018bcfe56800/views/req-1",
		"bfff/",
		"2817 2818 4094 4093",
		"9128a59bcaf4b5a0",
	}
	if len(got) != len(want) {
		t.Fatalf("%d lines, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("line %d: %q, want %q", i, got[i], want[i])
		}
	}
}
