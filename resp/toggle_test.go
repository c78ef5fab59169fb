package resp_test

import (
	"context"
	"testing"
)

// STOGGLE flips a like and answers the new state; with an idempotency
// key a retry flips once. HTTP reads the same state.
func TestToggle(t *testing.T) {
	n := startNode(t, nil)
	ctx := context.Background()
	c := client(t, n, 2, "")
	for i, want := range []int64{1, 0, 1} {
		if v, err := c.Do(ctx, "STOGGLE", "likes:post", "alice").Int64(); err != nil || v != want {
			t.Fatalf("STOGGLE #%d: %d %v, want %d", i, v, err, want)
		}
	}
	for range 3 {
		if v, err := c.Do(ctx, "stoggle", "likes:post", "alice", "tap-1").Int64(); err != nil || v != 0 {
			t.Fatalf("STOGGLE with a key: %d %v, want 0 every time", v, err)
		}
	}
	if v, err := c.SIsMember(ctx, "likes:post", "alice").Result(); err != nil || v {
		t.Fatalf("SISMEMBER after the toggles: %v %v", v, err)
	}
	if v, err := c.SCard(ctx, "likes:post").Result(); err != nil || v != 0 {
		t.Fatalf("SCARD: %d %v", v, err)
	}
	wantErr(t, c.Do(ctx, "STOGGLE", "likes:post").Err(), "ERR", "bad_request")
	wantErr(t, c.Do(ctx, "STOGGLE", "likes:post", "alice", "k", "extra").Err(), "ERR", "bad_request")
	wantErr(t, c.Do(ctx, "STOGGLE", "likes:post", "bad/user").Err(), "ERR", "bad_id")
	wantErr(t, c.Do(ctx, "STOGGLE", "likes:post", "alice", "bad/key").Err(), "ERR", "bad_id")
	wantErr(t, c.Do(ctx, "STOGGLE", "post", "alice").Err(), "ERR", "bad_id")
}
