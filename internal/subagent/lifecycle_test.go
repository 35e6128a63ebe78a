package subagent

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/subagentd/subagentd/internal/model"
)

// TestEventPayload_MatchesEncodingJSON: the hand-written payload is what
// json.Marshal wrote for eventPayload, for every event shape.
func TestEventPayload_MatchesEncodingJSON(t *testing.T) {
	events := []Event{
		{Type: EventProviderAdded, Provider: "spawn", RunID: "ignored", Local: true},
		{Type: EventProviderRemoved, Provider: `odd "name" <&>`},
		{Type: EventStart, RunID: "r1", Provider: "spawn", ID: "c1", Local: true, ParentID: "p1"},
		{Type: EventStart, RunID: "r2", Provider: "acp", ID: "c2", ParentID: "p2", TaskID: "t2"},
		{Type: EventEnd, RunID: "r1", Provider: "spawn", ID: "c1", Local: true, ParentID: "p1", StopReason: StopCompleted,
			LastAssistantMessage: []model.Block{model.TextBlock("echo: <hi> ü\n"), {Type: "image", Raw: json.RawMessage(`{ "type": "image" }`)}}},
		{Type: EventEnd, RunID: "r3", Provider: "spawn", StopReason: StopAborted, LastAssistantMessage: []model.Block{}},
	}
	for _, e := range events {
		got, err := EventPayload(e)
		if err != nil {
			t.Fatal(err)
		}
		p := eventPayload{Provider: e.Provider}
		if IsRunEvent(e.Type) {
			local := e.Local
			p.RunID, p.ID, p.Local, p.ParentSessionID, p.TaskID = e.RunID, e.ID, &local, e.ParentID, e.TaskID
		}
		if e.Type == EventEnd {
			p.StopReason, p.LastAssistantMessage = e.StopReason, e.LastAssistantMessage
		}
		want, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s payload\n got %s\nwant %s", e.Type, got, want)
		}
	}
}
