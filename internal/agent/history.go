package agent

import (
	"encoding/json"

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

func newToolCallBlock(c model.ToolCall) model.Block {
	raw, _ := json.Marshal(toolCallBlock{Type: BlockToolCall, CallID: c.ID, Name: c.Name, Arguments: c.Arguments})
	return model.Block{Type: BlockToolCall, Raw: raw}
}

// notRun is the synthetic result the model sees for a logged tool call that
// never got a tool/result (its turn was aborted or the process died).
const notRun = "tool call did not run: the turn was interrupted"

// history rebuilds the model history from a session log (a fork seed
// included): user/message, assistant/message and tool/result events are
// the surface; everything else is log-only. Empty assistant messages
// (usage-only records) are skipped, and every assistant tool call gets a
// tool message, synthesised as an error when none was logged, so the
// history is always well formed.
func history(events []store.Event) []model.Message {
	var out []model.Message
	var open []model.ToolCall // calls of the last assistant message still without a result
	closeOpen := func() {
		for _, c := range open {
			out = append(out, model.Message{Role: model.RoleTool, ToolCallID: c.ID, IsError: true,
				Content: []model.Block{model.TextBlock(notRun)}})
		}
		open = nil
	}
	for _, ev := range events {
		switch ev.Type {
		case EventUserMessage:
			var d UserMessage
			if json.Unmarshal(ev.Data, &d) != nil {
				continue
			}
			closeOpen()
			out = append(out, model.Message{Role: model.RoleUser, Content: d.Content})
		case EventAssistantMessage:
			var d AssistantMessageData
			if json.Unmarshal(ev.Data, &d) != nil || len(d.Message.Content) == 0 {
				continue
			}
			closeOpen()
			m := model.Message{Role: model.RoleAssistant}
			for _, b := range d.Message.Content {
				var tc toolCallBlock
				if b.Type == BlockToolCall && json.Unmarshal(b.Raw, &tc) == nil {
					m.ToolCalls = append(m.ToolCalls, model.ToolCall{ID: tc.CallID, Name: tc.Name, Arguments: tc.Arguments})
					continue
				}
				m.Content = append(m.Content, b)
			}
			out = append(out, m)
			open = m.ToolCalls
		case EventToolResult:
			var d ToolResultData
			if json.Unmarshal(ev.Data, &d) != nil {
				continue
			}
			for i, c := range open {
				if c.ID == d.CallID {
					open = append(open[:i:i], open[i+1:]...)
					break
				}
			}
			out = append(out, model.Message{Role: model.RoleTool, ToolCallID: d.CallID, Content: d.Content, IsError: d.IsError})
		}
	}
	closeOpen()
	return out
}
