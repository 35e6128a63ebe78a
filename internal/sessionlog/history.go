package sessionlog

import (
	"encoding/json"
	"slices"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
)

// BlockToolCall is the content block type of a tool call inside an
// assistant/message.
const BlockToolCall = "tool-call"

// toolCallBlock is the JSON shape of a tool-call content block.
type toolCallBlock struct {
	Type      string `json:"type"`
	CallID    string `json:"callId"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ToolCallBlock is the assistant/message content block of tool call c.
func ToolCallBlock(c model.ToolCall) model.Block {
	raw, _ := json.Marshal(toolCallBlock{Type: BlockToolCall, CallID: c.ID, Name: c.Name, Arguments: c.Arguments})
	return model.Block{Type: BlockToolCall, Raw: raw}
}

// NotRun is the synthetic result the model sees for a logged tool call that
// never got a tool/result (its turn was aborted or the process died).
const NotRun = "tool call did not run: the turn was interrupted"

// History is the model-history fold of a session log (a fork seed
// included): user/message, assistant/message and tool/result events are
// the surface; everything else is log-only. Empty assistant messages
// (usage-only records) are skipped, and every assistant tool call gets a
// tool message, synthesised as an error when none was logged, so the
// history is always well formed. A history/snapshot replaces the fold with
// the one it holds, so that a fold may start at the newest snapshot
// (store.LogTail) instead of the start of the log.
//
// It is incremental: a writer keeps one History across model steps and
// feeds it only the events appended since, so a step costs the decoding of
// its new events, not of the whole log. The zero value is an empty
// history; it is not safe for concurrent use.
type History struct {
	msgs []model.Message
	open []model.ToolCall // calls of the last assistant message still without a result
}

// Add folds events, which follow those already added in log order.
func (h *History) Add(events ...store.Event) {
	for _, e := range events {
		h.Fold(e, nil)
	}
}

// Fold folds e, which follows the events already folded. payload is the
// value e's data was encoded from, when the caller has it (then nothing is
// decoded), else nil; an event that does not decode is skipped.
func (h *History) Fold(e store.Event, payload any) {
	switch e.Type {
	case EventUserMessage:
		d, ok := payloadOf[UserMessage](e, payload)
		if !ok {
			return
		}
		h.closeOpen()
		h.msgs = append(h.msgs, model.Message{Role: model.RoleUser, Content: d.Content})
	case EventAssistantMessage:
		d, ok := payloadOf[AssistantMessageData](e, payload)
		if !ok || len(d.Message.Content) == 0 {
			return
		}
		h.closeOpen()
		m := model.Message{Role: model.RoleAssistant}
		for _, b := range d.Message.Content {
			var tc toolCallBlock
			if b.Type == BlockToolCall && json.Unmarshal(b.Raw, &tc) == nil {
				m.ToolCalls = append(m.ToolCalls, model.ToolCall{ID: tc.CallID, Name: tc.Name, Arguments: tc.Arguments})
				continue
			}
			m.Content = append(m.Content, b)
		}
		h.msgs = append(h.msgs, m)
		h.open = slices.Clone(m.ToolCalls)
	case EventSnapshot:
		// The snapshot holds the fold of everything before it: a reader
		// that started at it and one that folded the log agree.
		if d, ok := payloadOf[SnapshotData](e, payload); ok && d.Version == SnapshotVersion {
			h.restore(d)
		}
	case EventToolResult:
		d, ok := payloadOf[ToolResultData](e, payload)
		if !ok {
			return
		}
		if i := slices.IndexFunc(h.open, func(c model.ToolCall) bool { return c.ID == d.CallID }); i >= 0 {
			h.open = slices.Delete(h.open, i, i+1)
		}
		h.msgs = append(h.msgs, model.Message{Role: model.RoleTool, ToolCallID: d.CallID, Content: d.Content, IsError: d.IsError})
	}
}

// closeOpen answers the calls still open with the synthetic NotRun result.
func (h *History) closeOpen() {
	h.msgs = appendNotRun(h.msgs, h.open)
	h.open = nil
}

// Messages returns the history of the events added so far, the calls still
// open answered as not run. Later Adds never change the returned slice, so
// a model request may keep it; callers must not modify it.
func (h *History) Messages() []model.Message {
	return appendNotRun(slices.Clip(h.msgs), h.open)
}

// appendNotRun appends a NotRun tool message for each of calls to msgs.
func appendNotRun(msgs []model.Message, calls []model.ToolCall) []model.Message {
	for _, c := range calls {
		msgs = append(msgs, model.Message{Role: model.RoleTool, ToolCallID: c.ID, IsError: true,
			Content: []model.Block{model.TextBlock(NotRun)}})
	}
	return msgs
}
