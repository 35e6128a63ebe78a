package main

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Two replicas as real processes on one database, a tree spread over
// both: A drives a root's turn, its continuable child and a one-shot run,
// B a one-shot grandchild under A's run. One tree cancel through B
// settles every run exactly once, aborted with diagnostic "cancelled by
// tree", stops the root's turn on A and fires tree/cancelled once with
// the count, after the ends. Disposing A's running child through B
// settles it and refuses followups through A (409 DISPOSED); disposing
// the root through A refuses prompts through B.
func TestReplicas_TreeControlAcrossReplicas(t *testing.T) {
	t.Parallel()
	db := pgtest.URL(t)
	a := startServer(t, replicaEnv(db, "replica-a"))
	b := startServer(t, replicaEnv(db, "replica-b"))
	events := b.follow(t, "/v1/events?after=0")

	var root struct{ ID string }
	a.call(t, http.MethodPost, "/v1/sessions", `{"label":"tree"}`, http.StatusCreated, &root)
	a.call(t, http.MethodPost, "/v1/sessions/"+root.ID+"/messages", fmt.Sprintf(`{"content":%s}`, prompt("/sleep 30s\nthink")), http.StatusAccepted, nil)
	a.waitStream(t, "/v1/sessions/"+root.ID+"/stream?after=-1", func(typ, _ string) bool { return typ == "step/start" })
	child, task := a.startChild(t, "spawn", root.ID, "researcher", "/sleep 30s\nresearch")
	var onA, onB struct{ RunID, ChildSessionID string }
	a.call(t, http.MethodPost, "/v1/runs", fmt.Sprintf(`{"provider":"spawn","parentSessionId":%q,"prompt":%s}`, root.ID, prompt("/sleep 30s\nwork")), http.StatusCreated, &onA)
	b.call(t, http.MethodPost, "/v1/runs", fmt.Sprintf(`{"provider":"spawn","parentSessionId":%q,"prompt":%s}`, onA.ChildSessionID, prompt("/sleep 30s\ndeeper")), http.StatusCreated, &onB)
	taskRun := events.start(t, "taskId", task).data["runId"].(string)
	events.start(t, "runId", onA.RunID)
	events.start(t, "runId", onB.RunID)

	began := time.Now()
	var got struct{ Cancelled int }
	b.call(t, http.MethodPost, "/v1/sessions/"+root.ID+"/cancel", "", http.StatusAccepted, &got)
	if took := time.Since(began); took > 10*time.Second {
		t.Fatalf("the tree cancel took %v", took)
	}
	if got.Cancelled != 4 {
		t.Fatalf("cancelled %d, want 4 (a task, two runs, the root's turn)", got.Cancelled)
	}
	tc := events.wait(t, governance.EventTreeCancelled, func(fr frame) bool { return fr.event == governance.EventTreeCancelled })
	if tc.data["cancelled"] != float64(4) || tc.data["sessionId"] != root.ID {
		t.Fatalf("tree/cancelled %s", tc.raw)
	}
	for _, id := range []string{taskRun, onA.RunID, onB.RunID} {
		if end := events.end(t, "runId", id); end.data["stopReason"] != subagent.StopAborted || end.id > tc.id {
			t.Fatalf("run %s ended %s (id %d), want aborted before tree/cancelled (id %d)", id, end.raw, end.id, tc.id)
		}
		var run struct {
			Result struct{ StopReason, Diagnostic string }
		}
		a.call(t, http.MethodGet, "/v1/runs/"+id, "", http.StatusOK, &run)
		if run.Result.Diagnostic != governance.DiagnosticCancelled {
			t.Fatalf("run %s settled %+v, want diagnostic %q", id, run.Result, governance.DiagnosticCancelled)
		}
	}
	a.waitStream(t, "/v1/sessions/"+root.ID+"/stream?after=-1", func(typ, _ string) bool { return typ == "turn/end" })

	// A drives the child again; B disposes it.
	fu := a.followup(t, root.ID, child, "/sleep 30s\nagain")
	againRun := events.start(t, "taskId", fu.TaskID).data["runId"].(string)
	b.call(t, http.MethodDelete, "/v1/subagents/"+child+"?parentSessionId="+root.ID, "", http.StatusNoContent, nil)
	if end := events.end(t, "runId", againRun); end.data["stopReason"] != subagent.StopAborted {
		t.Fatalf("disposed task ended %s", end.raw)
	}
	var problem struct{ Code string }
	a.call(t, http.MethodPost, "/v1/subagents/"+child+"/followup", fmt.Sprintf(`{"parentSessionId":%q,"content":%s}`, root.ID, prompt("more")), http.StatusConflict, &problem)
	if problem.Code != subagent.EDisposed {
		t.Fatalf("followup to the disposed child: %+v", problem)
	}
	b.call(t, http.MethodDelete, "/v1/subagents/"+child+"?parentSessionId="+root.ID, "", http.StatusNoContent, nil)

	a.call(t, http.MethodDelete, "/v1/sessions/"+root.ID, "", http.StatusNoContent, nil)
	b.call(t, http.MethodPost, "/v1/sessions/"+root.ID+"/messages", fmt.Sprintf(`{"content":%s}`, prompt("more")), http.StatusConflict, &problem)
	if problem.Code != subagent.EDisposed {
		t.Fatalf("prompt to the disposed root: %+v", problem)
	}

	// Every run ended exactly once.
	events.mu.Lock()
	frames := slices.Clone(events.frames)
	events.mu.Unlock()
	for _, id := range []string{taskRun, onA.RunID, onB.RunID, againRun} {
		n := 0
		for _, fr := range frames {
			if fr.event == subagent.EventEnd && fr.data["runId"] == id {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("run %s has %d subagent/end frames", id, n)
		}
	}
}
