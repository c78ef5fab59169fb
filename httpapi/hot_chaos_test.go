//go:build chaos

package httpapi

import "testing"

// The negative control of split items: with the chaos build's bug
// split-user-two-parts an unlike goes to another part than the like, finds
// nothing to undo, and the five unlikes leave the count at 30, which the
// exact count (25) catches.
func TestHotItemBugSplitTwoParts(t *testing.T) {
	if n := likeUnlike(t, hotEnv(t, true)); n != 30 {
		t.Fatalf("with the bug, viral:1 counts %d, want the wrong 30", n)
	}
	if n := likeUnlike(t, hotEnv(t, false)); n != 25 {
		t.Fatalf("without the bug, viral:1 counts %d, want 25", n)
	}
}
