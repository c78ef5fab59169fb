package sink_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/replication"
	"github.com/tally-dev/tally/sink"
)

// counterValue is the value of the counter name{region="us"} in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "region" && l.GetValue() == "us" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{region=\"us\"}", name)
	return 0
}

// consumerDone: the consumer durable of region us has every message
// acknowledged.
func consumerDone(js jetstream.JetStream, durable string) error {
	c, err := js.Consumer(context.Background(), replication.EventsStream("us"), durable)
	if err != nil {
		return err
	}
	info, err := c.Info(context.Background())
	if err != nil {
		return err
	}
	if info.NumPending != 0 || info.NumAckPending != 0 {
		return fmt.Errorf("%d pending, %d unacknowledged", info.NumPending, info.NumAckPending)
	}
	return nil
}

// An event PostgreSQL refuses for its content (a NUL byte in a text: SQLSTATE
// 22021) or that no bigint holds does not hold up its region: it goes to
// tally_events_dead with the reason and its line, the other events of
// the same message are stored, everything is acknowledged, and the
// metric counts it. The replay statement of docs/sink.md then moves the
// NUL ones into tally_events.
func TestPostgresSinkDeadLetters(t *testing.T) {
	dsn := testkit.StartPostgres(t)
	js := fillStream(t, 16, 100)
	at := time.Now().UTC().Format("2006-01-02T15:04:05.000Z")
	good := func(seq int) string {
		return fmt.Sprintf(`{"seq":%d,"log":"0123456789abcdef","replica":"us-1","region":"us","type":"like","kind":"likes","key":"post%d","user":"user%d","p":1,"hlc":"%d.0","at":%q}`, seq, seq, seq, seq, at)
	}
	nulKey := fmt.Sprintf(`{"seq":102,"log":"0123456789abcdef","replica":"us-1","region":"us","type":"like","kind":"likes","key":"po\u0000st","user":"user102","p":1,"hlc":"102.0","at":%q}`, at)
	tooBig := fmt.Sprintf(`{"seq":104,"log":"0123456789abcdef","replica":"us-1","region":"us","type":"incr","kind":"counters","key":"c","count":18446744073709551615,"p":1,"hlc":"104.0","at":%q}`, at)
	nulUser := fmt.Sprintf(`{"seq":106,"log":"0123456789abcdef","replica":"us-1","region":"us","type":"like","kind":"likes","key":"post106","user":"u\u0000","p":1,"hlc":"106.0","at":%q}`, at)
	msg := strings.Join([]string{good(101), nulKey, good(103), tooBig, good(105), nulUser, good(107)}, "\n") + "\n"
	if _, err := js.Publish(context.Background(), replication.EventsSubject("us", "us-1"), []byte(msg)); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	pg, err := sink.OpenPostgres(ctx, dsn, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	count := func(table string) int {
		t.Helper()
		var n int
		if err := db.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	reg := prometheus.NewRegistry()
	s, err := sink.New(sink.Config{JS: js, Regions: []string{"us"}, Writer: pg, Durable: "dead", Linger: 50 * time.Millisecond, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	testkit.WaitFor(t, 30*time.Second, func() error {
		if n, d := count("tally_events"), count("tally_events_dead"); n != 104 || d != 3 {
			return fmt.Errorf("%d events, %d dead letters; want 104 and 3; %+v", n, d, s.Stats())
		}
		return consumerDone(js, "dead")
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.DeadLettered != 3 || st.WriteFailures != 0 || st.Added != 104 {
		t.Fatalf("stats %+v: want 3 dead letters, 104 added, no failed write", st)
	}
	if v := counterValue(t, reg, "tally_sink_dead_letters_total"); v != 3 {
		t.Fatalf("tally_sink_dead_letters_total %v, want 3", v)
	}

	rows, err := db.Query(ctx, "SELECT seq::bigint, sqlstate, reason, event FROM tally_events_dead ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	type dead struct {
		seq           int64
		state, reason string
		event         []byte
	}
	var got []dead
	for rows.Next() {
		var d dead
		if err := rows.Scan(&d.seq, &d.state, &d.reason, &d.event); err != nil {
			t.Fatal(err)
		}
		got = append(got, d)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		seq    int64
		state  string
		reason string
		line   string
	}{
		{102, "22021", "0x00", nulKey},
		{104, "", "does not fit a bigint", tooBig},
		{106, "22021", "0x00", nulUser},
	}
	if len(got) != len(want) {
		t.Fatalf("dead letters %+v", got)
	}
	for i, w := range want {
		g := got[i]
		if g.seq != w.seq || g.state != w.state || !strings.Contains(g.reason, w.reason) || !bytes.Equal(g.event, []byte(w.line)) {
			t.Errorf("dead letter %d: seq %d, sqlstate %q, reason %q, event %q; want seq %d, %q, a reason with %q, the line %q",
				i, g.seq, g.state, g.reason, g.event, w.seq, w.state, w.reason, w.line)
		}
	}

	// docs/sink.md: its dead-letter table is the one created, and its
	// replay statement moves the NUL ones, cleaned, and leaves the rest.
	var replay string
	blocks := sqlBlocks(t, "../docs/sink.md")
	if !containsBlock(blocks, sink.DeadSchema) {
		t.Fatal("docs/sink.md lacks sink.DeadSchema as a sql block")
	}
	for _, b := range blocks {
		if strings.Contains(b, "DELETE FROM tally_events_dead") {
			replay = b
		}
	}
	if replay == "" {
		t.Fatal("docs/sink.md has no replay statement")
	}
	if _, err := db.Exec(ctx, replay); err != nil {
		t.Fatalf("replay: %v", err)
	}
	var key string
	if err := db.QueryRow(ctx, "SELECT key FROM tally_events WHERE seq = 102").Scan(&key); err != nil || key != "post" {
		t.Fatalf("replayed event 102: key %q, %v; want post", key, err)
	}
	if n, d := count("tally_events"), count("tally_events_dead"); n != 106 || d != 1 {
		t.Fatalf("after the replay: %d events, %d dead letters; want 106 and 1 (the bigint)", n, d)
	}
}

func containsBlock(blocks []string, b string) bool {
	for _, x := range blocks {
		if x == b {
			return true
		}
	}
	return false
}

// A write that fails for another reason than an event's content (here
// the table is gone: SQLSTATE 42P01) is retried with a growing pause,
// acknowledging nothing, and once the writes have failed for longer than
// RetryFor the sink stops with the reason; a sink run again once the
// table is back stores every event.
func TestPostgresSinkRetryBound(t *testing.T) {
	dsn := testkit.StartPostgres(t)
	js := fillStream(t, 16, 100)
	ctx := context.Background()
	pg, err := sink.OpenPostgres(ctx, dsn, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	if _, err := db.Exec(ctx, "DROP TABLE tally_events"); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	cfg := sink.Config{JS: js, Regions: []string{"us"}, Writer: pg, Durable: "bound", Linger: 50 * time.Millisecond,
		RetryFor: 6 * time.Second, Registerer: reg}
	s, err := sink.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	start := time.Now()
	err = s.Run(rctx)
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "writes failing") || !strings.Contains(err.Error(), "tally_events") {
		t.Fatalf("Run: %v; want it stopped on the failing writes, naming the missing table", err)
	}
	st := s.Stats()
	// Pauses of 1, 2, 4 s: failures at 0, 1, 3 and 7 s, the last over
	// the bound. A pause of 1 s each time would make 7.
	if took < 6*time.Second || took > 20*time.Second || st.WriteFailures < 3 || st.WriteFailures > 5 {
		t.Fatalf("stopped after %s with %d failed writes; want 6..20s and 3..5 (backing off)", took, st.WriteFailures)
	}
	if v := counterValue(t, reg, "tally_sink_write_failures_total"); v != float64(st.WriteFailures) {
		t.Fatalf("tally_sink_write_failures_total %v, stats %d", v, st.WriteFailures)
	}
	if st.DeadLettered != 0 || st.Added != 0 {
		t.Fatalf("stats %+v: nothing may be dead-lettered or added", st)
	}

	if _, err := db.Exec(ctx, sink.Schema); err != nil {
		t.Fatal(err)
	}
	cfg.Registerer = nil
	s2, err := sink.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s2.Run(rctx) }()
	testkit.WaitFor(t, 30*time.Second, func() error {
		var n int
		if err := db.QueryRow(ctx, "SELECT count(*) FROM tally_events").Scan(&n); err != nil || n != 100 {
			return fmt.Errorf("%d events, %v", n, err)
		}
		return consumerDone(js, "bound")
	})
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
}
