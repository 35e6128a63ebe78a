package pg_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/subagentd/subagentd/internal/children"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/pg"
	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/providers/inprocess"
	"github.com/subagentd/subagentd/internal/providers/inprocess/inprocesstest"
	"github.com/subagentd/subagentd/internal/providers/spawn"
	"github.com/subagentd/subagentd/internal/subagent"
)

// tripCounter is a pgx tracer that counts round trips (a query, or a
// batch) and statements, leaving out the notifier's wake-ups and its looks
// for other replicas.
type tripCounter struct {
	mu                       sync.Mutex
	trips, statements, wakes int
	sqls                     []string
	// focus, when set, is a session id: a round trip none of whose
	// arguments is focus counts as "unrelated".
	focus string
}

// setFocus makes the round trips that do not name id count as unrelated.
func (c *tripCounter) setFocus(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.focus = id
}

func (c *tripCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.count([]string{d.SQL}, d.Args)
	return ctx
}

func (c *tripCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *tripCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	sqls := make([]string, len(d.Batch.QueuedQueries))
	var args []any
	for i, q := range d.Batch.QueuedQueries {
		sqls[i] = q.SQL
		args = append(args, q.Arguments...)
	}
	c.count(sqls, args)
	return ctx
}

func (c *tripCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *tripCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (c *tripCounter) count(sqls []string, args []any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, q := range sqls {
		if strings.Contains(q, "pg_notify") || strings.Contains(q, "pg_stat_activity") || strings.HasPrefix(strings.TrimSpace(q), "LISTEN") {
			c.wakes++
			return
		}
	}
	c.trips++
	all := strings.Join(sqls, ";")
	kind := "other"
	switch {
	case strings.Contains(all, "INSERT INTO sessions") && strings.Contains(all, "INSERT INTO runs"):
		kind = "start"
	case strings.Contains(all, "INSERT INTO sessions"):
		kind = "create"
	case strings.Contains(all, "UPDATE runs"):
		kind = "settle"
	case strings.Contains(all, "INSERT INTO session_events"):
		kind = "append"
	case strings.Contains(all, "INSERT INTO residents"):
		kind = "claim"
	case isRead(sqls):
		kind = "read"
	}
	if c.focus != "" && !slices.Contains(args, any(c.focus)) {
		kind = "unrelated"
	}
	c.sqls = append(c.sqls, kind)
	for _, q := range sqls {
		if q != "BEGIN" && q != "COMMIT" {
			c.statements++
		}
	}
}

// isRead reports whether every statement of a round trip is a SELECT.
func isRead(sqls []string) bool {
	for _, q := range sqls {
		if q := strings.TrimSpace(q); !strings.HasPrefix(q, "SELECT") || strings.Contains(q, "set_config") {
			return false
		}
	}
	return true
}

func (c *tripCounter) snapshot() (trips, statements int, sqls []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.trips, c.statements, append([]string(nil), c.sqls...)
}

// tracedStore returns a Store on the database at url whose round trips
// counter counts.
func tracedStore(t *testing.T, url string) (*pg.Store, *tripCounter) {
	t.Helper()
	counter := &tripCounter{}
	return newStore(t, tracedPool(t, url, counter)), counter
}

// TestRoundTrips_OneShotRun counts what one in-process one-shot run costs
// Postgres, start to settlement, run after run: its child, prompt, run row
// and subagent/start (up to the first step's step/start) are one round
// trip, and the settlement, with the stream's deltas and the turn's end,
// one more. Nothing is read back.
func TestRoundTrips_OneShotRun(t *testing.T) {
	st, counter := tracedStore(t, pgtest.URL(t))
	mdl := scripted.Func(func(model.Request) scripted.Step { return scripted.Step{Text: "done"} })
	h := inprocesstest.New(t, inprocesstest.Config{Routes: []model.Route{inprocesstest.Route("script", mdl)}, Store: st})
	const runs = 5
	twoTrips := 0
	for i := range runs {
		trips0, stmts0, kinds0 := counter.snapshot()
		run := h.Start(t, spawn.Name, h.Request("go"))
		if res := inprocesstest.Settle(t, run); res.StopReason != subagent.StopCompleted {
			t.Fatalf("run %d: %+v", i, res)
		}
		trips, stmts, kinds := counter.snapshot()
		kinds = kinds[len(kinds0):]
		t.Logf("run %d: %d round trips, %d statements: %q", i, trips-trips0, stmts-stmts0, kinds)
		// The model streams two deltas at once, well within the chunk
		// writer's linger: they go with the settlement. A run preempted for
		// longer than the linger mid-stream appends them on their own.
		appends := len(kinds) - 2
		if appends == 0 {
			twoTrips++
		}
		if len(kinds) < 2 || kinds[0] != "start" || kinds[len(kinds)-1] != "settle" || appends > 1 ||
			slices.ContainsFunc(kinds[1:len(kinds)-1], func(k string) bool { return k != "append" }) {
			t.Errorf("run %d: round trips %q, want the start, at most one chunk append, the settlement", i, kinds)
		}
	}
	if twoTrips == 0 {
		t.Errorf("no run of %d was the start and the settlement alone", runs)
	}
}

// TestRoundTrips_ContinuableStart counts the writes an in-process
// continuable child's start costs Postgres before it is answered (the 201
// of POST /v1/subagents): the claim of its lease, then one commit of its
// header and creation log, its prompt and the opening of its first turn,
// and its activation's run row and subagent/start. Reads aside (the check
// that the child id is new) and what other sessions write meanwhile (the
// previous child's loop letting its lease go), nothing else.
func TestRoundTrips_ContinuableStart(t *testing.T) {
	st, counter := tracedStore(t, pgtest.URL(t))
	mdl := scripted.Func(func(model.Request) scripted.Step { return scripted.Step{Text: "done"} })
	h := inprocesstest.New(t, inprocesstest.Config{Routes: []model.Route{inprocesstest.Route("script", mdl)}, Store: st})
	m := children.NewManager(h.Service, children.ManagerConfig{Materializer: inprocess.NewMaterializer(h.Deps), Logger: h.Logger})
	t.Cleanup(func() {
		if err := m.Shutdown(context.Background()); err != nil {
			t.Errorf("manager shutdown: %v", err)
		}
	})
	ends := inprocesstest.WatchEnds(h.Service)
	for i := range 3 {
		req := h.Request("go")
		id := fmt.Sprintf("child-%d", i)
		counter.setFocus(id)
		_, _, kinds0 := counter.snapshot()
		started, err := m.StartContinuable(inprocesstest.Ctx(t), children.ContinuableRequest{Provider: spawn.Name, Label: "c", ChildID: id,
			Prompt: req.Prompt, Parent: req.Parent})
		if err != nil {
			t.Fatal(err)
		}
		_, _, kinds := counter.snapshot()
		// The first turn may run ahead of the answer: what comes after
		// the start is its, not the start's.
		kinds = kinds[len(kinds0):]
		if j := slices.Index(kinds, "start"); j >= 0 {
			kinds = kinds[:j+1]
		}
		writes := slices.DeleteFunc(slices.Clone(kinds), func(k string) bool { return k == "read" || k == "unrelated" })
		t.Logf("start %d: round trips up to the start's commit: %q", i, kinds)
		if !slices.Equal(writes, []string{"claim", "start"}) {
			t.Errorf("start %d: writes before the answer %q, want the lease's claim and the start", i, writes)
		}
		ends.Wait(t, started.TaskID)
	}
}
