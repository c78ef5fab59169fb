package sink_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/replication"
	"github.com/tally-dev/tally/sink"
)

// benchEvents is how many events each run copies.
const benchEvents = 200_000

// fillStream puts likes 1..n into region us's stream (a JetStream that
// fsyncs every write, as shipped), chunk events per message as the
// publisher sends them (storage.LogChunk at most).
func fillStream(b testing.TB, chunk, n int) jetstream.JetStream {
	b.Helper()
	ns := testkit.StartNATSWith(b, func(o *server.Options) {
		o.JetStream, o.StoreDir, o.SyncAlways = true, b.TempDir(), true
	})
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: replication.EventsStream("us"),
		Subjects: []string{"tally.events.us.>"}, Storage: jetstream.FileStorage}); err != nil {
		b.Fatal(err)
	}
	publish(b, js, 1, n, chunk)
	return js
}

// publish puts likes from..to into region us's stream, chunk a message.
func publish(b testing.TB, js jetstream.JetStream, from, to, chunk int) {
	b.Helper()
	at := time.Now().UTC().Format("2006-01-02T15:04:05.000Z")
	var body strings.Builder
	for seq := from; seq <= to; seq++ {
		fmt.Fprintf(&body, `{"seq":%d,"log":"0123456789abcdef","replica":"us-1","region":"us","type":"like","kind":"likes","key":"post%d","user":"user%d","p":1,"hlc":"%d.0","at":%q}`+"\n",
			seq, seq%1000, seq, seq, at)
		if seq%chunk == 0 || seq == to {
			if _, err := js.PublishAsync(replication.EventsSubject("us", "us-1"), []byte(body.String())); err != nil {
				b.Fatal(err)
			}
			body.Reset()
			if js.PublishAsyncPending() >= 1000 {
				<-js.PublishAsyncComplete()
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("publishing did not complete")
	}
}

// runSink copies the stream with w until count says every event is there,
// and reports events/s.
func runSink(b *testing.B, js jetstream.JetStream, w sink.Writer, count func() int) {
	b.Helper()
	for b.Loop() {
		s, err := sink.New(sink.Config{JS: js, Regions: []string{"us"}, Writer: w, Durable: fmt.Sprintf("bench%d", time.Now().UnixNano())})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- s.Run(ctx) }()
		testkit.WaitFor(b, 5*time.Minute, func() error {
			if st := s.Stats(); st.Events < benchEvents {
				return fmt.Errorf("%d events", st.Events)
			}
			return nil
		})
		elapsed := time.Since(start)
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		if n := count(); n != benchEvents {
			b.Fatalf("%d events stored, want %d", n, benchEvents)
		}
		b.ReportMetric(benchEvents/elapsed.Seconds(), "events/s")
	}
}

// BenchmarkSink: one region's stream into PostgreSQL (a local cluster,
// fsync on) and into files, end to end: fetch, parse, write, acknowledge.
// Run once: go test -run '^$' -bench Sink -benchtime 1x ./sink/
func BenchmarkSink(b *testing.B) {
	for _, chunk := range []int{512, 8} {
		b.Run(fmt.Sprintf("postgres/chunk=%d", chunk), func(b *testing.B) {
			dsn := testkit.StartPostgres(b)
			js := fillStream(b, chunk, benchEvents)
			ctx := context.Background()
			pg, err := sink.OpenPostgres(ctx, dsn, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer pg.Close()
			db, err := pgx.Connect(ctx, dsn)
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close(ctx)
			runSink(b, js, pg, func() int {
				var n int
				if err := db.QueryRow(ctx, "SELECT count(*) FROM tally_events").Scan(&n); err != nil {
					b.Fatal(err)
				}
				_, _ = db.Exec(ctx, "TRUNCATE tally_events")
				return n
			})
		})
		b.Run(fmt.Sprintf("files/chunk=%d", chunk), func(b *testing.B) {
			js := fillStream(b, chunk, benchEvents)
			dir := b.TempDir()
			files, err := sink.OpenFiles(dir, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer files.Close()
			runSink(b, js, files, func() int {
				paths, _ := filepath.Glob(filepath.Join(dir, "us", "*.jsonl"))
				n := 0
				for _, p := range paths {
					n += countLines(b, p)
				}
				return n
			})
		})
	}
}
