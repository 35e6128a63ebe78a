package http

import (
	"net/http"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/echo"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// treeBound bounds how long a dispose or tree cancel may take to settle
// what it stops (issue 25: within 10 s); it is a bound, never a wait.
const treeBound = 10 * time.Second

// echoRoute is the deterministic echo model, which understands "/sleep".
func echoRoute() model.Route {
	return model.Route{Name: "echo", Kind: model.KindEcho, DefaultModel: "echo", Model: echo.New()}
}

func disposeChild(child, parent string) call {
	return call{method: http.MethodDelete, path: "/v1/subagents/" + child + "?parentSessionId=" + parent}
}

// endsOf returns the subagent/end events of run runID in the lifecycle
// log.
func (b *testBundle) endsOf(t *testing.T, runID string) []store.LifecycleEvent {
	t.Helper()
	all, err := b.st.Lifecycle(t.Context(), store.LifecycleFilter{Types: []string{subagent.EventEnd}, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []store.LifecycleEvent
	for _, e := range all {
		if e.RunID == runID {
			out = append(out, e)
		}
	}
	return out
}

// TestSubagents_DisposeSettlesOnceAndRefusesFollowups: DELETE
// /v1/subagents/{childId} on a child whose turn sleeps answers 204 once
// its task settled, exactly once and aborted; later followups get 409
// DISPOSED, a second DELETE 204 again; only the durable parent may
// dispose — on both stores.
func TestSubagents_DisposeSettlesOnceAndRefusesFollowups(t *testing.T) {
	for name, st := range bothStores {
		t.Run(name, func(t *testing.T) {
			w := setupWorldWith(t, st(t), echoRoute())
			parent := w.rootSession(t)
			other := w.rootSession(t)
			child := w.startChild(t, parent, "/sleep 30s\nwork", nil)

			w.wantProblem(t, http.StatusForbidden, subagent.EUnauthorized, disposeChild(child.ChildID, other))
			w.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest,
				call{method: http.MethodDelete, path: "/v1/subagents/" + child.ChildID, invalid: true})

			began := time.Now()
			w.want(t, http.StatusNoContent, disposeChild(child.ChildID, parent))
			if took := time.Since(began); took > treeBound {
				t.Fatalf("dispose took %v", took)
			}
			// The answer came after the settlement: it is recorded.
			run := w.settledTask(t, child.TaskID)
			if run.Result.StopReason != subagent.StopAborted {
				t.Fatalf("disposed task %+v", run.Result)
			}
			if ends := w.endsOf(t, run.RunID); len(ends) != 1 {
				t.Fatalf("disposed task has %d subagent/end events", len(ends))
			}

			w.wantProblem(t, http.StatusConflict, subagent.EDisposed, followup(child.ChildID, parent, "more"))
			w.want(t, http.StatusNoContent, disposeChild(child.ChildID, parent))
			w.wantProblem(t, http.StatusConflict, subagent.EDisposed, followup(child.ChildID, parent, "more"))
			if ends := w.endsOf(t, run.RunID); len(ends) != 1 {
				t.Fatalf("after a second dispose the task has %d subagent/end events", len(ends))
			}
			if at, err := w.st.Disposed(t.Context(), child.ChildID); err != nil || at.IsZero() {
				t.Fatalf("Disposed(child) = %v, %v", at, err)
			}
		})
	}
}

// TestSubagents_DisposeIdleChild: a child that settled is disposed
// without starting it; its followups are refused 409 DISPOSED.
func TestSubagents_DisposeIdleChild(t *testing.T) {
	w := setupWorld(t, echoRoute())
	parent := w.rootSession(t)
	child := w.startChild(t, parent, "hello", nil)
	if run := w.settledTask(t, child.TaskID); run.Result.StopReason != subagent.StopCompleted {
		t.Fatalf("first task %+v", run.Result)
	}
	w.want(t, http.StatusNoContent, disposeChild(child.ChildID, parent))
	w.wantProblem(t, http.StatusConflict, subagent.EDisposed, followup(child.ChildID, parent, "more"))
	runs, err := w.st.ListRuns(t.Context(), store.RunFilter{ChildID: child.ChildID})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs of the disposed child: %d, %v", len(runs), err)
	}
}
