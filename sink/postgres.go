package sink

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Schema is the table the PostgreSQL writer creates on start (if it is
// not there) and fills: one row per event, its identity the primary key.
// docs/sink.md describes the columns and gives example queries.
const Schema = `CREATE TABLE IF NOT EXISTS tally_events (
	region          text        NOT NULL,
	replica         text        NOT NULL,
	log             text        NOT NULL,
	seq             bigint      NOT NULL,
	type            text        NOT NULL,
	kind            text        NOT NULL,
	key             text        NOT NULL,
	user_id         text        NOT NULL DEFAULT '',
	idempotency_key text        NOT NULL DEFAULT '',
	by              bigint      NOT NULL DEFAULT 0,
	count           bigint      NOT NULL DEFAULT 0,
	p               bigint      NOT NULL DEFAULT 0,
	n               bigint      NOT NULL DEFAULT 0,
	hlc             text        NOT NULL,
	at              timestamptz NOT NULL,
	PRIMARY KEY (replica, log, seq)
);
CREATE INDEX IF NOT EXISTS tally_events_at ON tally_events (at);
CREATE INDEX IF NOT EXISTS tally_events_kind_key_at ON tally_events (kind, key, at);`

// insertEvents adds a batch in one statement (one transaction): the
// columns come as arrays, unnest makes them rows, and a row whose
// (replica, log, seq) the table holds is skipped.
const insertEvents = `INSERT INTO tally_events
	(region, replica, log, seq, type, kind, key, user_id, idempotency_key, by, count, p, n, hlc, at)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::text[],
	$8::text[], $9::text[], $10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[], $14::text[], $15::timestamptz[])
ON CONFLICT (replica, log, seq) DO NOTHING`

// Postgres writes events into the table of Schema.
type Postgres struct {
	pool *pgxpool.Pool
}

// OpenPostgres connects to dsn (a PostgreSQL URL or key=value string;
// what it leaves out comes from the PG* environment variables and
// ~/.pgpass, as with psql) with up to conns connections (0: 4), and
// creates the table if it is missing.
func OpenPostgres(ctx context.Context, dsn string, conns int) (*Postgres, error) {
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if conns > 0 {
		pc.MaxConns = int32(min(conns, math.MaxInt32))
	} else {
		pc.MaxConns = 4
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := pool.Exec(cctx, Schema); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: create the table: %w", err)
	}
	return &Postgres{pool: pool}, nil
}

// Write inserts events; see Writer.
func (p *Postgres) Write(ctx context.Context, _ string, events []Event) (int, error) {
	if len(events) == 0 {
		return 0, nil
	}
	n := len(events)
	var (
		logs, regions, replicas, types, kinds, keys, users, idems, hlcs = make([]string, n), make([]string, n),
			make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		seqs, bys, counts, ps, ns = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		ats                       = make([]time.Time, n)
	)
	for i := range events {
		e := &events[i]
		if e.Seq > math.MaxInt64 || e.Count > math.MaxInt64 || e.P > math.MaxInt64 || e.N > math.MaxInt64 {
			return 0, fmt.Errorf("postgres: event %s/%s/%d: a number does not fit a bigint", e.Replica, e.Log, e.Seq)
		}
		logs[i], regions[i], replicas[i], types[i], kinds[i], keys[i], users[i], idems[i], hlcs[i] =
			e.Log, e.Region, e.Replica, e.Type, e.Kind, e.Key, e.User, e.Idem, e.HLC
		seqs[i], bys[i], counts[i], ps[i], ns[i] = int64(e.Seq), e.By, int64(e.Count), int64(e.P), int64(e.N)
		ats[i] = e.At
	}
	tag, err := p.pool.Exec(ctx, insertEvents, regions, replicas, logs, seqs, types, kinds, keys, users, idems,
		bys, counts, ps, ns, hlcs, ats)
	if err != nil {
		return 0, fmt.Errorf("postgres: insert %d events: %w", n, err)
	}
	return int(tag.RowsAffected()), nil
}

// Close closes the connections.
func (p *Postgres) Close() error {
	p.pool.Close()
	return nil
}
