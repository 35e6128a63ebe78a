package http

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

func steerCall(runID, text string) call {
	return call{method: http.MethodPost, path: "/v1/runs/" + runID + "/steer", body: map[string]any{"content": textPrompt(text)}}
}

// TestRunsSteer_R96_ActivationRun: POST /v1/runs/{runId}/steer with the
// run of a continuable child's live activation steers strictly: it answers
// 200 once the running turn's next model step admitted the content (the id
// the child logs), and 409 STEER_REJECTED — nothing queued, nothing resumed
// — once the activation settled or after an interrupt; an unknown run is
// 404.
func TestRunsSteer_R96_ActivationRun(t *testing.T) {
	first, stuck := newGate(), newGate()
	mdl := replying(map[string]gate{"start": first, "stuck": stuck})
	w := setupWorld(t, scriptedRoute("main", mdl))
	parent := w.rootSession(t)

	created := w.startChild(t, parent, "start", nil)
	await(t, first.reached, "the child's first model call")
	var task runJSON
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/tasks/" + created.TaskID}).decode(t, &task)
	if task.Kind != store.KindActivation || task.State != store.StateRunning {
		t.Fatalf("task run %+v", task)
	}
	child := w.stream(t, "/v1/sessions/"+created.ChildID+"/stream", nil)
	answer := w.async(t, steerCall(task.RunID, "focus on the tests"))
	untilEvent(t, child, sessionlog.EventInboxSpliced, nextStepInsert)
	close(first.open)
	r := answer()
	var steered steerResponse
	r.decode(t, &steered)
	if r.status != http.StatusOK || steered.MessageID == "" {
		t.Fatalf("steer %d %s", r.status, r.body)
	}
	if run := w.settledTask(t, created.TaskID); outputText(t, run) != "re: focus on the tests" {
		t.Errorf("the steered step answered %q", outputText(t, run))
	}
	var ids []string
	for _, e := range w.sessionLog(t, created.ChildID) {
		if e.Type == sessionlog.EventUserMessage {
			ids = append(ids, decodeUserMessage(t, e).ID)
		}
	}
	if len(ids) != 2 || ids[1] != steered.MessageID {
		t.Errorf("child user message ids %q, want the steer's %s second", ids, steered.MessageID)
	}

	before := len(w.sessionLog(t, created.ChildID))
	p := w.wantProblem(t, http.StatusConflict, subagent.ESteerRejected, steerCall(task.RunID, "too late"))
	if p.Detail == "" {
		t.Error("rejection without detail")
	}
	if after := w.sessionLog(t, created.ChildID); len(after) != before {
		t.Errorf("a rejected steer wrote %d events", len(after)-before)
	}

	interrupted := w.startChild(t, parent, "stuck", nil)
	await(t, stuck.reached, "the second child's model call")
	w.want(t, http.StatusAccepted, interrupt(interrupted.ChildID, parent))
	var run runJSON
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/tasks/" + interrupted.TaskID}).decode(t, &run)
	w.wantProblem(t, http.StatusConflict, subagent.ESteerRejected, steerCall(run.RunID, "ignored"))
	w.settledTask(t, interrupted.TaskID)
	var info subagentJSON
	w.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/subagents/" + interrupted.ChildID}).decode(t, &info)
	if info.TaskID != interrupted.TaskID {
		t.Errorf("the rejected steer started task %s", info.TaskID)
	}
	if got := userTexts(t, w.sessionLog(t, interrupted.ChildID)); slices.Contains(got, "ignored") {
		t.Errorf("the rejected steer reached the child: %q", got)
	}

	w.wantProblem(t, http.StatusNotFound, subagent.ERunNotFound, steerCall("no-such-run", "x"))
}

func decodeUserMessage(t *testing.T, e store.Event) sessionlog.UserMessage {
	t.Helper()
	var m sessionlog.UserMessage
	if err := json.Unmarshal(e.Data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}
