package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/pg"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
)

// Scenario 3's load: writers append one event per call, spread over
// sessions (writer i appends to session i mod sessions).
const (
	appendWriters  = 16
	appendSessions = 4
)

// Scratch tables of the raw baselines: the columns of sessions.last_seq and
// session_events, the same primary key and foreign key, without the
// append-only triggers (they fire on UPDATE and DELETE only).
const scratchSchema = `
	CREATE TABLE bench_sessions (
		tenant   text   NOT NULL DEFAULT 'default',
		id       text   PRIMARY KEY,
		last_seq bigint NOT NULL DEFAULT -1
	);
	CREATE TABLE bench_events (
		tenant     text        NOT NULL DEFAULT 'default',
		session_id text        NOT NULL REFERENCES bench_sessions (id),
		seq        bigint      NOT NULL CHECK (seq >= 0),
		type       text        NOT NULL,
		time       timestamptz NOT NULL,
		data       jsonb       NOT NULL,
		PRIMARY KEY (session_id, seq)
	)`

// rawAppend takes the next seq under the session row's lock and inserts
// the event, in one statement.
const rawAppend = `WITH s AS (
		UPDATE bench_sessions SET last_seq = last_seq + 1
		WHERE tenant = $1 AND id = $2
		RETURNING last_seq
	)
	INSERT INTO bench_events (tenant, session_id, seq, type, time, data)
	SELECT $1, $2, s.last_seq, $3, $4, $5::jsonb FROM s`

// appendLog is scenario 3: events/s appended through the Postgres Store
// against raw pgx on tables of the same shape, once as a bare autocommit
// statement (the floor) and once in the Store's transaction shape.
func (b *bench) appendLog(ctx context.Context) (_ *table, err error) {
	t := &table{
		title: fmt.Sprintf("3. Session-log append on Postgres: %d writers, 1 event per call, over %d sessions", appendWriters, appendSessions),
		head:  []string{"writer", "appends", "events/s", "p50", "p99", "WAL/event", "floor ÷ ours", "Postgres backends by state"},
	}
	if b.admin == nil {
		t.unavailable("pg.Store.AppendEvents", b.pgErr.Error())
		return t, nil
	}
	name, dbURL, err := b.createDB(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, b.dropDB(name)) }()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := pg.Migrate(ctx, dbURL, quiet); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(pg.ConnString(dbURL))
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = appendWriters
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	st, err := pg.New(ctx, pool, quiet)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	if _, err := pool.Exec(ctx, scratchSchema); err != nil {
		return nil, fmt.Errorf("scratch tables: %w", err)
	}
	data, err := json.Marshal(sessionlog.ChunkData{Turn: 1, Step: 1, Chunk: sessionlog.Chunk{Type: string(model.ChunkText), Text: "a few words of streamed text "}})
	if err != nil {
		return nil, err
	}

	sessions := make([]string, appendSessions)
	for i := range sessions {
		sessions[i] = fmt.Sprintf("bench-append-%d", i)
		if err := st.CreateSession(ctx, store.Session{ID: sessions[i], Label: "bench"}); err != nil {
			return nil, err
		}
		if _, err := pool.Exec(ctx, `INSERT INTO bench_sessions (id) VALUES ($1)`, sessions[i]); err != nil {
			return nil, err
		}
	}
	ev := store.NewEvent{Type: sessionlog.EventAssistantChunk, Data: data}
	writers := []struct {
		name string
		fn   func(ctx context.Context, session string) error
	}{
		{"pg.Store.AppendEvents", func(ctx context.Context, session string) error {
			_, err := st.AppendEvents(ctx, session, ev)
			return err
		}},
		{"raw pgx, Store's tx shape (BEGIN, append, pg_notify, COMMIT)", func(ctx context.Context, session string) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, rawAppend, store.DefaultTenant, session, ev.Type, time.Now(), string(ev.Data)); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, "bench", session)
				return err
			})
		}},
		{"raw pgx, BEGIN, append, COMMIT (no NOTIFY)", func(ctx context.Context, session string) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, rawAppend, store.DefaultTenant, session, ev.Type, time.Now(), string(ev.Data))
				return err
			})
		}},
		{"raw pgx, autocommit append, then pg_notify on its own", func(ctx context.Context, session string) error {
			if _, err := pool.Exec(ctx, rawAppend, store.DefaultTenant, session, ev.Type, time.Now(), string(ev.Data)); err != nil {
				return err
			}
			_, err := pool.Exec(ctx, `SELECT pg_notify($1, $2)`, "bench", session)
			return err
		}},
		{"raw pgx, one autocommit statement (floor)", func(ctx context.Context, session string) error {
			_, err := pool.Exec(ctx, rawAppend, store.DefaultTenant, session, ev.Type, time.Now(), string(ev.Data))
			return err
		}},
	}
	// The writers take turns in rounds, so that a change in the machine's
	// load during the scenario hits them all alike.
	rounds := 5
	if b.opts.quick {
		rounds = 2
	}
	results := make([]measured, len(writers))
	for range rounds {
		for i, w := range writers {
			m, err := b.appendLoop(ctx, name, b.opts.duration/time.Duration(rounds), sessions, w.fn)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", w.name, err)
			}
			results[i] = results[i].merge(m)
		}
	}
	for i, w := range writers {
		b.log.Info("append", slog.String("writer", w.name), slog.String("events/s", num(results[i].perSec())))
	}
	floor := results[len(results)-1]
	for i, w := range writers {
		m := results[i]
		t.add(w.name, fmt.Sprint(m.n), num(m.perSec()), ms(m.lat.pct(50)), ms(m.lat.pct(99)), m.walPerOp(), ratio(floor.perSec(), m.perSec()), m.waits.String())
	}
	t.note("Each writer appends one assistant/chunk event (%d bytes of JSON) per call, for %s per row in %d rounds taken in turn; writers %d apart share a session, so %d queue on each session row's lock, held until commit.", len(data), b.opts.duration, rounds, appendSessions, appendWriters/appendSessions)
	t.note("The raw rows write the same columns, keys and JSON into scratch tables bench_sessions/bench_events of the same database.")
	t.note(waitsNote)
	return t, nil
}

// appendLoop runs appendWriters writers calling fn for dur, writer i on
// session i mod len(sessions), in database db.
func (b *bench) appendLoop(ctx context.Context, db string, dur time.Duration, sessions []string, fn func(context.Context, string) error) (measured, error) {
	return b.measure(ctx, appendWriters, dur, db, func(ctx context.Context, i int) (time.Duration, error) {
		t0 := time.Now()
		err := fn(ctx, sessions[i%len(sessions)])
		return time.Since(t0), err
	})
}
