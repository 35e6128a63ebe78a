package acp

import (
	sdk "github.com/coder/acp-go-sdk"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
)

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
		return sessionlog.EventACPToolCall, sessionlog.ACPToolCallData{Turn: turn, ToolCallID: string(tc.ToolCallId),
			Title: tc.Title, Kind: string(tc.Kind), Status: string(tc.Status)}, "", true
	case u.ToolCallUpdate != nil:
		tc := u.ToolCallUpdate
		d := sessionlog.ACPToolCallData{Turn: turn, ToolCallID: string(tc.ToolCallId)}
		if tc.Title != nil {
			d.Title = *tc.Title
		}
		if tc.Kind != nil {
			d.Kind = string(*tc.Kind)
		}
		if tc.Status != nil {
			d.Status = string(*tc.Status)
		}
		return sessionlog.EventACPToolCallUpdate, d, "", true
	case u.Plan != nil:
		d := sessionlog.ACPPlanData{Turn: turn, Entries: make([]sessionlog.ACPPlanEntry, len(u.Plan.Entries))}
		for i, e := range u.Plan.Entries {
			d.Entries[i] = sessionlog.ACPPlanEntry{Content: e.Content, Priority: string(e.Priority), Status: string(e.Status)}
		}
		return sessionlog.EventACPPlan, d, "", true
	}
	return "", nil, "", false
}

func blockText(b sdk.ContentBlock) string {
	if b.Text != nil {
		return b.Text.Text
	}
	return ""
}
