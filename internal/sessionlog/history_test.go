package sessionlog

import (
	"encoding/json"
	"testing"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
)

// historyJSON is the encoding of msgs, to compare histories whose blocks
// differ only in the raw JSON decoding keeps.
func historyJSON(t *testing.T, msgs []model.Message) string {
	t.Helper()
	out, err := json.Marshal(msgs)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func TestHistory_SurfaceAndNotRunCalls(t *testing.T) {
	t.Parallel()
	read := model.ToolCall{ID: "c1", Name: "read", Arguments: "{}"}
	lost := model.ToolCall{ID: "c2", Name: "write", Arguments: "{}"}
	pairs := []any{
		EventUserMessage, UserMessage{ID: "m1", Role: "user", Content: []model.Block{model.TextBlock("go")}},
		EventStepStart, StepData{Turn: 1, Step: 1},
		EventAssistantMessage, message(), // usage only: skipped
		EventAssistantMessage, message(model.TextBlock("reading"), ToolCallBlock(read), ToolCallBlock(lost)),
		EventToolResult, ToolResultData{CallID: "c1", Name: "read", Content: []model.Block{model.TextBlock("data")}},
		EventTurnEnd, TurnEndData{Turn: 1, Reason: TurnReason{Kind: ReasonAborted}},
	}
	var h History
	h.Add(logOf(pairs...)...)
	got := h.Messages()
	want := []model.Message{
		{Role: model.RoleUser, Content: []model.Block{model.TextBlock("go")}},
		{Role: model.RoleAssistant, Content: []model.Block{model.TextBlock("reading")}, ToolCalls: []model.ToolCall{read, lost}},
		{Role: model.RoleTool, ToolCallID: "c1", Content: []model.Block{model.TextBlock("data")}},
		{Role: model.RoleTool, ToolCallID: "c2", IsError: true, Content: []model.Block{model.TextBlock(NotRun)}},
	}
	if historyJSON(t, got) != historyJSON(t, want) {
		t.Fatalf("history\n got %s\nwant %s", historyJSON(t, got), historyJSON(t, want))
	}

	// A later user message closes the open call for good, and the history
	// read before it is not changed by what was added since.
	before := historyJSON(t, got)
	h.Add(logOf(EventUserMessage, UserMessage{ID: "m2", Role: "user", Content: []model.Block{model.TextBlock("again")}})...)
	if historyJSON(t, got) != before {
		t.Errorf("an earlier Messages changed: %s", historyJSON(t, got))
	}
	if n := len(h.Messages()); n != 5 {
		t.Errorf("after a second user message: %d messages, want 5", n)
	}
}

// TestHistory_IncrementalAgreesWithWholeLog: a History fed a log in pieces,
// decoded or from the payloads, reads like one fed the whole log at once.
func TestHistory_IncrementalAgreesWithWholeLog(t *testing.T) {
	t.Parallel()
	var pairs []any
	for turn := 1; turn <= 3; turn++ {
		pairs = append(pairs, agentTurn(turn, 3, 2)...)
	}
	log, entries := logOf(pairs...), entriesOf(pairs...)
	var whole History
	whole.Add(log...)
	want := historyJSON(t, whole.Messages())

	var decoded, fed History
	for i, e := range entries {
		decoded.Add(log[i])
		fed.Fold(e.event, e.payload)
		if e.event.Type != EventStepStart {
			continue
		}
		// At every step both read what a fold of the log so far reads.
		var prefix History
		prefix.Add(log[:i+1]...)
		if p, d, f := historyJSON(t, prefix.Messages()), historyJSON(t, decoded.Messages()), historyJSON(t, fed.Messages()); d != p || f != p {
			t.Fatalf("at event %d:\nprefix  %s\ndecoded %s\nfed     %s", i, p, d, f)
		}
	}
	if got := historyJSON(t, fed.Messages()); got != want {
		t.Errorf("fed payloads\n got %s\nwant %s", got, want)
	}
	// An event that does not decode is skipped.
	decoded.Add(store.Event{Type: EventUserMessage, Data: []byte(`{`)})
	if got := historyJSON(t, decoded.Messages()); got != want {
		t.Errorf("after an undecodable event: %s", got)
	}
}
