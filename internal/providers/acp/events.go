package acp

import (
	"encoding/json"
	"fmt"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Session-log event types that only ACP children write. The agent vocabulary
// (internal/agent/events.go) has no equivalent: an ACP agent runs its own
// tools, so there is no tool/call that the service executes and answers with
// a tool/result. Readers skip types they do not know.
const (
	// EventToolCall records a tool_call update: the agent started a tool.
	EventToolCall = "acp/tool-call"
	// EventToolCallUpdate records a tool_call_update: progress of one.
	EventToolCallUpdate = "acp/tool-call-update"
	// EventPlan records the agent's plan; each event replaces the last.
	EventPlan = "acp/plan"
	// EventPermission records how a session/request_permission was answered.
	EventPermission = "acp/permission"
)

// ToolCallData is the payload of acp/tool-call and acp/tool-call-update.
// Empty fields were not reported (an update carries only what changed). Raw
// tool input and output are deliberately not logged: they can hold whole
// files, and the log only needs to show what the agent is doing.
type ToolCallData struct {
	Turn       int    `json:"turn"`
	ToolCallID string `json:"toolCallId"`
	Title      string `json:"title,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Status     string `json:"status,omitempty"`
}

// PlanData is the payload of acp/plan.
type PlanData struct {
	Turn    int         `json:"turn"`
	Entries []PlanEntry `json:"entries"`
}

// PlanEntry is one task of a plan.
type PlanEntry struct {
	Content  string `json:"content"`
	Priority string `json:"priority,omitempty"`
	Status   string `json:"status,omitempty"`
}

// PermissionData is the payload of acp/permission. Outcome is "selected"
// (OptionID and OptionKind set) or "cancelled".
type PermissionData struct {
	Turn       int    `json:"turn"`
	ToolCallID string `json:"toolCallId"`
	Title      string `json:"title,omitempty"`
	Outcome    string `json:"outcome"`
	OptionID   string `json:"optionId,omitempty"`
	OptionKind string `json:"optionKind,omitempty"`
}

// logUpdate is the child-log event of a session/update in turn and step:
// its type and payload, and the text it adds to the turn's output (only
// message text does; thoughts are logged as reasoning). ok is false for
// updates the log does not record.
func logUpdate(u sdk.SessionUpdate, turn, step int) (typ string, payload any, text string, ok bool) {
	switch {
	case u.AgentMessageChunk != nil:
		if t := blockText(u.AgentMessageChunk.Content); t != "" {
			return sessionlog.EventAssistantChunk, sessionlog.ChunkData{Turn: turn, Step: step,
				Chunk: sessionlog.Chunk{Type: string(model.ChunkText), Text: t}}, t, true
		}
	case u.AgentThoughtChunk != nil:
		if t := blockText(u.AgentThoughtChunk.Content); t != "" {
			return sessionlog.EventAssistantChunk, sessionlog.ChunkData{Turn: turn, Step: step,
				Chunk: sessionlog.Chunk{Type: string(model.ChunkReasoning), Text: t}}, "", true
		}
	case u.ToolCall != nil:
		tc := u.ToolCall
		return EventToolCall, ToolCallData{Turn: turn, ToolCallID: string(tc.ToolCallId),
			Title: tc.Title, Kind: string(tc.Kind), Status: string(tc.Status)}, "", true
	case u.ToolCallUpdate != nil:
		tc := u.ToolCallUpdate
		d := ToolCallData{Turn: turn, ToolCallID: string(tc.ToolCallId)}
		if tc.Title != nil {
			d.Title = *tc.Title
		}
		if tc.Kind != nil {
			d.Kind = string(*tc.Kind)
		}
		if tc.Status != nil {
			d.Status = string(*tc.Status)
		}
		return EventToolCallUpdate, d, "", true
	case u.Plan != nil:
		d := PlanData{Turn: turn, Entries: make([]PlanEntry, len(u.Plan.Entries))}
		for i, e := range u.Plan.Entries {
			d.Entries[i] = PlanEntry{Content: e.Content, Priority: string(e.Priority), Status: string(e.Status)}
		}
		return EventPlan, d, "", true
	}
	return "", nil, "", false
}

func blockText(b sdk.ContentBlock) string {
	if b.Text != nil {
		return b.Text.Text
	}
	return ""
}

// EventSession records the ACP session a continuable child's agent keeps
// its conversation in, so that a later activation — after a restart too —
// resumes that session rather than starting a new one.
const EventSession = "acp/session"

// SessionData is the payload of acp/session.
type SessionData struct {
	SessionID string `json:"sessionId"`
}

// typed is one child-log event before encoding.
type typed struct {
	typ  string
	data any
}

// encode marshals events for store.AppendEvents.
func encode(evs ...typed) ([]store.NewEvent, error) {
	batch := make([]store.NewEvent, len(evs))
	for i, e := range evs {
		data, err := json.Marshal(e.data)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", e.typ, err)
		}
		batch[i] = store.NewEvent{Type: e.typ, Data: data}
	}
	return batch, nil
}

// turnClose is the events that end turn (with its one step) as o says:
// the assistant message when there is output or usage, step/end, turn/end.
func turnClose(turn, step int, output []model.Block, o outcome) []typed {
	var evs []typed
	if len(output) > 0 || o.usage != nil {
		evs = append(evs, typed{sessionlog.EventAssistantMessage, sessionlog.AssistantMessageData{
			Turn: turn, Step: step,
			Message:     sessionlog.AssistantMessage{Role: "assistant", Content: output},
			Usage:       o.usage,
			Interrupted: o.reason == subagent.StopAborted,
		}})
	}
	return append(evs,
		typed{sessionlog.EventStepEnd, sessionlog.StepData{Turn: turn, Step: step}},
		typed{sessionlog.EventTurnEnd, sessionlog.TurnEndData{Turn: turn, Reason: turnReason(o)}})
}
