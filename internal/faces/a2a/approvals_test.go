package a2a

import (
	"encoding/json"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// TestDecisionOf: a data part naming an approval is a decision; text, and
// data without an approvalId, are not.
func TestDecisionOf(t *testing.T) {
	m := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("ok"), a2a.NewDataPart(map[string]any{"approvalId": "ap-1", "outcome": "allow"}))
	if d, ok := decisionOf(m); !ok || d != (decision{ApprovalID: "ap-1", Outcome: "allow"}) {
		t.Fatalf("decisionOf = %+v, %v", d, ok)
	}
	for _, m := range []*a2a.Message{
		a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(`{"approvalId":"ap-1"}`)),
		a2a.NewMessage(a2a.MessageRoleUser, a2a.NewDataPart(map[string]any{"optionId": "yes"})),
		a2a.NewMessage(a2a.MessageRoleUser, a2a.NewDataPart([]any{1, 2})),
	} {
		if d, ok := decisionOf(m); ok {
			t.Errorf("decisionOf(%+v) = %+v, want none", m.Parts, d)
		}
	}
}

// TestApprovalStatus: the child log's approval/requested is input-required
// with the approval as a data part, approval/decided working again, and
// any other event no status change.
func TestApprovalStatus(t *testing.T) {
	info := a2a.TaskInfo{TaskID: "task-1", ContextID: "ctx-1"}
	req := json.RawMessage(`{"type":"approval/requested","data":{"turn":1,"approvalId":"ap-1","toolCallId":"call-9","title":"Delete build/","kind":"delete","options":[{"optionId":"yes","name":"Allow","kind":"allow_once"}]}}`)
	st, ok := approvalStatus(info, req)
	if !ok || st.State != a2a.TaskStateInputRequired || st.Message == nil || len(st.Message.Parts) != 2 {
		t.Fatalf("approval/requested = %+v, %v", st, ok)
	}
	got, _ := json.Marshal(st.Message.Parts[1].Content.(a2a.Data).Value)
	if want := `{"approvalId":"ap-1","options":[{"kind":"allow_once","name":"Allow","optionId":"yes"}],"toolCall":{"id":"call-9","kind":"delete","title":"Delete build/"}}`; string(got) != want {
		t.Fatalf("data part %s, want %s", got, want)
	}
	if st, ok := approvalStatus(info, json.RawMessage(`{"type":"approval/decided","data":{"approvalId":"ap-1"}}`)); !ok || st.State != a2a.TaskStateWorking {
		t.Fatalf("approval/decided = %+v, %v", st, ok)
	}
	if _, ok := approvalStatus(info, json.RawMessage(`{"type":"assistant/chunk","data":{}}`)); ok {
		t.Fatal("a text chunk changed the status")
	}
}
