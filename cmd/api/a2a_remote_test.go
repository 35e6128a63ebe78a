package main

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
)

// a2aRemote is a remote A2A agent served by the a2a-go SDK in the test
// process, for subagentd processes to drive through an A2A provider. Its
// executor acts on the prompt's first word:
//
//	echo TEXT  streams "echo: TEXT" and completes
//	gate TEXT  streams "before", waits until the test closes gate, streams
//	           TEXT and completes
//	ask TEXT   asks for input with TEXT as the status message; the message
//	           that answers it in the same task completes the task with
//	           "answered: " and the answer's text
type a2aRemote struct {
	srv  *httptest.Server
	gate chan struct{}

	mu sync.Mutex
	// contexts are, per message executed, the context it named ("" for a
	// new one) and the context it ran in; tasks the task it ran in.
	contexts [][2]string
	tasks    []a2a.TaskID
}

// newA2ARemote starts a remote whose card says it streams.
func newA2ARemote(t *testing.T) *a2aRemote {
	t.Helper()
	rm := &a2aRemote{gate: make(chan struct{})}
	caps := a2a.AgentCapabilities{Streaming: true}
	mux := http.NewServeMux()
	rm.srv = httptest.NewServer(mux)
	t.Cleanup(rm.srv.Close)
	card := &a2a.AgentCard{
		Name: "test remote", Description: "waits, echoes and asks", Version: "1",
		SupportedInterfaces: []*a2a.AgentInterface{a2a.NewAgentInterface(rm.srv.URL+"/rpc", a2a.TransportProtocolJSONRPC)},
		Capabilities:        caps,
		DefaultInputModes:   []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
	}
	mux.Handle("GET /card.json", a2asrv.NewStaticAgentCardHandler(card))
	mux.Handle("/rpc", a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(rm, a2asrv.WithCapabilityChecks(&caps))))
	return rm
}

// config writes a subagentd config file naming the remote as provider
// "remote" and returns its path.
func (rm *a2aRemote) config(t *testing.T) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "subagentd.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "providers:\n  - name: remote\n    type: a2a\n    url: %s/card.json\n", rm.srv.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// seen returns the contexts and tasks of the messages executed so far.
func (rm *a2aRemote) seen() (contexts [][2]string, tasks []a2a.TaskID) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	return append([][2]string(nil), rm.contexts...), append([]a2a.TaskID(nil), rm.tasks...)
}

// Execute is the remote's agent.
func (rm *a2aRemote) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	var text strings.Builder
	for _, p := range ec.Message.Parts {
		text.WriteString(p.Text())
	}
	word, rest, _ := strings.Cut(text.String(), " ")
	rm.mu.Lock()
	rm.contexts = append(rm.contexts, [2]string{ec.Message.ContextID, ec.ContextID})
	rm.tasks = append(rm.tasks, ec.TaskID)
	rm.mu.Unlock()
	answering := ec.StoredTask != nil && ec.StoredTask.Status.State == a2a.TaskStateInputRequired
	return func(yield func(a2a.Event, error) bool) {
		if ec.StoredTask == nil && !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
			return
		}
		if !yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking, nil), nil) {
			return
		}
		artifact := a2a.NewArtifactEvent(ec, a2a.NewTextPart(""))
		send := func(s string) bool {
			return yield(a2a.NewArtifactUpdateEvent(ec, artifact.Artifact.ID, a2a.NewTextPart(s)), nil)
		}
		complete := func() { yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, nil), nil) }
		switch {
		case answering:
			if yield(artifact, nil) && send("answered: "+text.String()) {
				complete()
			}
		case word == "echo":
			if yield(artifact, nil) && send("echo: "+rest) {
				complete()
			}
		case word == "gate":
			if !yield(artifact, nil) || !send("before") {
				return
			}
			select {
			case <-rm.gate:
			case <-ctx.Done():
				return
			}
			if send(rest) {
				complete()
			}
		case word == "ask":
			yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateInputRequired, a2a.NewMessage(a2a.MessageRoleAgent, a2a.NewTextPart(rest))), nil)
		}
	}
}

// Cancel is the remote's tasks/cancel.
func (rm *a2aRemote) Cancel(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, nil), nil)
	}
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
	var parent struct{ ID string }
	s.call(t, http.MethodPost, "/v1/sessions", `{"label":"parent"}`, http.StatusCreated, &parent)
	var child struct{ ChildID, TaskID string }
	s.call(t, http.MethodPost, "/v1/subagents", fmt.Sprintf(`{"provider":"remote","parentSessionId":%q,"label":"asker","prompt":%s}`,
		parent.ID, prompt("ask which file?")), http.StatusCreated, &child)
	req := events.wait(t, "approval/requested", func(fr frame) bool {
		return fr.event == "approval/requested" && fr.data["sessionId"] == child.ChildID
	})
	tool, _ := req.data["toolCall"].(map[string]any)
	if tool["title"] != "which file?" || req.data["taskId"] != child.TaskID {
		t.Fatalf("approval/requested %s, want the agent's question for the child's task", req.raw)
	}
	s.call(t, http.MethodPost, "/v1/approvals/"+req.data["approvalId"].(string)+"/decision", `{"outcome":"allow","reason":"main.go"}`, http.StatusOK, nil)
	if got := taskText(t, s, child.TaskID); got != "answered: main.go" {
		t.Fatalf("the child's task %q, want the agent's answer to the decision", got)
	}
	types, _ := s.childLog(t, child.ChildID)
	if !slices.Contains(types, "approval/requested") || !slices.Contains(types, "approval/decided") {
		t.Fatalf("child log %v, want the approval's request and decision", types)
	}
	fu := s.followup(t, parent.ID, child.ChildID, "echo next")
	if got := taskText(t, s, fu.TaskID); got != "echo: next" {
		t.Fatalf("followup %q", got)
	}
	contexts, tasks := rm.seen()
	if len(tasks) != 3 || tasks[1] != tasks[0] || tasks[2] == tasks[0] || contexts[2][0] != contexts[0][1] {
		t.Fatalf("remote tasks %v in contexts %v, want the decision in the asking task and the followup a new task of its context", tasks, contexts)
	}
}
