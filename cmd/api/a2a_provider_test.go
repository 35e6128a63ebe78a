package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/subagent"
)

// innerToken is the bearer token of the inner subagentd's tenant.
const innerToken = "inner-a2a-token-0123456789abcdef"

// An A2A provider pointing at another subagentd's A2A face: subagentd →
// A2A → subagentd. The outer run is one task of the inner spawn provider;
// its text comes back as the run's result and into the outer child's log;
// an outer continuable child is one inner context (the inner's own
// continuable child) across followups; and cancelling the outer run
// cancels the inner task. The provider sends
// the inner's token on every call (the inner refuses calls without one).
// Not parallel: bearerEnv names a process variable.
func TestA2AProvider_DelegatesToSubagentdOverA2A(t *testing.T) {
	t.Setenv("INNER_A2A_TOKEN", innerToken)
	inner := &server{base: wiredServer(t, map[string]string{"SUBAGENTD_TOKENS": "inner:" + innerToken})}
	cfg := filepath.Join(t.TempDir(), "subagentd.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil,
		"providers:\n  - name: inner\n    type: a2a\n    url: %s/a2a/spawn/.well-known/agent-card.json\n    auth: {bearerEnv: INNER_A2A_TOKEN}\n",
		inner.base), 0o600); err != nil {
		t.Fatal(err)
	}
	outer := &server{base: wiredServer(t, map[string]string{"SUBAGENTD_CONFIG": cfg, "SUBAGENTD_A2A_ALLOW_PRIVATE": "true"})}

	var parent struct{ ID string }
	outer.call(t, http.MethodPost, "/v1/sessions", `{"label":"outer"}`, http.StatusCreated, &parent)

	// A one-shot run completes with the inner echo as its result.
	var run struct {
		RunID          string
		ChildSessionID string
		State          string
		Result         struct {
			Output     []struct{ Text string }
			StopReason string
			Diagnostic string
		}
	}
	outer.call(t, http.MethodPost, "/v1/runs?wait=true", `{"provider":"inner","parentSessionId":"`+parent.ID+`","prompt":[{"type":"text","text":"hello inner"}]}`, http.StatusCreated, &run)
	if run.Result.StopReason != "completed" || len(run.Result.Output) != 1 || run.Result.Output[0].Text != "echo: hello inner" {
		t.Fatalf("run = %+v, want completed with the inner echo", run)
	}
	var log struct {
		Events []struct {
			Type string
			Data json.RawMessage
		}
	}
	outer.call(t, http.MethodGet, "/v1/sessions/"+run.ChildSessionID+"/events", "", http.StatusOK, &log)
	var text string
	var types []string
	for _, e := range log.Events {
		types = append(types, e.Type)
		var d struct{ Chunk struct{ Type, Text string } }
		if e.Type == "assistant/chunk" && json.Unmarshal(e.Data, &d) == nil && d.Chunk.Type == "text-delta" {
			text += d.Chunk.Text
		}
	}
	if text != "echo: hello inner" || types[0] != "turn/start" || types[len(types)-1] != "turn/end" {
		t.Fatalf("child log %v with text %q", types, text)
	}

	// A continuable child is one inner context, which is the inner's own
	// continuable child: a followup is its second turn.
	var started struct{ ChildID, TaskID string }
	outer.call(t, http.MethodPost, "/v1/subagents", `{"provider":"inner","parentSessionId":"`+parent.ID+`","label":"remote","prompt":`+prompt("first")+`}`, http.StatusCreated, &started)
	child, task := started.ChildID, started.TaskID
	if got := taskText(t, outer, task); got != "echo: first" {
		t.Fatalf("first task %q", got)
	}
	fu := outer.followup(t, parent.ID, child, "second")
	if fu.Route != subagent.RouteStarted || taskText(t, outer, fu.TaskID) != "echo: second" {
		t.Fatalf("followup %+v", fu)
	}
	types, data := outer.childLog(t, child)
	var contexts []string
	for i, typ := range types {
		if typ == "a2a/task" {
			var d struct{ ContextID string }
			if err := json.Unmarshal([]byte(data[i]), &d); err != nil {
				t.Fatal(err)
			}
			contexts = append(contexts, d.ContextID)
		}
	}
	if len(contexts) != 2 || contexts[0] == "" || contexts[1] != contexts[0] {
		t.Fatalf("the outer child's tasks ran in contexts %v, want one", contexts)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, inner.base+"/v1/subagents/"+contexts[0], nil)
	req.Header.Set("Authorization", "Bearer "+innerToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the inner has no continuable child %s: %s", contexts[0], resp.Status)
	}

	// Cancelling a run whose inner task sleeps cancels the inner task.
	outer.call(t, http.MethodPost, "/v1/runs", `{"provider":"inner","parentSessionId":"`+parent.ID+`","prompt":[{"type":"text","text":"/sleep 60s\nslow"}]}`, http.StatusCreated, &run)
	feed := outer.follow(t, "/v1/sessions/"+run.ChildSessionID+"/stream")
	got := feed.wait(t, "the inner task", func(f frame) bool { return f.event == "a2a/task" })
	frameData, _ := got.data["data"].(map[string]any)
	taskID, _ := frameData["taskId"].(string)
	if taskID == "" {
		t.Fatalf("a2a/task frame %s names no task", got.raw)
	}
	outer.call(t, http.MethodPost, "/v1/runs/"+run.RunID+"/cancel", "", http.StatusAccepted, nil)
	outer.call(t, http.MethodGet, "/v1/runs/"+run.RunID+"?wait=60", "", http.StatusOK, &run)
	if run.Result.StopReason != "aborted" {
		t.Fatalf("cancelled run = %+v, want aborted", run)
	}
	c, _ := a2aClient(t, inner.base, "spawn", a2a.TransportProtocolJSONRPC, innerToken)
	// The outer run settled without waiting for the inner agent: follow
	// the inner task until it ends (a task that already ended cannot be
	// subscribed to), then read it.
	for ev, err := range c.SubscribeToTask(t.Context(), &a2a.SubscribeToTaskRequest{ID: a2a.TaskID(taskID)}) {
		if st, ok := ev.(*a2a.TaskStatusUpdateEvent); err != nil || ok && st.Status.State.Terminal() {
			break
		}
	}
	innerTask, err := c.GetTask(t.Context(), &a2a.GetTaskRequest{ID: a2a.TaskID(taskID)})
	if err != nil || innerTask.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("inner task %s = %+v, %v; want canceled", taskID, innerTask, err)
	}
}

// A continuable A2A child survives a SIGKILL of the replica that drove
// it: the restarted process (on the same Postgres) reads the child's
// context from its log, and the followup is the inner's second task of
// the same context.
func TestRestart_ContinuableA2AChildKeepsItsContext(t *testing.T) {
	t.Parallel()
	inner := &server{base: wiredServer(t, map[string]string{"SUBAGENTD_TOKENS": "inner:" + innerToken})}
	cfg := filepath.Join(t.TempDir(), "subagentd.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil,
		"providers:\n  - name: inner\n    type: a2a\n    url: %s/a2a/spawn/.well-known/agent-card.json\n    auth: {bearerEnv: INNER_A2A_TOKEN}\n",
		inner.base), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"SUBAGENTD_CONFIG": cfg, "SUBAGENTD_A2A_ALLOW_PRIVATE": "true", "INNER_A2A_TOKEN": innerToken,
		"DATABASE_URL": pgtest.URL(t), "SUBAGENTD_REPLICA_ID": "replica-" + t.Name(),
	}
	s := startServer(t, env)
	var parent struct{ ID string }
	s.call(t, http.MethodPost, "/v1/sessions", `{"label":"outer"}`, http.StatusCreated, &parent)
	var started struct{ ChildID, TaskID string }
	s.call(t, http.MethodPost, "/v1/subagents", `{"provider":"inner","parentSessionId":"`+parent.ID+`","label":"remote","prompt":`+prompt("first")+`}`, http.StatusCreated, &started)
	if got := taskText(t, s, started.TaskID); got != "echo: first" {
		t.Fatalf("first task %q", got)
	}
	if err := s.stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("the SIGKILLed server exited cleanly")
	}

	s2 := startServer(t, env)
	fu := s2.followup(t, parent.ID, started.ChildID, "second")
	if fu.Route != subagent.RouteStarted || taskText(t, s2, fu.TaskID) != "echo: second" {
		t.Fatalf("followup after the restart %+v", fu)
	}
	types, data := s2.childLog(t, started.ChildID)
	var contexts []string
	for i, typ := range types {
		if typ == "a2a/task" {
			var d struct{ ContextID string }
			if err := json.Unmarshal([]byte(data[i]), &d); err != nil {
				t.Fatal(err)
			}
			contexts = append(contexts, d.ContextID)
		}
	}
	if len(contexts) != 2 || contexts[0] == "" || contexts[1] != contexts[0] {
		t.Fatalf("the child's tasks ran in contexts %v, want one across the restart", contexts)
	}
	if err := s2.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("second server: %v", err)
	}
}

// An A2A provider whose agent cannot be reached is listed by /readyz as
// unavailable, with the reason; the server is ready otherwise.
func TestA2AProvider_UnreachableAgentIsListedByReadyz(t *testing.T) {
	t.Parallel()
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	cfg := filepath.Join(t.TempDir(), "subagentd.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "providers:\n  - name: gone\n    type: a2a\n    url: %s/card.json\n", down.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &server{base: wiredServer(t, map[string]string{"SUBAGENTD_CONFIG": cfg, "SUBAGENTD_A2A_ALLOW_PRIVATE": "true"})}
	var ready struct {
		Status               string
		UnavailableProviders []struct{ Name, Reason string }
	}
	s.call(t, http.MethodGet, "/readyz", "", http.StatusOK, &ready)
	if len(ready.UnavailableProviders) != 1 || ready.UnavailableProviders[0].Name != "gone" ||
		!strings.Contains(ready.UnavailableProviders[0].Reason, "fetch the agent card") {
		t.Fatalf("readyz = %+v, want the A2A provider unavailable", ready)
	}
}
