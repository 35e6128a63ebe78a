package subagent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/pg"
	"github.com/subagentd/subagentd/internal/pg/pgtest"
)

// pgStores returns n Postgres stores on one new database: each stands for
// one process (or one life of a process) over the shared durable state.
func pgStores(t *testing.T, n int) []*spyStore {
	t.Helper()
	url := pgtest.URL(t)
	out := make([]*spyStore, n)
	for i := range out {
		pool, err := pgxpool.New(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		s, err := pg.New(t.Context(), pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		out[i] = &spyStore{Store: s}
	}
	return out
}

func TestPostgres_R82_R130_StartedFollowupAndRecoveryAfterRestart(t *testing.T) {
	t.Parallel()
	stores := pgStores(t, 2)
	first := newContEnvOver(t, stores[0], scripted.New(scripted.Step{Text: "a"}, scripted.Step{Text: "b"}))
	res := first.start(t, first.req(t, "one"))
	first.ended(t, res.TaskID)
	first.settled(t, res.ChildID)
	f, err := first.m.Followup(t.Context(), "p1", res.ChildID, txt("two"), agent.Source{})
	if err != nil || f.Route != RouteStarted {
		t.Fatalf("followup %+v, %v", f, err)
	}
	first.ended(t, f.TaskID)
	first.settled(t, res.ChildID)
	// Accepted, then the process died before delivering it.
	row, _ := newRow(res.ChildID, txt("three"), agent.Source{Kind: SourceUser})
	if err := stores[0].Enqueue(t.Context(), row); err != nil {
		t.Fatal(err)
	}

	second := newContEnvOver(t, stores[1], scripted.New(scripted.Step{Text: "c"}, scripted.Step{Text: "d"}))
	if err := second.m.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	starts := second.life.waitFor(t, "the recovery activation", func(evs []Event) bool { return len(evs) >= 1 })
	if end := second.ended(t, starts[0].TaskID); model.Text(end.LastAssistantMessage) != "c" {
		t.Errorf("recovered epoch %+v", end)
	}
	second.settled(t, res.ChildID)
	g, err := second.m.Followup(t.Context(), "p1", res.ChildID, txt("four"), agent.Source{})
	if err != nil || g.Route != RouteStarted {
		t.Fatalf("followup after restart %+v, %v", g, err)
	}
	second.ended(t, g.TaskID)
	evs := second.log(t, res.ChildID)
	if got := userTexts(t, evs); !slices.Equal(got, []string{"one", "two", "three", "four"}) {
		t.Errorf("user messages %v", got)
	}
	if n := countType(evs, EventDescriptor); n != 1 {
		t.Errorf("%d descriptors", n)
	}
	if p, _ := stores[1].Pending(t.Context(), res.ChildID); len(p) != 0 {
		t.Errorf("pending %+v", p)
	}
	if run, err := second.m.Task(t.Context(), g.TaskID); err != nil || run.StopReason != StopCompleted {
		t.Errorf("task %+v, %v", run, err)
	}
}

func TestPostgres_FiftyConcurrentFollowupsDeliveredInAcceptanceOrderOnce(t *testing.T) {
	t.Parallel()
	e := newContEnvOver(t, pgStores(t, 1)[0], scripted.Func(func(model.Request) scripted.Step { return scripted.Step{Text: "ok"} }))
	res := e.start(t, e.req(t, "go"))
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			if _, err := e.m.Followup(t.Context(), "p1", res.ChildID, txt(fmt.Sprintf("f%02d", i)), agent.Source{}); err != nil {
				t.Errorf("followup %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	e.settled(t, res.ChildID)
	checkDelivery(t, e, res, 50)
}

func TestPostgres_R103_InterruptThenFollowup(t *testing.T) {
	t.Parallel()
	gate, reached := make(chan struct{}), make(chan struct{})
	e := newContEnvOver(t, pgStores(t, 1)[0], gatedModel(gate, reached, "never"))
	res := e.start(t, e.req(t, "go"))
	<-reached
	out := e.followupAsync(t.Context(), res.ChildID, "parked")
	e.waitLog(t, res.ChildID, "the steer", steersSubmitted(1))
	if err := e.m.Interrupt(t.Context(), "p1", res.ChildID); err != nil {
		t.Fatal(err)
	}
	e.ended(t, res.TaskID)
	if o := await(t, out); o.err != nil || o.res.Route != RouteParked {
		t.Errorf("parked %+v, %v", o.res, o.err)
	}
	e.settled(t, res.ChildID)
	f, err := e.m.Followup(t.Context(), "p1", res.ChildID, txt("new"), agent.Source{})
	if err != nil {
		t.Fatal(err)
	}
	e.ended(t, f.TaskID)
	if got := userTexts(t, e.log(t, res.ChildID)); !slices.Equal(got, []string{"go", "parked", "new"}) {
		t.Errorf("user messages %v", got)
	}
}

func TestPostgres_BadInputAppendsNothing(t *testing.T) {
	t.Parallel()
	e := newContEnvOver(t, pgStores(t, 1)[0], scripted.New(scripted.Step{Text: "ok"}))
	res := e.start(t, e.req(t, "go"))
	e.ended(t, res.TaskID)
	e.settled(t, res.ChildID)
	n := len(e.log(t, res.ChildID))
	if _, err := e.m.Followup(t.Context(), "p1", "nobody", txt("x"), agent.Source{}); ErrorCode(err) != ESessionNotFound {
		t.Errorf("unknown child: %v", err)
	}
	if _, err := e.m.Followup(t.Context(), "someone", res.ChildID, txt("x"), agent.Source{}); ErrorCode(err) != EUnauthorized {
		t.Errorf("wrong parent: %v", err)
	}
	if got := len(e.log(t, res.ChildID)); got != n {
		t.Errorf("log grew from %d to %d", n, got)
	}
	if p, _ := e.st.Pending(t.Context(), res.ChildID); len(p) != 0 {
		t.Errorf("pending %+v", p)
	}
}
