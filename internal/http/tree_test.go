package http

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/echo"
	"github.com/subagentd/subagentd/internal/providers/spawn"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// treeBound bounds how long a dispose or tree cancel may take to settle
// what it stops: a tree of sleeping runs settles well within it on a
// loaded machine. It is a bound, never a wait.
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

			w.wantProblem(t, http.StatusForbidden, subagent.EForbidden, disposeChild(child.ChildID, other))
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

// sleeper starts a spawn one-shot run under parent whose turn sleeps.
func (w *world) sleeper(t *testing.T, parent string) runJSON {
	t.Helper()
	var run runJSON
	w.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/runs", body: map[string]any{
		"provider": spawn.Name, "parentSessionId": parent, "prompt": textPrompt("/sleep 30s\nwork")}}).decode(t, &run)
	return run
}

// settledRun waits until run id settled and returns it.
func (w *world) settledRun(t *testing.T, id string) runJSON {
	t.Helper()
	var run runJSON
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/runs/" + id + "?wait=30"}).decode(t, &run)
	if run.State == store.StateRunning || run.Result == nil {
		t.Fatalf("run %s did not settle: %+v", id, run)
	}
	return run
}

// treeCancelledEvents returns the data of every tree/cancelled event.
func (b *testBundle) treeCancelledEvents(t *testing.T) []treeCancelResponse {
	t.Helper()
	evs, err := b.st.Lifecycle(t.Context(), store.LifecycleFilter{Types: []string{governance.EventTreeCancelled}, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]treeCancelResponse, len(evs))
	for i, e := range evs {
		if err := json.Unmarshal(e.Payload, &out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestSessions_TreeCancelSettlesEveryRunOnce: one POST
// /v1/sessions/{id}/cancel on a root whose own turn sleeps, with a
// one-shot child, its one-shot grandchild and a continuable child all
// sleeping, settles each run exactly once, aborted with diagnostic
// "cancelled by tree", stops the root's turn, fires tree/cancelled once
// with the count (which the answer gives too); a followup and a prompt
// accepted afterwards run normally. Then DELETE /v1/sessions/{id}
// disposes the tree: later prompts and followups get 409 DISPOSED, and
// a second DELETE answers 204 — on both stores.
func TestSessions_TreeCancelSettlesEveryRunOnce(t *testing.T) {
	for name, st := range bothStores {
		t.Run(name, func(t *testing.T) {
			w := setupWorldWith(t, st(t), echoRoute())
			root := w.rootSession(t)
			rootLog := w.stream(t, "/v1/sessions/"+root+"/stream", nil)
			defer rootLog.close()
			w.want(t, http.StatusAccepted, call{method: http.MethodPost, path: "/v1/sessions/" + root + "/messages",
				body: map[string]any{"content": textPrompt("/sleep 30s\nthink")}})
			untilEvent(t, rootLog, sessionlog.EventTurnStart, nil)

			a := w.sleeper(t, root)
			b := w.sleeper(t, a.ChildSessionID)
			c := w.startChild(t, root, "/sleep 30s\nresearch", nil)
			events := w.stream(t, "/v1/events", nil)
			defer events.close()

			began := time.Now()
			var got treeCancelResponse
			w.want(t, http.StatusAccepted, call{method: http.MethodPost, path: "/v1/sessions/" + root + "/cancel"}).decode(t, &got)
			if took := time.Since(began); took > treeBound {
				t.Fatalf("tree cancel took %v", took)
			}
			if got.Cancelled != 4 {
				t.Fatalf("cancelled %d, want 4 (two runs, one task, the root's turn)", got.Cancelled)
			}
			// The stream carries tree/cancelled once, after the ends.
			ended := map[string]int{}
			for {
				f := events.next(t)
				if f.event == subagent.EventEnd {
					var e lifecycleJSON
					if err := json.Unmarshal(f.data, &e); err != nil {
						t.Fatal(err)
					}
					ended[e.RunID]++
				}
				if f.event == governance.EventTreeCancelled {
					break
				}
			}
			cTask := w.settledTask(t, c.TaskID)
			for _, run := range []runJSON{w.settledRun(t, a.RunID), w.settledRun(t, b.RunID), cTask} {
				if run.Result.StopReason != subagent.StopAborted || run.Result.Diagnostic != governance.DiagnosticCancelled {
					t.Errorf("run %s (%s) settled %+v, want aborted, cancelled by tree", run.RunID, run.Kind, run.Result)
				}
				if ended[run.RunID] != 1 {
					t.Errorf("run %s: %d subagent/end frames before tree/cancelled", run.RunID, ended[run.RunID])
				}
				if ends := w.endsOf(t, run.RunID); len(ends) != 1 {
					t.Errorf("run %s has %d subagent/end events", run.RunID, len(ends))
				}
			}
			untilEvent(t, rootLog, sessionlog.EventTurnEnd, nil)
			if tc := w.treeCancelledEvents(t); len(tc) != 1 || tc[0].Cancelled != 4 {
				t.Fatalf("tree/cancelled events %+v, want one with 4", tc)
			}

			// Nothing is marked: later messages run.
			next := w.followupOK(t, followup(c.ChildID, root, "again"))
			if run := w.settledTask(t, next.TaskID); run.Result.StopReason != subagent.StopCompleted {
				t.Fatalf("followup after the cancel settled %+v", run.Result)
			}
			w.want(t, http.StatusAccepted, call{method: http.MethodPost, path: "/v1/sessions/" + root + "/messages",
				body: map[string]any{"content": textPrompt("hello")}})
			untilEvent(t, rootLog, sessionlog.EventTurnEnd, nil)

			// Dispose the tree.
			w.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest,
				call{method: http.MethodDelete, path: "/v1/sessions/" + c.ChildID})
			w.want(t, http.StatusNoContent, call{method: http.MethodDelete, path: "/v1/sessions/" + root})
			w.wantProblem(t, http.StatusConflict, subagent.EDisposed, call{method: http.MethodPost,
				path: "/v1/sessions/" + root + "/messages", body: map[string]any{"content": textPrompt("more")}})
			w.wantProblem(t, http.StatusConflict, subagent.EDisposed, followup(c.ChildID, root, "more"))
			w.want(t, http.StatusNoContent, call{method: http.MethodDelete, path: "/v1/sessions/" + root})
			w.wantProblem(t, http.StatusConflict, subagent.EDisposed, call{method: http.MethodPost,
				path: "/v1/sessions/" + root + "/messages", body: map[string]any{"content": textPrompt("more")}})
			w.wantProblem(t, http.StatusNotFound, subagent.ESessionNotFound,
				call{method: http.MethodPost, path: "/v1/sessions/nope/cancel"})
		})
	}
}
