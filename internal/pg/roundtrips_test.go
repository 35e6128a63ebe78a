package pg_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/pg"
	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/providers/inprocess/inprocesstest"
	"github.com/subagentd/subagentd/internal/providers/spawn"
	"github.com/subagentd/subagentd/internal/subagent"
)

// tripCounter is a pgx tracer that counts round trips (a query, or a
// batch) and statements, leaving out the notifier's wake-ups.
type tripCounter struct {
	mu                       sync.Mutex
	trips, statements, wakes int
	sqls                     []string
}

func (c *tripCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.count([]string{d.SQL})
	return ctx
}

func (c *tripCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *tripCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	sqls := make([]string, len(d.Batch.QueuedQueries))
	for i, q := range d.Batch.QueuedQueries {
		sqls[i] = q.SQL
	}
	c.count(sqls)
	return ctx
}

func (c *tripCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *tripCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (c *tripCounter) count(sqls []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, q := range sqls {
		if strings.Contains(q, "pg_notify") || strings.HasPrefix(strings.TrimSpace(q), "LISTEN") {
			c.wakes++
			return
		}
	}
	c.trips++
	words := strings.Fields(sqls[0])
	c.sqls = append(c.sqls, strings.Join(words[:min(3, len(words))], " "))
	for _, q := range sqls {
		if q != "BEGIN" && q != "COMMIT" {
			c.statements++
		}
	}
}

func (c *tripCounter) snapshot() (trips, statements int, sqls []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.trips, c.statements, append([]string(nil), c.sqls...)
}

// TestRoundTrips_OneShotRun counts what one in-process one-shot run costs
// Postgres, start to settlement, run after run: its child, prompt, run row
// and subagent/start (up to the first step's step/start) are one round trip, the log's appends one each, the
// settlement with the turn's end one. Nothing is read back.
func TestRoundTrips_OneShotRun(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	counter := &tripCounter{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st, err := pg.New(t.Context(), pool, discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	mdl := scripted.Func(func(model.Request) scripted.Step { return scripted.Step{Text: "done"} })
	h := inprocesstest.New(t, inprocesstest.Config{Routes: []model.Route{inprocesstest.Route("script", mdl)}, Store: st})
	const runs = 5
	const wantTrips = 3 // start (with step 1 entered); chunks; the settlement
	for i := range runs {
		trips0, stmts0, sqls0 := counter.snapshot()
		run := h.Start(t, spawn.Name, h.Request("go"))
		if res := inprocesstest.Settle(t, run); res.StopReason != subagent.StopCompleted {
			t.Fatalf("run %d: %+v", i, res)
		}
		trips, stmts, sqls := counter.snapshot()
		t.Logf("run %d: %d round trips, %d statements: %q", i, trips-trips0, stmts-stmts0, sqls[len(sqls0):])
		if trips-trips0 > wantTrips {
			t.Errorf("run %d took %d round trips, want at most %d", i, trips-trips0, wantTrips)
		}
	}
}
