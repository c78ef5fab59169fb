package httpapi

import (
	"fmt"
	"testing"

	"github.com/tally-dev/tally/crdt"
)

// A gathered union's sketch part survives its encoding, page for page.
func TestHLLPartRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 100, 20_000} {
		h := new(crdt.HLL)
		for i := range n {
			h.AddID(fmt.Sprint("id", i))
		}
		got, err := decodeHLL(appendHLL(nil, h))
		if err != nil {
			t.Fatalf("%d ids: %v", n, err)
		}
		if !got.Equal(h) {
			t.Fatalf("%d ids: the decoded sketch differs", n)
		}
	}
}

func FuzzDecodeHLLPart(f *testing.F) {
	h := new(crdt.HLL)
	for i := range 300 {
		h.AddID(fmt.Sprint("id", i))
	}
	f.Add(appendHLL(nil, h))
	f.Add([]byte{})
	f.Add([]byte{200, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeHLL(b)
		if err != nil {
			return
		}
		again, err := decodeHLL(appendHLL(nil, got))
		if err != nil || !again.Equal(got) {
			t.Fatalf("a decoded part does not survive its own encoding: %v", err)
		}
	})
}
