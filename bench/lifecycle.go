package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/subagentd/subagentd/internal/pg"
)

// runShape is the child log of one echo run as the service wrote it, which
// the pgx floor writes again.
type runShape struct {
	types []string
	data  []string
}

// lifecycle is scenario 1: for 1, 16 and 64 concurrent clients, one-shot
// echo runs on the in-memory store and on Postgres, against the pgx floor:
// one bare transaction per run writing the same rows.
func (b *bench) lifecycle(ctx context.Context) (*table, error) {
	t := &table{
		title: "1. Run lifecycle: POST /v1/runs?wait=true (spawn, echo model) → subagent/end seen on /v1/events",
		head:  []string{"store", "clients", "runs", "runs/s", "p50", "p99", "write tx/run", "WAL/run", "floor ÷ ours", "Postgres backends by state"},
	}
	var shape *runShape
	for _, clients := range []int{1, 16, 64} {
		mem, err := b.lifecycleService(ctx, "memstore", clients, &shape)
		if err != nil {
			return nil, err
		}
		if b.admin == nil {
			t.add("memstore", fmt.Sprint(clients), fmt.Sprint(mem.n), num(mem.perSec()), ms(mem.lat.pct(50)), ms(mem.lat.pct(99)), "–", "–", "–", "–")
			t.unavailable("postgres", b.pgErr.Error())
			continue
		}
		pgm, err := b.lifecycleService(ctx, "postgres", clients, &shape)
		if err != nil {
			return nil, err
		}
		floor, err := b.lifecycleFloor(ctx, clients, *shape)
		if err != nil {
			return nil, err
		}
		for _, r := range []struct {
			name string
			m    measured
		}{{"memstore", mem}, {"postgres", pgm}, {"pgx floor", floor}} {
			t.add(r.name, fmt.Sprint(clients), fmt.Sprint(r.m.n), num(r.m.perSec()), ms(r.m.lat.pct(50)), ms(r.m.lat.pct(99)),
				r.m.xidPerOp(), r.m.walPerOp(), ratio(floor.perSec(), r.m.perSec()), r.m.waits.String())
		}
	}
	t.note("Each client creates one root session, then starts runs back to back for %s; latency runs from sending the POST to the arrival of the run's subagent/end on one /v1/events subscription. A fresh service (and database) per row.", b.opts.duration)
	if shape != nil {
		t.note("pgx floor: per run, one implicit transaction (one pgx batch, one commit) inserting the child session, its %d log events (the types and payloads an echo run logged), the run row and its settlement, and both lifecycle rows through lifecycle_counter — the service's schema, without HTTP, the agent loop, NOTIFY or the separate commits the API promises (start durable before 201, each log append durable).", len(shape.types))
	}
	t.note("write tx/run and WAL/run are the server's transaction-id and WAL growth over the measurement ÷ runs: cluster-wide, so whatever else writes to the server meanwhile counts too. floor ÷ ours > 1 means the bare database does that many times more runs per second.")
	t.note(waitsNote)
	return t, nil
}

// lifecycleService measures one store with clients concurrent clients on a
// fresh service. It fills *shape from the first run it sees.
func (b *bench) lifecycleService(ctx context.Context, storeName string, clients int, shape **runShape) (_ measured, err error) {
	var m measured
	dbName, dbURL := "", ""
	if storeName == "postgres" {
		if dbName, dbURL, err = b.createDB(ctx); err != nil {
			return m, err
		}
		defer func() { err = errors.Join(err, b.dropDB(dbName)) }()
	}
	svc, err := b.startService(ctx, fmt.Sprintf("s1-%s-c%d", storeName, clients), dbURL)
	if err != nil {
		return m, err
	}
	defer func() { err = errors.Join(err, b.stopService(svc)) }()
	a := newAPI(svc.base, clients+4)
	defer a.close()
	w, err := a.watchEnds(ctx, "")
	if err != nil {
		return m, err
	}
	defer w.close()

	// Root sessions, and one warm-up run per client (connections, caches).
	roots := make([]string, clients)
	g, gctx := errgroup.WithContext(ctx)
	for i := range roots {
		g.Go(func() error {
			var err error
			if roots[i], err = a.createSession(gctx, "bench"); err != nil {
				return err
			}
			r, err := a.createRun(gctx, roots[i], true)
			if err != nil {
				return err
			}
			_, err = w.run(gctx, r.RunID)
			if err == nil && i == 0 && *shape == nil {
				*shape, err = a.childLog(gctx, r.ChildSessionID)
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return m, fmt.Errorf("warm-up: %w", err)
	}

	m, err = b.measure(ctx, clients, b.opts.duration, dbName, func(ctx context.Context, i int) (time.Duration, error) {
		t0 := time.Now()
		r, err := a.createRun(ctx, roots[i], true)
		if err != nil {
			return 0, err
		}
		end, err := w.run(ctx, r.RunID)
		return end.at.Sub(t0), err
	})
	if err != nil {
		return m, err
	}
	b.log.Info("lifecycle", slog.String("store", storeName), slog.Int("clients", clients), slog.Int("runs", m.n),
		slog.String("runs/s", num(m.perSec())))
	return m, nil
}

// childLog reads the log of session id (one page is enough for an echo run).
func (a *api) childLog(ctx context.Context, id string) (*runShape, error) {
	var page struct {
		Events []struct {
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		} `json:"events"`
	}
	if err := a.call(ctx, http.MethodGet, "/v1/sessions/"+id+"/events?limit=1000", nil, http.StatusOK, &page); err != nil {
		return nil, err
	}
	s := &runShape{}
	for _, e := range page.Events {
		s.types = append(s.types, e.Type)
		s.data = append(s.data, string(e.Data))
	}
	if len(s.types) == 0 {
		return nil, fmt.Errorf("the child log of session %s is empty", id)
	}
	return s, nil
}

// Statements of the pgx floor, on the service's schema (migrations/).
const (
	floorChild = `INSERT INTO sessions (id, parent_id, origin, delegation_depth, provider, mode, created_at)
		VALUES ($1, $2, 'subagent', 1, 'spawn', 'one-shot', $3)`
	floorEvents = `WITH s AS (
			UPDATE sessions SET last_seq = last_seq + cardinality($2::text[])
			WHERE tenant = 'default' AND id = $1
			RETURNING last_seq - cardinality($2::text[]) AS before
		)
		INSERT INTO session_events (session_id, seq, type, time, data)
		SELECT $1, s.before + e.n, e.type, $3, e.data::jsonb
		FROM s, unnest($2::text[], $4::text[]) WITH ORDINALITY AS e (type, data, n)`
	floorRun = `INSERT INTO runs (id, kind, provider, child_id, parent_id, local, state, started_at, owner, lease_until)
		VALUES ($1, 'one-shot', 'spawn', $2, $3, true, 'running', $4, 'bench', $4::timestamptz + interval '30 seconds')`
	floorSettle = `UPDATE runs SET state = 'settled', ended_at = $2, stop_reason = 'completed', output = $3::jsonb
		WHERE tenant = 'default' AND id = $1`
	// The counter row is taken last, so its lock is held the shortest.
	floorLifecycle = `WITH c AS (UPDATE lifecycle_counter SET last_id = last_id + 2 RETURNING last_id)
		INSERT INTO lifecycle_events (id, type, parent_id, run_id, time, payload)
		SELECT c.last_id - 1, 'subagent/start', $1::text, $2::text, $3::timestamptz, $4::jsonb FROM c
		UNION ALL SELECT c.last_id, 'subagent/end', $1::text, $2::text, $3::timestamptz, $5::jsonb FROM c`
)

// lifecycleFloor measures clients concurrent writers of one floor
// transaction per run on a fresh migrated database.
func (b *bench) lifecycleFloor(ctx context.Context, clients int, shape runShape) (_ measured, err error) {
	var m measured
	name, dbURL, err := b.createDB(ctx)
	if err != nil {
		return m, err
	}
	defer func() { err = errors.Join(err, b.dropDB(name)) }()
	if err := pg.Migrate(ctx, dbURL, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		return m, err
	}
	cfg, err := pgxpool.ParseConfig(pg.ConnString(dbURL))
	if err != nil {
		return m, err
	}
	cfg.MaxConns = int32(clients)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return m, err
	}
	defer pool.Close()

	roots := make([]string, clients)
	for i := range roots {
		roots[i] = "root-" + rand.Text()
		if _, err := pool.Exec(ctx, `INSERT INTO sessions (id, created_at) VALUES ($1, now())`, roots[i]); err != nil {
			return m, fmt.Errorf("floor root session: %w", err)
		}
	}
	const output = `[{"type":"text","text":"echo: hello from the bench"}]`
	m, err = b.measure(ctx, clients, b.opts.duration, name, func(ctx context.Context, i int) (time.Duration, error) {
		root, child, run := roots[i], rand.Text(), rand.Text()
		payload := fmt.Sprintf(`{"runId":%q,"provider":"spawn","id":%q,"local":true,"parentSessionId":%q`, run, child, root)
		t0 := time.Now()
		var batch pgx.Batch
		batch.Queue(floorChild, child, root, t0)
		batch.Queue(floorEvents, child, shape.types, t0, shape.data)
		batch.Queue(floorRun, run, child, root, t0)
		batch.Queue(floorSettle, run, t0, output)
		batch.Queue(floorLifecycle, root, run, t0, payload+"}",
			payload+`,"stopReason":"completed","lastAssistantMessage":`+output+"}")
		if err := pool.SendBatch(ctx, &batch).Close(); err != nil {
			return 0, fmt.Errorf("floor transaction: %w", err)
		}
		return time.Since(t0), nil
	})
	if err != nil {
		return m, err
	}
	b.log.Info("lifecycle floor", slog.Int("clients", clients), slog.Int("tx", m.n), slog.String("tx/s", num(m.perSec())))
	return m, nil
}
