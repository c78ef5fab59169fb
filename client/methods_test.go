package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/httpapi"
	"github.com/tally-dev/tally/shard"
)

// Likes by the body routes with event times in both notations, the lists,
// the feed (a query, and a body past MaxFeedQuery items), the history and
// the block list.
func TestClientLikeRoutes(t *testing.T) {
	c := newClient(t, "w")
	ctx := context.Background()
	now := time.Now()

	if l, err := c.LikeAt(ctx, client.LikeRequest{Item: "vid", User: "u1", At: client.At(now.Add(-30 * time.Second))}); err != nil || !l.Changed || l.Count != 1 {
		t.Fatalf("like at: %+v %v", l, err)
	}
	if l, err := c.LikeAt(ctx, client.LikeRequest{Item: "vid", User: "u2", At: client.AtUnixMilli(now.Add(-4 * time.Minute).UnixMilli())}); err != nil || l.Count != 2 {
		t.Fatalf("like at unix ms: %+v %v", l, err)
	}
	if l, err := c.UnlikeAt(ctx, client.LikeRequest{Item: "vid", User: "u2"}); err != nil || l.Liked || !l.Changed || l.Count != 1 {
		t.Fatalf("unlike: %+v %v", l, err)
	}
	// u1's like 30 s ago is in the last minute; u2's, 4 min ago, is not.
	if w, err := c.LikesWindow(ctx, "vid", client.Range{Last: "60s"}); err != nil || w.Kind != "likes" || w.Value != 0 {
		t.Fatalf("likes window of the last minute (u1's like, u2's unlike now): %+v %v", w, err)
	}
	if w, err := c.LikesWindow(ctx, "vid", client.Range{From: now.Add(-time.Hour), To: now.Add(-time.Minute)}); err != nil || w.Value != 1 {
		t.Fatalf("likes window from an hour ago to a minute ago (u2's like): %+v %v", w, err)
	}
	if s, err := c.LikesSeries(ctx, "vid", client.SeriesOptions{Range: client.Range{Last: "15m"}, Step: "5m", ByRegion: true}); err != nil ||
		s.Step != "5m" || len(s.Series) != 1 || len(s.Series[0].Regions["us"]) != len(s.Times) || sum(s.Series[0].Values) != 1 {
		t.Fatalf("likes series: %+v %v", s, err)
	}

	for _, u := range []string{"a", "b", "c"} {
		if _, err := c.Like(ctx, "post", u); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Like(ctx, "other", "a"); err != nil {
		t.Fatal(err)
	}
	p1, err := c.Likers(ctx, "post", client.Page{Limit: 2})
	if err != nil || len(p1.Users) != 2 || p1.Users[0].ID != "a" || p1.Next != "b" {
		t.Fatalf("likers page 1: %+v %v", p1, err)
	}
	if p2, err := c.Likers(ctx, "post", client.Page{After: p1.Next, Limit: 2}); err != nil || len(p2.Users) != 1 || p2.Users[0].ID != "c" || p2.Next != "" {
		t.Fatalf("likers page 2: %+v %v", p2, err)
	}
	if ul, err := c.UserLikes(ctx, "a", client.Page{}); err != nil || ul.User != "a" || len(ul.Items) != 2 || ul.Items[0].ID != "other" || ul.Items[1].ID != "post" {
		t.Fatalf("user likes: %+v %v", ul, err)
	}

	if f, err := c.Feed(ctx, "a", []string{"post", "vid", "other"}); err != nil || len(f.Items) != 3 ||
		f.Items[0] != (api.FeedItem{Item: "post", Count: 3, Liked: true}) || f.Items[1] != (api.FeedItem{Item: "vid", Count: 1}) {
		t.Fatalf("feed: %+v %v", f, err)
	}
	many := []string{"post"}
	for i := range client.MaxFeedQuery {
		many = append(many, fmt.Sprintf("item-%d", i))
	}
	if f, err := c.Feed(ctx, "b", many); err != nil || len(f.Items) != len(many) || !f.Items[0].Liked || f.Items[0].Count != 3 || f.Items[1].Count != 0 {
		t.Fatalf("feed of %d items: %d items %v", len(many), len(f.Items), err)
	}

	// Toggle: flips, and a retry with its key flips once.
	if l, err := c.Toggle(ctx, "post", "t", ""); err != nil || !l.Liked || !l.Changed || l.Count != 4 {
		t.Fatalf("toggle: %+v %v", l, err)
	}
	if l, err := c.Toggle(ctx, "post", "t", "tap-1"); err != nil || l.Liked || l.Duplicate || l.Count != 3 {
		t.Fatalf("keyed toggle: %+v %v", l, err)
	}
	if l, err := c.Toggle(ctx, "post", "t", "tap-1"); err != nil || l.Liked || l.Changed || !l.Duplicate || l.Count != 3 {
		t.Fatalf("retried toggle: %+v %v", l, err)
	}
	// A like older than the state it finds changes nothing.
	if l, err := c.LikeAt(ctx, client.LikeRequest{Item: "post", User: "t", At: client.At(now.Add(-time.Minute))}); err != nil || l.Liked || l.Changed {
		t.Fatalf("a like older than the toggle: %+v %v", l, err)
	}

	if h, err := c.History(ctx, "post", "a", 1); err != nil || len(h.Actions) != 1 || !h.Actions[0].Liked || h.Actions[0].Replica != "us-1" || !h.Complete {
		t.Fatalf("history: %+v %v", h, err)
	}

	for _, u := range []string{"x", "y"} {
		if _, err := c.Block(ctx, u, true); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := c.Blocks(ctx, client.Page{Limit: 1}); err != nil || len(b.Users) != 1 || b.Users[0].User != "x" || !b.Users[0].Blocked || b.Next != "x" {
		t.Fatalf("blocks page 1: %+v %v", b, err)
	}
	if b, err := c.Blocks(ctx, client.Page{After: "x"}); err != nil || len(b.Users) != 1 || b.Users[0].User != "y" || b.Next != "" {
		t.Fatalf("blocks page 2: %+v %v", b, err)
	}
}

func sum(vs []int64) int64 {
	var s int64
	for _, v := range vs {
		s += v
	}
	return s
}

// Counters with options, the windows and series of counters and of a
// family's total, trending, batches of every event type, unique counts.
func TestClientCounterRoutes(t *testing.T) {
	c := newClient(t, "w")
	ctx := context.Background()
	now := time.Now()

	if r, err := c.Incr(ctx, "views:v1", 5, client.IncrOptions{At: client.At(now.Add(-90 * time.Second))}); err != nil || r.Value != 5 {
		t.Fatalf("incr at: %+v %v", r, err)
	}
	if _, err := c.Incr(ctx, "views:v1", 2, client.IncrOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err := c.Events(ctx, []client.Event{
		{Type: client.EventIncr, Key: "views:v2", By: 4, IdempotencyKey: "e-1", At: client.AtUnixMilli(now.UnixMilli())},
		{Type: client.EventIncr, Key: "views:v2", By: 4, IdempotencyKey: "e-1"},
		{Type: client.EventUnique, Key: "viewers", ID: "alice"},
		{Type: client.EventGrant, Key: "gifts", By: 10},
		{Type: client.EventSpend, Key: "gifts"},
		{Type: client.EventLike, Item: "vid", User: "u1"},
		{Type: client.EventUnlike, Item: "vid", User: "u1"},
	})
	if err != nil || res.Applied != 7 || res.Rejected != 0 || res.Results[0].Value != 4 || !res.Results[1].Duplicate ||
		res.Results[4].Value != 9 || !res.Results[6].Changed {
		t.Fatalf("events: %+v %v", res, err)
	}

	if w, err := c.CounterWindow(ctx, "views:v1", client.Range{Last: "60s"}); err != nil || w.Value != 2 || w.Regions["us"] != 2 {
		t.Fatalf("counter window of the last minute: %+v %v", w, err)
	}
	if w, err := c.Window(ctx, client.WindowQuery{Kind: client.KindCounters, Range: client.Range{Last: "10m"}}); err != nil || w.Value != 11 || w.Key != "" {
		t.Fatalf("the counters' total: %+v %v", w, err)
	}
	if w, err := c.Window(ctx, client.WindowQuery{Kind: client.KindCounters, Key: "views:v2", Range: client.Range{Last: "10m"}}); err != nil || w.Value != 4 {
		t.Fatalf("window of views:v2: %+v %v", w, err)
	}
	if s, err := c.CounterSeries(ctx, "views:v1", client.SeriesOptions{Range: client.Range{Last: "5m"}, Step: "1m"}); err != nil || sum(s.Series[0].Values) != 7 {
		t.Fatalf("counter series: %+v %v", s, err)
	}
	s, err := c.Series(ctx, client.SeriesQuery{Kind: client.KindCounters, Keys: []string{"views:v1", "views:v2", "*"},
		SeriesOptions: client.SeriesOptions{Range: client.Range{Last: "5m"}, Step: "1m"}})
	if err != nil || len(s.Series) != 3 || sum(s.Series[0].Values) != 7 || sum(s.Series[1].Values) != 4 || sum(s.Series[2].Values) != 11 {
		t.Fatalf("series of three keys: %+v %v", s, err)
	}
	tr, err := c.Trending(ctx, client.TrendingQuery{Kind: client.KindCounters, Window: "10m", N: 1, Prefix: "views:"})
	if err != nil || len(tr.Items) != 1 || tr.Items[0].Item != "views:v1" || tr.Items[0].Count != 7 || tr.Prefix != "views:" {
		t.Fatalf("trending: %+v %v", tr, err)
	}
	if _, err := c.Trending(ctx, client.TrendingQuery{Region: "mars"}); client.Code(err) != "unknown_region" {
		t.Fatalf("trending of an unknown region: %v", err)
	}

	if a, err := c.AddUniques(ctx, "viewers", client.UniqueIDs{IDs: []string{"alice", "bob", "bob"}}); err != nil || a.IDs != 3 || !a.Changed {
		t.Fatalf("add uniques: %+v %v", a, err)
	}
	if a, err := c.AddUniques(ctx, "viewers:eu", client.UniqueIDs{ID: "carol", At: client.At(now)}); err != nil || a.IDs != 1 {
		t.Fatalf("add one unique: %+v %v", a, err)
	}
	if u, err := c.Uniques(ctx, "viewers", client.UniquesQuery{}); err != nil || u.Estimate != 2 || u.From != nil {
		t.Fatalf("uniques: %+v %v", u, err)
	}
	if u, err := c.Uniques(ctx, "viewers", client.UniquesQuery{Range: client.Range{Last: "24h"}, ByRegion: true}); err != nil ||
		u.Estimate != 2 || u.From == nil || u.ByRegion["us"] != 2 {
		t.Fatalf("uniques of a day by region: %+v %v", u, err)
	}
	if u, err := c.UniquesUnion(ctx, []string{"viewers", "viewers:eu"}, client.UniquesQuery{}); err != nil || u.Estimate != 3 || !slices.Equal(u.Keys, []string{"viewers", "viewers:eu"}) {
		t.Fatalf("uniques union: %+v %v", u, err)
	}
}

// Budgets: a grant, spends (one refused, with the budget in the error), a
// cashback, the budget read, and the handoff routes of a standalone
// replica.
func TestClientBudgetRoutes(t *testing.T) {
	c := newClient(t, "w")
	ctx := context.Background()
	if g, err := c.Grant(ctx, "gifts", 10); err != nil || g.Granted != 10 || g.Remaining != 10 {
		t.Fatalf("grant: %+v %v", g, err)
	}
	if s, err := c.Spend(ctx, "gifts", client.SpendRequest{By: 4, IdempotencyKey: "order-1"}); err != nil || s.Spent != 4 || s.Remaining != 6 {
		t.Fatalf("spend: %+v %v", s, err)
	}
	if s, err := c.Spend(ctx, "gifts", client.SpendRequest{By: 4, IdempotencyKey: "order-1"}); err != nil || !s.Duplicate || s.Remaining != 6 {
		t.Fatalf("spend again: %+v %v", s, err)
	}
	if s, err := c.Spend(ctx, "gifts", client.SpendRequest{}); err != nil || s.Spent != 1 || s.Remaining != 5 {
		t.Fatalf("spend of the default 1: %+v %v", s, err)
	}
	_, err := c.Spend(ctx, "gifts", client.SpendRequest{By: 6})
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusConflict || e.Code != client.CodeBudgetExhausted || e.Budget == nil || e.Budget.Remaining != 5 || e.Budget.Key != "gifts" {
		t.Fatalf("overspend: %v (budget %+v)", err, e)
	}
	_, err = c.Cashback(ctx, client.CashbackRequest{Budget: "gifts", Merchant: "shop", User: "ann", Amount: 2, IdempotencyKey: "p-1"})
	if !errors.As(err, &e) || e.Code != client.CodeBudgetExhausted || e.Budget == nil || e.Budget.Key != "shop" || e.Budget.Remaining != 0 {
		t.Fatalf("cashback from a merchant holding nothing: %v (budget %+v)", err, e)
	}
	if _, err := c.Grant(ctx, "shop", 3); err != nil {
		t.Fatal(err)
	}
	cb, err := c.Cashback(ctx, client.CashbackRequest{Budget: "gifts", Merchant: "shop", User: "ann", Amount: 2, IdempotencyKey: "p-1"})
	if err != nil || cb.Amount != 2 || cb.Budget.Value != 3 || cb.Merchant.Value != 1 || cb.User.Value != 2 {
		t.Fatalf("cashback: %+v %v", cb, err)
	}
	if b, err := c.Budget(ctx, "gifts"); err != nil || b.Granted != 10 || b.Spent != 7 || b.Remaining != 3 || b.LocalRights != 3 {
		t.Fatalf("budget: %+v %v", b, err)
	}
	if h, err := c.Handoff(ctx); err != nil || h.To != "" || h.Held != 4 || h.Budgets != 2 {
		t.Fatalf("handoff state: %+v %v", h, err)
	}
	if _, err := c.HandOff(ctx, "eu-1"); client.Code(err) != "unknown_replica" || client.StatusCode(err) != http.StatusConflict {
		t.Fatalf("handoff without peers: %v", err)
	}
	if h, err := c.CancelHandoff(ctx); err != nil || h.To != "" {
		t.Fatalf("cancel handoff: %+v %v", h, err)
	}
}

// Health, audit, a sequence without numbering, the chaos clock and the
// metrics.
func TestClientAdminRoutes(t *testing.T) {
	var offset time.Duration
	c := newClient(t, "w", func(cfg *httpapi.Config) { cfg.ChaosClock = func(d time.Duration) { offset = d } })
	ctx := context.Background()
	if h, err := c.Health(ctx); err != nil || h.Status != "ok" {
		t.Fatalf("health: %+v %v", h, err)
	}
	if _, err := c.Incr(ctx, "views", 3, client.IncrOptions{}); err != nil {
		t.Fatal(err)
	}
	if doc, err := c.OpenAPI(ctx); err != nil || !bytes.Contains(doc, []byte(`"openapi":"3.1`)) && !bytes.Contains(doc, []byte(`"openapi": "3.1`)) {
		t.Fatalf("openapi: %.80s %v", doc, err)
	}
	if m, err := c.Shards(ctx); err != nil || len(m.Replicas) != 1 || m.Replicas[0].Replica != "us-1" || m.Replicas[0].Count != shard.Count || m.Replicas[0].State != "up" {
		t.Fatalf("shards of an unsharded replica: %+v %v", m, err)
	}
	if a, err := c.Audit(ctx, client.AuditQuery{}); err != nil || !a.OK || a.Replica != "us-1" {
		t.Fatalf("audit: %+v %v", a, err)
	}
	if a, err := c.Audit(ctx, client.AuditQuery{Kind: client.KindCounters, Key: "views"}); err != nil || !a.OK || a.Vectors != 1 {
		t.Fatalf("audit of one counter: %+v %v", a, err)
	}
	if _, err := c.Audit(ctx, client.AuditQuery{Kind: "sums", Key: "views"}); client.Code(err) != "bad_request" {
		t.Fatalf("audit of an unknown kind: %v", err)
	}
	if _, err := c.Sequence(ctx, "likes"); client.Code(err) != "not_found" || client.StatusCode(err) != http.StatusNotFound {
		t.Fatalf("sequence without numbering: %v", err)
	}
	if err := c.SetClockOffset(ctx, -1500*time.Millisecond); err != nil || offset != -1500*time.Millisecond {
		t.Fatalf("clock offset: %v %v", offset, err)
	}
	m, err := c.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The metrics request itself is in flight while they are written.
	if v, ok := m["tally_http_requests_in_flight"]; !ok || v != 1 {
		t.Fatalf("tally_http_requests_in_flight %v (%v) of %d series", v, ok, len(m))
	}
	if v, err := c.Metric(ctx, "tally_http_requests_in_flight"); err != nil || v != 1 {
		t.Fatalf("metric: %v %v", v, err)
	}
	if _, err := c.Metric(ctx, "tally_no_such_metric"); err == nil {
		t.Fatal("a missing metric was read")
	}
}

// The event type routes: register, read, list, a counter and trending
// with their type's metadata, and an inactive type's refusal.
func TestClientTypeRoutes(t *testing.T) {
	c := newClient(t, "w")
	ctx := context.Background()
	if ty, err := c.SetType(ctx, "video", client.TypeRequest{Owner: "media", Description: "views"}); err != nil || ty.Status != "active" || !ty.Changed || ty.Owner != "media" {
		t.Fatalf("set type: %+v %v", ty, err)
	}
	if _, err := c.Incr(ctx, "video:v1", 3, client.IncrOptions{}); err != nil {
		t.Fatal(err)
	}
	if r, err := c.CounterMeta(ctx, "video:v1"); err != nil || r.Value != 3 || r.Meta == nil || r.Meta.Type != "video" || r.Meta.Owner != "media" {
		t.Fatalf("counter with meta: %+v %v", r, err)
	}
	if tt, err := c.TypeTotal(ctx, "video", ""); err != nil || tt.Value != 3 || tt.Keys != 1 {
		t.Fatalf("type total: %+v %v", tt, err)
	}
	if tw, err := c.TypeWindow(ctx, "video", "counters", client.Range{Last: "1m"}); err != nil || tw.Value != 3 || tw.Keys != 1 || tw.Kind != "counters" {
		t.Fatalf("type window: %+v %v", tw, err)
	}
	if tw, err := c.TypeWindow(ctx, "video", "likes", client.Range{Last: "1m"}); err != nil || tw.Value != 0 || tw.Keys != 0 {
		t.Fatalf("type window of likes: %+v %v", tw, err)
	}
	tr, err := c.Trending(ctx, client.TrendingQuery{Kind: client.KindCounters, Window: "all", Meta: true})
	if err != nil || len(tr.Items) != 1 || tr.Items[0].Meta == nil || tr.Items[0].Meta.Description != "views" {
		t.Fatalf("trending with meta: %+v %v", tr, err)
	}
	if _, err := c.SetType(ctx, "video", client.TypeRequest{Owner: "media", Status: "inactive"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Incr(ctx, "video:v1", 1, client.IncrOptions{}); client.Code(err) != "inactive_type" || client.StatusCode(err) != http.StatusConflict {
		t.Fatalf("incr of an inactive type: %v", err)
	}
	if ty, err := c.Type(ctx, "video"); err != nil || ty.Status != "inactive" || ty.Replica != "us-1" {
		t.Fatalf("type: %+v %v", ty, err)
	}
	if _, err := c.Type(ctx, "nope"); client.StatusCode(err) != http.StatusNotFound {
		t.Fatalf("type never registered: %v", err)
	}
	if l, err := c.Types(ctx, client.Page{}); err != nil || len(l.Types) != 1 || l.Types[0].Name != "video" {
		t.Fatalf("types: %+v %v", l, err)
	}
}
