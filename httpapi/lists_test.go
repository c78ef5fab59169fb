package httpapi

import (
	"fmt"
	"github.com/tally-dev/tally/frontdoor"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A like's read says when and where it was accepted; liker and liked-item
// lists page by cursor in id order; a feed answers many items at once.
func TestLikeListsAndFeed(t *testing.T) {
	e := newEnv(t, envOpts{})
	before := time.Now().Add(-time.Second)
	for _, u := range []string{"carol", "alice", "dave", "bob", "erin"} {
		e.do("PUT", "/v1/likes/post1/"+u, "").ok(t)
	}
	e.do("PUT", "/v1/likes/post2/alice", "").ok(t)
	e.do("DELETE", "/v1/likes/post1/dave", "").ok(t)

	b := e.do("GET", "/v1/likes/post1/alice", "").ok(t)
	at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(b["at"]))
	if err != nil || at.Before(before) || at.After(time.Now().Add(time.Second)) || b["replica"] != "us-1" {
		t.Fatalf("like read %v: want its time and replica", b)
	}
	if b = e.do("GET", "/v1/likes/post1/dave", "").ok(t); b["liked"] != false || b["at"] == nil {
		t.Fatalf("unliked read %v: want liked false with the unlike's time", b)
	}
	if b = e.do("GET", "/v1/likes/post1/zed", "").ok(t); b["liked"] != false || b["at"] != nil || b["replica"] != nil {
		t.Fatalf("never liked %v: want no time", b)
	}

	var users []string
	cursor := ""
	for page := 0; ; page++ {
		path := "/v1/likers/post1?limit=2"
		if cursor != "" {
			path += "&after=" + cursor
		}
		b = e.do("GET", path, "").ok(t)
		for _, u := range b["users"].([]any) {
			users = append(users, u.(map[string]any)["id"].(string))
		}
		next, _ := b["next"].(string)
		if next == "" {
			break
		}
		if page > 5 {
			t.Fatal("pages never end")
		}
		cursor = next
	}
	if got := strings.Join(users, ","); got != "alice,bob,carol,erin" {
		t.Fatalf("likers %s, want alice,bob,carol,erin", got)
	}
	b = e.do("GET", "/v1/users/alice/likes", "").ok(t)
	if items := b["items"].([]any); len(items) != 2 || items[0].(map[string]any)["id"] != "post1" || b["next"] != nil {
		t.Fatalf("alice's likes %v", b)
	}
	if b = e.do("GET", "/v1/likers/nobody-likes-this", "").ok(t); len(b["users"].([]any)) != 0 {
		t.Fatalf("empty list %v: want users []", b)
	}

	b = e.do("GET", "/v1/feed?user=alice&items=post1,post2,post3", "").ok(t)
	if got := fmt.Sprint(b["items"]); got != "[map[count:4 item:post1 liked:true] map[count:1 item:post2 liked:true] map[count:0 item:post3 liked:false]]" {
		t.Fatalf("feed %s", got)
	}
	b = e.do("POST", "/v1/feed", `{"user":"dave","items":["post1","post2"]}`).ok(t)
	if got := fmt.Sprint(b["items"]); got != "[map[count:4 item:post1 liked:false] map[count:1 item:post2 liked:false]]" {
		t.Fatalf("POST feed %s", got)
	}

	for _, bad := range []struct{ method, path, body string }{
		{"GET", "/v1/likers/post1?limit=0", ""},
		{"GET", "/v1/likers/post1?limit=1001", ""},
		{"GET", "/v1/likers/post1?after=a%20b", ""},
		{"GET", "/v1/likers/post1?limit=2&limit=3", ""},
		{"GET", "/v1/feed?items=post1", ""},
		{"GET", "/v1/feed?user=alice", ""},
		{"GET", "/v1/feed?user=alice&items=post1,,post2", ""},
		{"GET", "/v1/feed?user=al%20ice&items=post1", ""},
		{"GET", "/v1/feed?user=alice&items=" + strings.Repeat("p,", 100) + "p", ""},
		{"POST", "/v1/feed", `{"user":"alice","items":[]}`},
		{"POST", "/v1/feed", `{"user":"alice","items":["p"],"extra":1}`},
		{"POST", "/v1/feed", ``},
	} {
		r := e.do(bad.method, bad.path, bad.body)
		if r.status != http.StatusBadRequest {
			t.Errorf("%s %s %s: %d %s, want 400", bad.method, bad.path, bad.body, r.status, r.body)
		}
	}
}

// With the lists off, their routes say so; likes and the feed still work.
func TestLikeListsOff(t *testing.T) {
	e := newEnv(t, envOpts{noLists: true})
	e.do("PUT", "/v1/likes/post1/alice", "").ok(t)
	e.do("GET", "/v1/likers/post1", "").isError(t, http.StatusNotFound, frontdoor.CodeNotFound)
	e.do("GET", "/v1/users/alice/likes", "").isError(t, http.StatusNotFound, frontdoor.CodeNotFound)
	if b := e.do("GET", "/v1/feed?user=alice&items=post1", "").ok(t); fmt.Sprint(b["items"]) != "[map[count:1 item:post1 liked:true]]" {
		t.Fatalf("feed %v", b)
	}
}
