package a2a

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/subagentd/subagentd/internal/subagent"
	"github.com/subagentd/subagentd/internal/webhooks"
)

// TestPushBody: a push body is a StreamResponse holding the task's status
// update — working at its start, the state its stop reason maps to at its
// end, with the reason as the status message when it did not complete —
// and the same event builds the same bytes (a retry resends them).
func TestPushBody(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ap := &webhooks.PushApproval{ID: "ap-1", ToolCallID: "call-9", Title: "Delete build/", ToolKind: "delete"}
	for _, c := range []struct {
		stop     string
		approval *webhooks.PushApproval
		want     a2a.TaskState
		why      bool
	}{
		{"", nil, a2a.TaskStateWorking, false},
		{"", ap, a2a.TaskStateInputRequired, true},
		{subagent.StopCompleted, nil, a2a.TaskStateCompleted, false},
		{subagent.StopAborted, nil, a2a.TaskStateCanceled, true},
		{"error", nil, a2a.TaskStateFailed, true},
	} {
		e := webhooks.PushEvent{TaskID: "task-1", ContextID: "ctx-1", StopReason: c.stop, Approval: c.approval, At: at}
		b, err := PushBody(e)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := PushBody(e)
		if !bytes.Equal(b, again) {
			t.Fatalf("%q: two bodies of one event differ:\n%s\n%s", c.stop, b, again)
		}
		var sr a2a.StreamResponse
		if err := json.Unmarshal(b, &sr); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		up, ok := sr.Event.(*a2a.TaskStatusUpdateEvent)
		if !ok || up.TaskID != "task-1" || up.ContextID != "ctx-1" || up.Status.State != c.want || !up.Status.Timestamp.Equal(at) || (up.Status.Message != nil) != c.why {
			t.Fatalf("%q: body %s, want state %s", c.stop, b, c.want)
		}
		if c.approval != nil && !bytes.Contains(b, []byte(`"approvalId":"ap-1"`)) {
			t.Fatalf("input-required body %s: want the approval as a data part", b)
		}
	}
}
