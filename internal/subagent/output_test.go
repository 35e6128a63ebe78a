package subagent

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
)

// logOf builds a session log from (type, payload) pairs, seq = index.
func logOf(pairs ...any) []store.Event {
	var out []store.Event
	for i := 0; i < len(pairs); i += 2 {
		data, err := json.Marshal(pairs[i+1])
		if err != nil {
			panic(err)
		}
		out = append(out, store.Event{Seq: int64(len(out)), Type: pairs[i].(string), Data: data})
	}
	return out
}

func message(blocks ...model.Block) agent.AssistantMessageData {
	return agent.AssistantMessageData{Turn: 1, Step: 1, Message: agent.AssistantMessage{Role: "assistant", Content: blocks}}
}

func chunk(kind, text string) agent.ChunkData {
	return agent.ChunkData{Turn: 1, Step: 1, Chunk: agent.Chunk{Type: kind, Text: text}}
}

var toolCall = model.Block{Type: "tool-call", Raw: json.RawMessage(`{"type":"tool-call","callId":"c","name":"read","arguments":"{}"}`)}

func TestSelectOutput(t *testing.T) {
	t.Parallel()
	text := string(model.ChunkText)
	tests := []struct {
		name string
		log  []store.Event
		want string // JSON of the selected blocks
	}{
		{"nothing", nil, `[]`},
		{"last non-empty message wins",
			logOf(agent.EventAssistantMessage, message(model.TextBlock("first")), agent.EventAssistantMessage, message(model.TextBlock("second"))),
			`[{"type":"text","text":"second"}]`},
		{"empty usage-only message is ignored (§8.3)",
			logOf(agent.EventAssistantMessage, message(model.TextBlock("answer")), agent.EventAssistantMessage, message()),
			`[{"type":"text","text":"answer"}]`},
		{"textless message still counts",
			logOf(agent.EventAssistantChunk, chunk(text, "streamed"), agent.EventAssistantMessage, message(toolCall)),
			`[{"type":"tool-call","callId":"c","name":"read","arguments":"{}"}]`},
		{"message beats later streamed text",
			logOf(agent.EventAssistantMessage, message(model.TextBlock("complete")), agent.EventAssistantChunk, chunk(text, "partial")),
			`[{"type":"text","text":"complete"}]`},
		{"text deltas joined when no message",
			logOf(agent.EventAssistantChunk, chunk(text, "hel"), agent.EventAssistantChunk, chunk("reasoning-delta", "hmm"),
				agent.EventToolResult, agent.ToolResultData{CallID: "c", Content: []model.Block{model.TextBlock("tool")}},
				agent.EventAssistantChunk, chunk(text, "lo"), agent.EventAssistantMessage, message()),
			`[{"type":"text","text":"hello"}]`},
		{"reasoning only streamed is no output",
			logOf(agent.EventAssistantChunk, chunk("reasoning-delta", "hmm")),
			`[]`},
	}
	for _, tt := range tests {
		got, err := json.Marshal(SelectOutput(tt.log))
		if err != nil || string(got) != tt.want {
			t.Errorf("%s: got %s, want %s", tt.name, got, tt.want)
		}
	}
}

func turnStart(n int) agent.TurnData { return agent.TurnData{Turn: n} }
func step(n int) agent.StepData      { return agent.StepData{Turn: n, Step: 1} }
func turnEnd(n int, kind string) agent.TurnEndData {
	return agent.TurnEndData{Turn: n, Reason: agent.TurnReason{Kind: kind}}
}

var (
	claim       = agent.InboxSplicedData{Target: agent.TargetNextTurn, RemovedCount: 1, Inserted: []agent.UserMessage{}}
	insert      = agent.InboxSplicedData{Target: agent.TargetNextTurn, Inserted: []agent.UserMessage{{ID: "m"}}}
	cancelUnrun = agent.InboxSplicedData{Target: agent.TargetNextTurn, RemovedCount: 1, Inserted: []agent.UserMessage{}, Outcome: agent.OutcomeCanceled}
)

func TestFoldConsumedWork(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		log     []store.Event
		endTurn int // 0 = no accounting turn
		kind    string
		dropped bool
	}{
		{"empty", nil, 0, "", false},
		{"stepped turn accounts",
			logOf(agent.EventTurnStart, turnStart(1), agent.EventStepStart, step(1), agent.EventTurnEnd, turnEnd(1, agent.ReasonCompleted)),
			1, agent.ReasonCompleted, false},
		{"completed no-step turn does not account",
			logOf(agent.EventTurnStart, turnStart(1), agent.EventStepStart, step(1), agent.EventTurnEnd, turnEnd(1, agent.ReasonMaxTokens),
				agent.EventTurnStart, turnStart(2), agent.EventInboxSpliced, claim, agent.EventTurnEnd, turnEnd(2, agent.ReasonCompleted)),
			1, agent.ReasonMaxTokens, false},
		{"claimed blocked turn accounts",
			logOf(agent.EventTurnStart, turnStart(1), agent.EventInboxSpliced, claim, agent.EventTurnEnd, turnEnd(1, agent.ReasonBlocked)),
			1, agent.ReasonBlocked, false},
		{"unclaimed aborted no-step turn does not account",
			logOf(agent.EventTurnStart, turnStart(1), agent.EventTurnEnd, turnEnd(1, agent.ReasonAborted)),
			0, "", false},
		{"canceled claim does not count as claimed",
			logOf(agent.EventTurnStart, turnStart(1), agent.EventInboxSpliced, cancelUnrun, agent.EventTurnEnd, turnEnd(1, agent.ReasonAborted)),
			0, "", true},
		{"work dropped after the accounting turn",
			logOf(agent.EventTurnStart, turnStart(1), agent.EventStepStart, step(1), agent.EventTurnEnd, turnEnd(1, agent.ReasonCompleted),
				agent.EventInboxSpliced, insert, agent.EventInboxSpliced, cancelUnrun),
			1, agent.ReasonCompleted, true},
		{"a later accounting turn resets dropped",
			logOf(agent.EventInboxSpliced, cancelUnrun, agent.EventTurnStart, turnStart(1), agent.EventStepStart, step(1), agent.EventTurnEnd, turnEnd(1, agent.ReasonError)),
			1, agent.ReasonError, false},
		{"canceled with replacement is not dropped",
			logOf(agent.EventInboxSpliced, agent.InboxSplicedData{Target: agent.TargetNextStep, Inserted: []agent.UserMessage{{ID: "x"}}, Outcome: agent.OutcomeCanceled}),
			0, "", false},
	}
	for _, tt := range tests {
		end, dropped := FoldConsumedWork(tt.log)
		switch {
		case tt.endTurn == 0 && end != nil:
			t.Errorf("%s: end = %+v, want none", tt.name, end)
		case tt.endTurn != 0 && (end == nil || end.Turn != tt.endTurn || end.Reason.Kind != tt.kind):
			t.Errorf("%s: end = %+v, want turn %d %s", tt.name, end, tt.endTurn, tt.kind)
		}
		if dropped != tt.dropped {
			t.Errorf("%s: droppedUnrun = %v", tt.name, dropped)
		}
	}
}

func TestOneShotStopReason(t *testing.T) {
	t.Parallel()
	end := func(kind string) *TurnEnd { return &TurnEnd{Reason: agent.TurnReason{Kind: kind}} }
	tests := []struct {
		end       *TurnEnd
		cancelled bool
		want      string
	}{
		{end(agent.ReasonCompleted), false, StopCompleted},
		{end(agent.ReasonMaxTokens), false, StopMaxTokens},
		{end(agent.ReasonAborted), false, StopAborted},
		{end(agent.ReasonBlocked), false, StopRefusal},
		{end(agent.ReasonError), false, StopError},
		{end(agent.ReasonInterrupted), false, StopError},
		{end("novel"), false, StopError},
		{nil, false, StopError},
		{nil, true, StopAborted},
		{end(agent.ReasonMaxTokens), true, StopAborted},
		{end(agent.ReasonError), true, StopAborted},
	}
	for _, tt := range tests {
		if got := OneShotStopReason(tt.end, tt.cancelled); got != tt.want {
			t.Errorf("OneShotStopReason(%+v, %v) = %s, want %s", tt.end, tt.cancelled, got, tt.want)
		}
	}
}

func TestOneShotStopReason_R25_CompletedStaysCompleted(t *testing.T) {
	t.Parallel()
	done := &TurnEnd{Reason: agent.TurnReason{Kind: agent.ReasonCompleted}}
	if got := OneShotStopReason(done, true); got != StopCompleted {
		t.Errorf("a finished turn cancelled afterwards = %s, want completed", got)
	}
}

func TestOneShotResult(t *testing.T) {
	t.Parallel()
	completed := logOf(agent.EventTurnStart, turnStart(1), agent.EventStepStart, step(1),
		agent.EventAssistantMessage, message(model.TextBlock("answer")), agent.EventTurnEnd, turnEnd(1, agent.ReasonCompleted))
	failed := logOf(agent.EventTurnStart, turnStart(1), agent.EventStepStart, step(1), agent.EventAssistantChunk, chunk("text-delta", "par"),
		agent.EventTurnEnd, agent.TurnEndData{Turn: 1, Reason: agent.TurnReason{Kind: agent.ReasonError, Message: "model unavailable"}})
	captured := json.RawMessage(`{"ok":true}`)
	tests := []struct {
		name            string
		log             []store.Event
		cancelled, want bool
		structured      json.RawMessage
		result          Result
	}{
		{"completed", completed, false, false, nil, Result{Output: []model.Block{model.TextBlock("answer")}, StopReason: StopCompleted}},
		{"failed keeps partial output and message", failed, false, false, nil,
			Result{Output: []model.Block{model.TextBlock("par")}, StopReason: StopError, Diagnostic: "model unavailable"}},
		{"schema satisfied", completed, false, true, captured,
			Result{Output: []model.Block{model.TextBlock("answer")}, StopReason: StopCompleted, Structured: captured}},
		{"schema without capture", completed, false, true, nil,
			Result{Output: []model.Block{model.TextBlock("answer")}, StopReason: StopError, Diagnostic: "the child finished without recording structured output"}},
		{"schema without capture, cancelled", completed, true, true, nil,
			Result{Output: []model.Block{model.TextBlock("answer")}, StopReason: StopAborted, Diagnostic: "the child finished without recording structured output"}},
		{"capture kept on any reason", failed, true, true, captured,
			Result{Output: []model.Block{model.TextBlock("par")}, StopReason: StopAborted, Structured: captured, Diagnostic: "model unavailable"}},
		{"nothing ran", nil, false, false, nil, Result{Output: []model.Block{}, StopReason: StopError}},
	}
	for _, tt := range tests {
		got := OneShotResult(tt.log, tt.cancelled, tt.want, tt.structured)
		for i := range got.Output {
			got.Output[i].Raw = nil
		}
		if !reflect.DeepEqual(got, tt.result) {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.name, got, tt.result)
		}
	}
}

func TestTruncateDiagnostic(t *testing.T) {
	t.Parallel()
	exact := strings.Repeat("a", MaxDiagnosticBytes)
	if got := TruncateDiagnostic(exact); got != exact {
		t.Error("a 4096-byte diagnostic was changed")
	}
	long := strings.Repeat("a", MaxDiagnosticBytes+1)
	got := TruncateDiagnostic(long)
	if len(got) != MaxDiagnosticBytes || !strings.HasSuffix(got, DiagnosticSuffix) {
		t.Errorf("len %d, suffix %v", len(got), strings.HasSuffix(got, DiagnosticSuffix))
	}
	// A multi-byte character straddling the cut is dropped whole.
	cut := MaxDiagnosticBytes - len(DiagnosticSuffix)
	multi := strings.Repeat("a", cut-1) + "€" + strings.Repeat("b", 100)
	got = TruncateDiagnostic(multi)
	if !utf8.ValidString(got) || got != strings.Repeat("a", cut-1)+DiagnosticSuffix {
		t.Errorf("cut inside a character: %q…", got[len(got)-40:])
	}
	if TruncateDiagnostic("short") != "short" {
		t.Error("short diagnostic changed")
	}
}
