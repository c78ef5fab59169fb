package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/httpapi"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

// newServer serves a real replica on a real Pebble directory, with its
// like lists and event log on and the write token "w", configured further
// by opts.
func newServer(t *testing.T, opts ...func(*httpapi.Config)) *httpapi.Server {
	t.Helper()
	st, err := storage.Open(storage.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	reg := prometheus.NewRegistry()
	rep, err := region.New(region.Config{Region: "us", Replica: "us-1", Store: st, Registerer: reg, LikeLists: true, EventLog: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rep.Close() })
	cfg := httpapi.Config{Replica: rep, Registry: reg, Logger: hclog.NewNullLogger(), Version: "test", WriteToken: "w"}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := httpapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// newClient serves a real replica (newServer) and returns a client of it
// that sends token.
func newClient(t *testing.T, token string, opts ...func(*httpapi.Config)) *client.Client {
	t.Helper()
	ts := httptest.NewServer(newServer(t, opts...))
	t.Cleanup(ts.Close)
	c, err := client.New(client.Config{BaseURL: ts.URL, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClientAgainstAReplica(t *testing.T) {
	c := newClient(t, "w")
	ctx := context.Background()

	if l, err := c.Like(ctx, "post1", "alice"); err != nil || !l.Liked || !l.Changed || l.Count != 1 {
		t.Fatalf("like: %+v %v", l, err)
	}
	if l, err := c.Like(ctx, "post1", "alice"); err != nil || l.Changed || l.Count != 1 {
		t.Fatalf("like again: %+v %v", l, err)
	}
	if _, err := c.Like(ctx, "post1", "bob"); err != nil {
		t.Fatal(err)
	}
	if l, err := c.Unlike(ctx, "post1", "bob"); err != nil || l.Liked || l.Count != 1 {
		t.Fatalf("unlike: %+v %v", l, err)
	}
	if r, err := c.Likes(ctx, "post1"); err != nil || r.Count != 1 || r.Approx || r.Replicas["us-1"].P != 2 || r.Replicas["us-1"].N != 1 {
		t.Fatalf("likes: %+v %v", r, err)
	}
	if r, err := c.Liked(ctx, "post1", "alice"); err != nil || !r.Liked {
		t.Fatalf("liked: %+v %v", r, err)
	}

	if b, err := c.Block(ctx, "alice", true); err != nil || !b.Blocked || !b.Changed || b.Replica != "us-1" || b.HLC == "" {
		t.Fatalf("block: %+v %v", b, err)
	}
	if _, err := c.Like(ctx, "post2", "alice"); client.Code(err) != "user_blocked" || client.StatusCode(err) != 403 {
		t.Fatalf("a blocked user's like: %v", err)
	}
	if r, err := c.Likes(ctx, "post1"); err != nil || r.Count != 0 {
		t.Fatalf("likes with alice blocked: %+v %v", r, err)
	}
	if b, err := c.Block(ctx, "alice", false); err != nil || b.Blocked || !b.Changed {
		t.Fatalf("unblock: %+v %v", b, err)
	}
	if b, err := c.BlockOf(ctx, "alice"); err != nil || b.Blocked || b.Replica != "us-1" {
		t.Fatalf("block state: %+v %v", b, err)
	}
	if r, err := c.Incr(ctx, "views", 5, client.IncrOptions{IdempotencyKey: "req-1"}); err != nil || r.Value != 5 || r.Duplicate {
		t.Fatalf("incr: %+v %v", r, err)
	}
	if r, err := c.Incr(ctx, "views", 5, client.IncrOptions{IdempotencyKey: "req-1"}); err != nil || r.Value != 5 || !r.Duplicate {
		t.Fatalf("retried incr: %+v %v", r, err)
	}
	if r, err := c.Counter(ctx, "views"); err != nil || r.Value != 5 {
		t.Fatalf("counter: %+v %v", r, err)
	}

	res, err := c.Events(ctx, []client.Event{
		{Type: client.EventIncr, Key: "views", By: 2},
		{Type: client.EventLike, Item: "post1", User: "carol"},
		{Type: client.EventLike, Item: "bad id", User: "x"},
	})
	if err != nil || res.Applied != 2 || res.Rejected != 1 || len(res.Results) != 3 ||
		res.Results[0].Value != 7 || !res.Results[1].Changed || res.Results[2].OK || res.Results[2].Code != "bad_id" {
		t.Fatalf("events: %+v %v", res, err)
	}

	if st, err := c.Status(ctx); err != nil || st.Replica != "us-1" || st.Replication != "off" || !st.Accepting {
		t.Fatalf("status: %+v %v", st, err)
	}
	if cv, err := c.Convergence(ctx); err != nil || !cv.Converged || cv.Replica != "us-1" {
		t.Fatalf("convergence: %+v %v", cv, err)
	}
	if err := c.Ready(ctx); err != nil {
		t.Fatalf("ready: %v", err)
	}
	if v, err := c.Metric(ctx, "tally_http_requests_in_flight"); err != nil || v < 0 {
		t.Fatalf("metric: %v %v", v, err)
	}
}

// Every non-2xx answer is an *Error with tally's status and code.
func TestClientErrors(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, "")
	_, err := c.Like(ctx, "post1", "alice") // no write token
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusUnauthorized || e.Code != "unauthorized" {
		t.Fatalf("like without token: %v", err)
	}
	if _, err := c.Likes(ctx, "bad id"); client.StatusCode(err) != http.StatusBadRequest || client.Code(err) != "bad_id" {
		t.Fatalf("bad id: %v", err)
	}
	if _, err := c.Links(ctx); client.Code(err) != "not_found" {
		t.Fatalf("links on a replica outside a local deployment: %v", err)
	}
	if _, err := c.Milestones(ctx, 5); client.StatusCode(err) != http.StatusNotFound {
		t.Fatalf("milestones without numbering: %v", err)
	}
	if _, err := client.New(client.Config{BaseURL: "localhost:8081"}); err == nil {
		t.Fatal("a base URL without a scheme was accepted")
	}
}
