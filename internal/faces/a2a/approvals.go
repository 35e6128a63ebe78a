package a2a

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// A task whose agent waits on a pending approval is input-required: its
// status message holds one DataPart per pending approval (approvalPart).
// A message into the task whose DataPart names an approval, with an
// optionId or an outcome, is that approval's decision: it is taken by the
// DecideApproval operation, the one POST /v1/approvals/{id}/decision
// makes, and the task works again. Streams show each approval the task's
// log records as input-required and its close as working.

// approvalPart is a pending approval as its DataPart shows it.
type approvalPart struct {
	ApprovalID string           `json:"approvalId"`
	ToolCall   approvalToolCall `json:"toolCall"`
	Options    []approvalOption `json:"options"`
}

type approvalToolCall struct {
	ID    string `json:"id"`
	Title string `json:"title"`
	Kind  string `json:"kind"`
}

type approvalOption struct {
	OptionID string `json:"optionId"`
	Name     string `json:"name"`
	Kind     string `json:"kind"`
}

// inputRequired is the input-required status of task info at, asking for
// the decisions of pending.
func inputRequired(info a2a.TaskInfo, at time.Time, pending []approvalPart) a2a.TaskStatus {
	parts := make(a2a.ContentParts, 0, len(pending)+1)
	parts = append(parts, a2a.NewTextPart("waiting for a decision; answer with a data part {approvalId, optionId} or {approvalId, outcome: allow|reject}"))
	for _, p := range pending {
		parts = append(parts, a2a.NewDataPart(p.value()))
	}
	return a2a.TaskStatus{State: a2a.TaskStateInputRequired, Timestamp: &at,
		Message: a2a.NewMessageForTask(a2a.MessageRoleAgent, info, parts...)}
}

// value is p as a DataPart's JSON object.
func (p approvalPart) value() map[string]any {
	b, _ := json.Marshal(p) // plain strings and slices: never fails
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

// pending reads the pending approvals of task t from GET /v1/approvals.
func (h *handler) pending(ctx context.Context, t *taskJSON) ([]approvalPart, error) {
	raw, err := h.f.api.ListApprovals(ctx, url.Values{"state": {"pending"}, "sessionId": {t.ChildSessionID}})
	if err != nil {
		return nil, errorOf(ctx, err)
	}
	var page struct {
		Approvals []struct {
			ID       string           `json:"id"`
			TaskID   string           `json:"taskId"`
			ToolCall approvalToolCall `json:"toolCall"`
			Options  []approvalOption `json:"options"`
		} `json:"approvals"`
	}
	if err := json.Unmarshal(raw, &page); err != nil {
		return nil, errorOf(ctx, fmt.Errorf("decode approvals: %w", err))
	}
	var out []approvalPart
	for _, a := range page.Approvals {
		if a.TaskID == t.TaskID {
			out = append(out, approvalPart{ApprovalID: a.ID, ToolCall: a.ToolCall, Options: a.Options})
		}
	}
	return out, nil
}

// logApproval is a session-log event of an approval: approval/requested
// (the approval opened) or approval/decided (it closed).
type logApproval struct {
	Type string `json:"type"`
	Data struct {
		ApprovalID string           `json:"approvalId"`
		ToolCallID string           `json:"toolCallId"`
		Title      string           `json:"title"`
		Kind       string           `json:"kind"`
		Options    []approvalOption `json:"options"`
	} `json:"data"`
}

// approvalStatus is the status change a session-log event of an approval
// makes, if it is one: input-required for the one requested, working
// once it closed.
func approvalStatus(info a2a.TaskInfo, raw json.RawMessage) (a2a.TaskStatus, bool) {
	var ev logApproval
	if json.Unmarshal(raw, &ev) != nil {
		return a2a.TaskStatus{}, false
	}
	now := time.Now()
	switch ev.Type {
	case "approval/requested":
		d := ev.Data
		return inputRequired(info, now, []approvalPart{{ApprovalID: d.ApprovalID,
			ToolCall: approvalToolCall{ID: d.ToolCallID, Title: d.Title, Kind: d.Kind}, Options: d.Options}}), true
	case "approval/decided":
		return a2a.TaskStatus{State: a2a.TaskStateWorking, Timestamp: &now}, true
	}
	return a2a.TaskStatus{}, false
}

// decision is the decision a message carries: a data part with an
// approvalId. ok is false for a message that carries none.
type decision struct {
	ApprovalID string `json:"approvalId"`
	OptionID   string `json:"optionId,omitempty"`
	Outcome    string `json:"outcome,omitempty"`
	Scope      string `json:"scope,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

func decisionOf(msg *a2a.Message) (decision, bool) {
	for _, p := range msg.Parts {
		d, ok := p.Content.(a2a.Data)
		if !ok {
			continue
		}
		b, err := json.Marshal(d.Value)
		var out decision
		if err == nil && json.Unmarshal(b, &out) == nil && out.ApprovalID != "" {
			return out, true
		}
	}
	return decision{}, false
}

// decide takes decision d for an approval pending in task t (as
// getTask read it), through the DecideApproval operation; an approval the
// task does not wait on is invalid params.
func (h *handler) decide(ctx context.Context, t *taskJSON, d decision) error {
	found := false
	for _, p := range t.approvals {
		found = found || p.ApprovalID == d.ApprovalID
	}
	if !found {
		return a2a.NewError(a2a.ErrInvalidParams, fmt.Sprintf("task %s waits on no approval %q", t.TaskID, d.ApprovalID))
	}
	body, _ := json.Marshal(struct {
		OptionID string `json:"optionId,omitempty"`
		Outcome  string `json:"outcome,omitempty"`
		Scope    string `json:"scope,omitempty"`
		Reason   string `json:"reason,omitempty"`
	}{d.OptionID, d.Outcome, d.Scope, d.Reason})
	if _, err := h.f.api.DecideApproval(ctx, d.ApprovalID, body); err != nil {
		return errorOf(ctx, err)
	}
	return nil
}
