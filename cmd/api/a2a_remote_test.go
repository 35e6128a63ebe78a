package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/subagentd/subagentd/internal/providers/a2a/a2atest"
)

// a2aRemote is a2atest's scripted remote agent, served in the test process
// for subagentd processes to drive through an A2A provider.
type a2aRemote struct {
	*a2atest.Agent
	cardURL string
}

// newA2ARemote starts a remote whose card says it streams.
func newA2ARemote(t *testing.T) *a2aRemote {
	t.Helper()
	rm := &a2aRemote{Agent: a2atest.NewAgent()}
	rm.cardURL = a2atest.Serve(t, rm.Agent, a2atest.Options{Streaming: true})
	return rm
}

// config writes a subagentd config file naming the remote as provider
// "remote" and returns its path.
func (rm *a2aRemote) config(t *testing.T) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "subagentd.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "providers:\n  - name: remote\n    type: a2a\n    url: %s\n", rm.cardURL), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// remoteChild creates a root session on s and, under it, a continuable
// child of provider "remote" prompted with text; it returns the root, the
// child and the child's first task.
func (s *server) remoteChild(t *testing.T, label, text string) (parent, childID, taskID string) {
	t.Helper()
	var root struct{ ID string }
	s.call(t, http.MethodPost, "/v1/sessions", `{"label":"parent"}`, http.StatusCreated, &root)
	childID, taskID = s.startChild(t, "remote", root.ID, label, text)
	return root.ID, childID, taskID
}

// A remote agent's input-required is an approval of the asking child:
// approval/requested names the child and the agent's question, a decision
// through POST /v1/approvals/{id}/decision goes to the agent as the next
// message in that task, and the task — the child's turn — completes with
// the agent's answer to it. The child's next followup is a new task in the
// same context.
func TestA2AProvider_InputRequiredIsAnApproval(t *testing.T) {
	t.Parallel()
	rm := newA2ARemote(t)
	s := &server{base: wiredServer(t, map[string]string{"SUBAGENTD_CONFIG": rm.config(t), "SUBAGENTD_A2A_ALLOW_PRIVATE": "true"})}
	events := s.follow(t, "/v1/events?after=0&types=approval/requested,approval/decided")
	parent, childID, taskID := s.remoteChild(t, "asker", "input which file?")
	req := events.wait(t, "approval/requested", func(fr frame) bool {
		return fr.event == "approval/requested" && fr.data["sessionId"] == childID
	})
	tool, _ := req.data["toolCall"].(map[string]any)
	if tool["title"] != "which file?" || req.data["taskId"] != taskID {
		t.Fatalf("approval/requested %s, want the agent's question for the child's task", req.raw)
	}
	s.call(t, http.MethodPost, "/v1/approvals/"+req.data["approvalId"].(string)+"/decision", `{"outcome":"allow","reason":"main.go"}`, http.StatusOK, nil)
	if got := taskText(t, s, taskID); got != "answered: main.go" {
		t.Fatalf("the child's task %q, want the agent's answer to the decision", got)
	}
	types, _ := s.childLog(t, childID)
	if !slices.Contains(types, "approval/requested") || !slices.Contains(types, "approval/decided") {
		t.Fatalf("child log %v, want the approval's request and decision", types)
	}
	fu := s.followup(t, parent, childID, "echo next")
	if got := taskText(t, s, fu.TaskID); got != "echo: next" {
		t.Fatalf("followup %q", got)
	}
	contexts, tasks := rm.Seen()
	if len(tasks) != 3 || tasks[1] != tasks[0] || tasks[2] == tasks[0] || contexts[2][0] != contexts[0][1] {
		t.Fatalf("remote tasks %v in contexts %v, want the decision in the asking task and the followup a new task of its context", tasks, contexts)
	}
}
