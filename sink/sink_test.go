package sink_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/internal/deploy"
	"github.com/tally-dev/tally/replication"
	"github.com/tally-dev/tally/sink"
)

var regions = []string{"us", "eu"}

// env is a running two-region deployment and a NATS connection to it as
// an application (no credentials: the tally-apps user, as `tallyd events
// sink` runs).
type env struct {
	t    *testing.T
	urls []string
	js   jetstream.JetStream
}

func startEnv(t *testing.T) *env {
	t.Helper()
	cfg := deploy.DefaultConfig()
	cfg.Regions, cfg.DataDir, cfg.Milestones = regions, t.TempDir(), ""
	d, err := deploy.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	for _, u := range d.URLs() {
		testkit.WaitFor(t, 60*time.Second, func() error {
			if st, _, err := testkit.DoJSON("GET", u+"/readyz", ""); err != nil || st != 200 {
				return fmt.Errorf("%s not ready: %d %v", u, st, err)
			}
			return nil
		})
	}
	nc, err := nats.Connect(d.Configs()[0].NATS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, urls: d.URLs(), js: js}
}

// like writes likes from..to-1, each a new (post, user) pair, alternating
// between the regions: one event each in the accepting region's stream.
func (e *env) like(from, to int) {
	e.t.Helper()
	for i := from; i < to; i++ {
		u := e.urls[i%len(e.urls)]
		if st, b, err := testkit.DoJSON("PUT", fmt.Sprintf("%s/v1/likes/post%d/user%d", u, i%7, i), ""); err != nil || st != 200 {
			e.t.Fatalf("like %d: %d %v %v", i, st, b, err)
		}
	}
}

// streamed reads every region's stream from its start, apart from the
// sink, and returns the identities of its events (log/seq).
func (e *env) streamed() map[string]bool {
	e.t.Helper()
	ctx := context.Background()
	ids := map[string]bool{}
	for _, r := range regions {
		s, err := e.js.Stream(ctx, replication.EventsStream(r))
		if err != nil {
			e.t.Fatalf("%s: %v", r, err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			e.t.Fatalf("%s: info: %v", r, err)
		}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if err != nil {
				e.t.Fatalf("%s: message %d: %v", r, seq, err)
			}
			for line := range bytes.SplitSeq(bytes.TrimSpace(m.Data), []byte("\n")) {
				ev, err := sink.ParseEvent(line)
				if err != nil {
					e.t.Fatal(err)
				}
				ids[fmt.Sprintf("%s/%s/%d", ev.Replica, ev.Log, ev.Seq)] = true
			}
		}
	}
	return ids
}

// drained: every region's consumer has every message acknowledged.
func (e *env) drained(durable string) error {
	for _, r := range regions {
		c, err := e.js.Consumer(context.Background(), replication.EventsStream(r), durable)
		if err != nil {
			return err
		}
		info, err := c.Info(context.Background())
		if err != nil {
			return err
		}
		if info.NumPending != 0 || info.NumAckPending != 0 {
			return fmt.Errorf("%s: %d pending, %d unacknowledged", r, info.NumPending, info.NumAckPending)
		}
	}
	return nil
}

var errCrash = errors.New("crashed after the write, before the acknowledgement")

// crashRestart runs a sink into w that stops like a crash after its third
// written batch, checks it stopped mid-way (count is how many events the
// store holds), calls between, then runs a sink again on the same
// consumer while 100 more likes are written, until the store holds
// exactly every streamed event and the second sink has met the first
// one's unacknowledged batch again. It returns how many events were
// written in all and the second sink's stats.
func crashRestart(t *testing.T, e *env, w sink.Writer, durable string, count func() int, between func()) (int, sink.Stats) {
	t.Helper()
	e.like(0, 300)
	var batches atomic.Int32
	cfg := sink.Config{JS: e.js, Regions: regions, Writer: w, Durable: durable, Batch: 10, Linger: 100 * time.Millisecond,
		AckWait: time.Second,
		AfterWrite: func(string, int) error {
			if batches.Add(1) >= 3 {
				return errCrash
			}
			return nil
		}}
	s1, err := sink.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s1.Run(ctx); !errors.Is(err, errCrash) {
		t.Fatalf("first sink: %v, want the crash", err)
	}
	if n := count(); n == 0 || n >= 300 {
		t.Fatalf("after the crash the store holds %d events; want some of the 300, not all", n)
	}
	t.Logf("crashed holding %d events; first sink %+v", count(), s1.Stats())
	between()

	cfg.AfterWrite = nil
	s2, err := sink.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s2.Run(ctx) }()
	e.like(300, 400)
	testkit.WaitFor(t, 60*time.Second, func() error {
		if n, st := count(), s2.Stats(); n != 400 || st.Duplicates == 0 {
			return fmt.Errorf("store holds %d events, want 400; second sink %+v", n, st)
		}
		return e.drained(durable)
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("second sink: %v", err)
	}
	ids := e.streamed()
	if len(ids) != 400 {
		t.Fatalf("the streams hold %d events, want 400", len(ids))
	}
	if n := count(); n != len(ids) {
		t.Fatalf("store holds %d events after the restart, the streams %d", n, len(ids))
	}
	return len(ids), s2.Stats()
}

// TestPostgresSinkCrashBeforeAck: a sink that crashes after its insert
// committed but before the stream has the acknowledgement gets the batch
// again on restart, and ON CONFLICT DO NOTHING skips it: the table holds
// every event of both regions exactly once.
func TestPostgresSinkCrashBeforeAck(t *testing.T) {
	dsn := testkit.StartPostgres(t)
	e := startEnv(t)
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
	query := func(q string, dst ...any) {
		t.Helper()
		if err := db.QueryRow(ctx, q).Scan(dst...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	count := func() int {
		var n int
		query("SELECT count(*) FROM tally_events", &n)
		return n
	}
	n, st := crashRestart(t, e, pg, "sink-pg-test", count, func() {})
	t.Logf("second sink %+v", st)
	var distinct, likes, us, eu int
	query("SELECT count(DISTINCT (replica, log, seq)) FROM tally_events", &distinct)
	query("SELECT coalesce(sum(p - n), 0) FROM tally_events WHERE kind = 'likes'", &likes)
	query("SELECT count(*) FILTER (WHERE region = 'us'), count(*) FILTER (WHERE region = 'eu') FROM tally_events", &us, &eu)
	if distinct != n || likes != 400 || us != 200 || eu != 200 {
		t.Fatalf("rows: %d distinct of %d, net likes %d, us %d, eu %d; want 400 distinct, 400 likes, 200 per region", distinct, n, likes, us, eu)
	}
	// docs/sink.md: its schema is the one created, and every query on it
	// runs; the likes per hour add up to every like.
	blocks := sqlBlocks(t, "../docs/sink.md")
	if len(blocks) < 4 || blocks[0] != sink.Schema {
		t.Fatalf("docs/sink.md: %d sql blocks, the first (the schema) equal to sink.Schema: %v", len(blocks), len(blocks) > 0 && blocks[0] == sink.Schema)
	}
	for _, q := range blocks[1:] {
		rows, err := db.Query(ctx, q)
		if err != nil {
			t.Fatalf("docs/sink.md query %q: %v", q, err)
		}
		netSum, nrows := int64(0), 0
		for rows.Next() {
			nrows++
			vals, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(q, "AS net") {
				// sum(bigint) is a numeric.
				num, ok := vals[len(vals)-1].(pgtype.Numeric)
				v, err := num.Int64Value()
				if !ok || err != nil || !v.Valid {
					t.Fatalf("net %#v: %v", vals[len(vals)-1], err)
				}
				netSum += v.Int64
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("docs/sink.md query %q: %v", q, err)
		}
		if strings.Contains(q, "AS net") && netSum != 400 {
			t.Errorf("likes per hour add up to %d, want 400", netSum)
		}
		if strings.Contains(q, "kind = 'likes'") && nrows == 0 {
			t.Errorf("docs/sink.md query %q: no rows", q)
		}
	}
	// The schema is created if missing and left alone if there.
	again, err := sink.OpenPostgres(ctx, dsn, 1)
	if err != nil {
		t.Fatal(err)
	}
	again.Close()
	if c := count(); c != 400 {
		t.Fatalf("opening again: %d rows", c)
	}
}

// TestFilesSinkCrashBeforeAck: the same crash into hourly JSON-lines
// files: the restarted sink (a new process: a new Files on the same
// directory) finds the redelivered batch in the files, and every event is
// in exactly one line, of the file of its region and hour.
func TestFilesSinkCrashBeforeAck(t *testing.T) {
	e := startEnv(t)
	dir := t.TempDir()
	files, err := sink.OpenFiles(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	lines := func() []sink.Event {
		var out []sink.Event
		paths, _ := filepath.Glob(filepath.Join(dir, "*", "*.jsonl"))
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			for line := range bytes.Lines(b) {
				ev, err := sink.ParseEvent(bytes.TrimSuffix(line, []byte("\n")))
				if err != nil {
					t.Fatalf("%s: %v", p, err)
				}
				if want := filepath.Join(dir, ev.Region, ev.At.UTC().Format("2006-01-02T15")+".jsonl"); p != want {
					t.Fatalf("event %s/%d of %s in %s, want %s", ev.Log, ev.Seq, ev.At, p, want)
				}
				out = append(out, ev)
			}
		}
		return out
	}
	restart := func() {
		if err := files.Close(); err != nil {
			t.Fatal(err)
		}
		if files, err = sink.OpenFiles(dir, 0); err != nil {
			t.Fatal(err)
		}
	}
	w := writerRef{get: func() sink.Writer { return files }}
	n, st := crashRestart(t, e, &w, "sink-files-test", func() int { return len(lines()) }, restart)
	t.Logf("second sink %+v", st)
	defer files.Close()
	seen := map[string]bool{}
	perRegion := map[string]int{}
	evs := lines()
	for _, ev := range evs {
		id := fmt.Sprintf("%s/%s/%d", ev.Replica, ev.Log, ev.Seq)
		if seen[id] {
			t.Fatalf("event %s twice in the files", id)
		}
		seen[id] = true
		perRegion[ev.Region]++
		if ev.Type != "like" {
			t.Fatalf("line %s: want a like", ev.Line)
		}
	}
	if len(evs) != n || perRegion["us"] != 200 || perRegion["eu"] != 200 {
		t.Fatalf("files hold %d lines (%v), want %d, 200 per region", len(evs), perRegion, n)
	}
}

// writerRef lets the test swap the Files writer (a new process's) under
// a sink config.
type writerRef struct{ get func() sink.Writer }

func (w *writerRef) Write(ctx context.Context, region string, events []sink.Event) (sink.Written, error) {
	return w.get().Write(ctx, region, events)
}
func (w *writerRef) Close() error { return w.get().Close() }

// countLines is how many lines the file at path has.
func countLines(tb testing.TB, path string) int {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return bytes.Count(b, []byte("\n"))
}

// sqlBlocks are the ```sql blocks of the Markdown file at path, without
// their final newline.
func sqlBlocks(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, part := range strings.Split(string(b), "```sql\n")[1:] {
		block, _, ok := strings.Cut(part, "```")
		if !ok {
			t.Fatalf("%s: an unclosed sql block", path)
		}
		out = append(out, strings.TrimSuffix(block, "\n"))
	}
	return out
}

// A consumer deleted under a running sink (an operator's mistake) is
// created again, from the stream's start: every event comes again, and
// the writer stores none twice.
func TestSinkRecreatesADeletedConsumer(t *testing.T) {
	js := fillStream(t, 16, 300)
	dir := t.TempDir()
	files, err := sink.OpenFiles(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer files.Close()
	s, err := sink.New(sink.Config{JS: js, Regions: []string{"us"}, Writer: files, Durable: "recreate", Linger: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stored := func() int {
		paths, _ := filepath.Glob(filepath.Join(dir, "us", "*.jsonl"))
		n := 0
		for _, p := range paths {
			n += countLines(t, p)
		}
		return n
	}
	testkit.WaitFor(t, 30*time.Second, func() error {
		if n := stored(); n != 300 {
			return fmt.Errorf("%d stored", n)
		}
		return nil
	})
	if err := js.DeleteConsumer(ctx, replication.EventsStream("us"), "recreate"); err != nil {
		t.Fatal(err)
	}
	publish(t, js, 301, 400, 16)
	testkit.WaitFor(t, 30*time.Second, func() error {
		if n, st := stored(), s.Stats(); n != 400 || st.Duplicates != 300 {
			return fmt.Errorf("%d stored, want 400; %+v, want 300 duplicates", n, st)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
