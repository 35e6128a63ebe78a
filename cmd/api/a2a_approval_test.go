package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// TestA2A_ApprovalAsInputRequired: an ACP child under permission: ask that
// asks permission makes its task input-required — in the stream and in
// GetTask, with the approval's tool call and options as a DataPart — and
// a message into the task carrying {approvalId, optionId} decides it: the
// task works again and completes with the option the agent was told.
func TestA2A_ApprovalAsInputRequired(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fake := filepath.Join(dir, "fakeagent")
	if out, err := exec.Command("go", "build", "-o", fake, "../../internal/providers/acp/testdata/fakeagent").CombinedOutput(); err != nil {
		t.Fatalf("build fake agent: %v\n%s", err, out)
	}
	root := t.TempDir()
	cfg := filepath.Join(dir, "subagentd.yaml")
	yaml := fmt.Sprintf("workspaceRoots: [%s]\nproviders:\n  - name: asker\n    command: %s\n    cwd: %s\n    permission: ask\n    env: {FAKE_MODE: permission, FAKE_CAPS: resume}\n", root, fake, root)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	base := wiredServer(t, map[string]string{"SUBAGENTD_CONFIG": cfg, "SUBAGENTD_WEBHOOK_ALLOW_PRIVATE": "true"})
	for _, tp := range a2aTransports {
		t.Run(string(tp), func(t *testing.T) {
			t.Parallel()
			c, _ := a2aClient(t, base, "asker", tp, "")
			url, pushes := pushReceiver(t)
			var task *a2a.Task
			var states []a2a.TaskState
			decided := make(chan error, 1)
			var answer a2a.SendMessageResult
			for ev, err := range c.SendStreamingMessage(t.Context(), textMessage("delete the build", "", "")) {
				if err != nil {
					t.Fatalf("stream: %v (states %v)", err, states)
				}
				switch ev := ev.(type) {
				case *a2a.Task:
					task = ev
				case *a2a.TaskStatusUpdateEvent:
					states = append(states, ev.Status.State)
					if ev.Status.State != a2a.TaskStateInputRequired {
						continue
					}
					approval := approvalOfStatus(t, ev.Status)
					got, err := c.GetTask(t.Context(), &a2a.GetTaskRequest{ID: task.ID})
					if err != nil || got.Status.State != a2a.TaskStateInputRequired || approvalOfStatus(t, got.Status)["approvalId"] != approval["approvalId"] {
						t.Fatalf("GetTask while it waits = %+v, %v; want input-required with the approval", got, err)
					}
					// A push config made now is told of the decision and the completion.
					if _, err := c.CreateTaskPushConfig(t.Context(), &a2a.PushConfig{TaskID: task.ID, URL: url}); err != nil {
						t.Fatal(err)
					}
					bad := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewDataPart(map[string]any{"approvalId": "no-such-approval", "optionId": "yes"}))
					bad.TaskID = task.ID
					if _, err := c.SendMessage(t.Context(), &a2a.SendMessageRequest{Message: bad}); err == nil {
						t.Fatal("a decision for an approval the task does not wait on was taken")
					}
					m := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewDataPart(map[string]any{"approvalId": approval["approvalId"], "optionId": "yes"}))
					m.TaskID = task.ID
					go func() {
						var err error
						answer, err = c.SendMessage(t.Context(), &a2a.SendMessageRequest{Message: m})
						decided <- err
					}()
				}
			}
			if err := <-decided; err != nil {
				t.Fatalf("the decision: %v", err)
			}
			want := []a2a.TaskState{a2a.TaskStateInputRequired, a2a.TaskStateWorking, a2a.TaskStateCompleted}
			if fmt.Sprint(states) != fmt.Sprint(want) {
				t.Fatalf("status updates %v, want %v", states, want)
			}
			for _, want := range []a2a.TaskState{a2a.TaskStateWorking, a2a.TaskStateCompleted} {
				var d pushed
				select {
				case d = <-pushes:
				case <-time.After(60 * time.Second):
					t.Fatalf("no push delivery of %s within 60s", want)
				}
				var sr a2a.StreamResponse
				if err := json.Unmarshal(d.body, &sr); err != nil {
					t.Fatal(err)
				}
				if up, ok := sr.Event.(*a2a.TaskStatusUpdateEvent); !ok || up.TaskID != task.ID || up.Status.State != want {
					t.Fatalf("push delivery %s, want the task %s", d.body, want)
				}
			}
			done, ok := answer.(*a2a.Task)
			if !ok || done.ID != task.ID || done.Status.State != a2a.TaskStateCompleted || artifactText(done) != "selected yes" {
				t.Fatalf("the decision answered %+v, want the task completed with the agent's answer", answer)
			}
		})
	}
}

// approvalOfStatus is the DataPart of an input-required status, checked
// to name the fake agent's tool call and options.
func approvalOfStatus(t *testing.T, st a2a.TaskStatus) map[string]any {
	t.Helper()
	if st.Message == nil {
		t.Fatalf("input-required status %+v has no message", st)
	}
	for _, p := range st.Message.Parts {
		d, ok := p.Content.(a2a.Data)
		if !ok {
			continue
		}
		v, _ := d.Value.(map[string]any)
		call, _ := v["toolCall"].(map[string]any)
		opts, _ := v["options"].([]any)
		if v["approvalId"] == "" || call["title"] != "Delete build/" || len(opts) != 2 {
			t.Fatalf("approval part %v: want the approval of \"Delete build/\" with its 2 options", v)
		}
		return v
	}
	t.Fatalf("input-required status %+v has no data part", st)
	return nil
}
