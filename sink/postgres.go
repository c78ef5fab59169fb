package sink

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
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
// creates the tables (Schema, DeadSchema) if they are missing.
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
	if _, err := pool.Exec(cctx, DeadSchema); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: create the dead-letter table: %w", err)
	}
	return &Postgres{pool: pool}, nil
}

// DeadSchema is the dead-letter table: an event PostgreSQL refuses for
// its content (docs/sink.md, "Dead letters") is stored here with the
// reason instead of in tally_events, and acknowledged, so it does not
// hold up its region. The identity columns are the event's with any NUL
// byte or invalid UTF-8 replaced (they may be what was refused); event
// is the line exactly as the stream has it.
const DeadSchema = `CREATE TABLE IF NOT EXISTS tally_events_dead (
	region    text        NOT NULL,
	replica   text        NOT NULL,
	log       text        NOT NULL,
	seq       numeric     NOT NULL,
	sqlstate  text        NOT NULL,
	reason    text        NOT NULL,
	event     bytea       NOT NULL,
	dead_at   timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (replica, log, seq)
);`

// insertDead adds dead letters; a redelivered one is skipped.
const insertDead = `INSERT INTO tally_events_dead (region, replica, log, seq, sqlstate, reason, event)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]::numeric[], $5::text[], $6::text[], $7::bytea[])
ON CONFLICT (replica, log, seq) DO NOTHING`

// Write inserts events; see Writer. A batch goes in as one statement.
// If PostgreSQL refuses it for its content (refused), the batch is
// halved until each refused event stands alone: the others are inserted
// and the refused ones go to tally_events_dead with the reason. Any
// other error is returned, and the sink retries the batch.
func (p *Postgres) Write(ctx context.Context, region string, events []Event) (Written, error) {
	var w Written
	var dead []deadLetter
	if err := p.insert(ctx, events, &w, &dead); err != nil {
		return Written{}, err
	}
	if len(dead) > 0 {
		if err := p.bury(ctx, region, dead); err != nil {
			return Written{}, err
		}
		w.DeadLettered = len(dead)
	}
	return w, nil
}

// deadLetter is an event the store refused, and why.
type deadLetter struct {
	e                *Event
	sqlstate, reason string
}

// insert inserts events, splitting a refused batch in two until each
// refused event is alone; those are added to dead.
func (p *Postgres) insert(ctx context.Context, events []Event, w *Written, dead *[]deadLetter) error {
	if len(events) == 0 {
		return nil
	}
	added, err := p.insertBatch(ctx, events)
	if err == nil {
		w.Added += added
		return nil
	}
	state, reason, ok := refused(err)
	if !ok {
		return err
	}
	if len(events) == 1 {
		*dead = append(*dead, deadLetter{e: &events[0], sqlstate: state, reason: reason})
		return nil
	}
	half := len(events) / 2
	if err := p.insert(ctx, events[:half], w, dead); err != nil {
		return err
	}
	return p.insert(ctx, events[half:], w, dead)
}

// errTooBig is an event with a number no bigint holds: refused before
// PostgreSQL sees it, as PostgreSQL would refuse it.
type errTooBig struct{ e *Event }

func (e errTooBig) Error() string {
	return fmt.Sprintf("event %s/%s/%d: a number does not fit a bigint", e.e.Replica, e.e.Log, e.e.Seq)
}

// refused reports whether err is PostgreSQL (or this writer) refusing an
// event for its content, which no retry changes: a data exception
// (SQLSTATE class 22: a NUL byte or invalid UTF-8 in a text, a number out
// of range) or an integrity violation (class 23: a constraint added to the
// table). With the SQLSTATE ("" for this writer's own check) and the
// reason, cleaned to be stored as text.
func refused(err error) (sqlstate, reason string, ok bool) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "23")) {
		return pe.Code, cleanText(pe.Message), true
	}
	var big errTooBig
	if errors.As(err, &big) {
		return "", big.Error(), true
	}
	return "", "", false
}

// cleanText makes s storable as PostgreSQL text: no NUL byte, valid UTF-8.
func cleanText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// insertBatch inserts events in one statement.
func (p *Postgres) insertBatch(ctx context.Context, events []Event) (int, error) {
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
			return 0, fmt.Errorf("postgres: %w", errTooBig{e})
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

// bury stores dead letters in tally_events_dead.
func (p *Postgres) bury(ctx context.Context, region string, dead []deadLetter) error {
	n := len(dead)
	regions, replicas, logs, seqs, states, reasons := make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n)
	lines := make([][]byte, n)
	for i, d := range dead {
		r := d.e.Region
		if r == "" {
			r = region
		}
		regions[i], replicas[i], logs[i] = cleanText(r), cleanText(d.e.Replica), cleanText(d.e.Log)
		seqs[i], states[i], reasons[i] = strconv.FormatUint(d.e.Seq, 10), d.sqlstate, d.reason
		lines[i] = d.e.Line
		if lines[i] == nil {
			lines[i] = []byte{}
		}
	}
	if _, err := p.pool.Exec(ctx, insertDead, regions, replicas, logs, seqs, states, reasons, lines); err != nil {
		return fmt.Errorf("postgres: dead-letter %d refused events: %w", n, err)
	}
	return nil
}

// Close closes the connections.
func (p *Postgres) Close() error {
	p.pool.Close()
	return nil
}
