package subagent

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
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

func message(blocks ...model.Block) sessionlog.AssistantMessageData {
	return sessionlog.AssistantMessageData{Turn: 1, Step: 1, Message: sessionlog.AssistantMessage{Role: "assistant", Content: blocks}}
}

func chunk(kind, text string) sessionlog.ChunkData {
	return sessionlog.ChunkData{Turn: 1, Step: 1, Chunk: sessionlog.Chunk{Type: kind, Text: text}}
}

func turnStart(n int) sessionlog.TurnData { return sessionlog.TurnData{Turn: n} }
func step(n int) sessionlog.StepData      { return sessionlog.StepData{Turn: n, Step: 1} }
func turnEnd(n int, kind string) sessionlog.TurnEndData {
	return sessionlog.TurnEndData{Turn: n, Reason: sessionlog.TurnReason{Kind: kind}}
}

func TestOneShotStopReason(t *testing.T) {
	t.Parallel()
	end := func(kind string) *sessionlog.TurnEnd {
		return &sessionlog.TurnEnd{Reason: sessionlog.TurnReason{Kind: kind}}
	}
	tests := []struct {
		end       *sessionlog.TurnEnd
		cancelled bool
		want      string
	}{
		{end(sessionlog.ReasonCompleted), false, StopCompleted},
		{end(sessionlog.ReasonMaxTokens), false, StopMaxTokens},
		{end(sessionlog.ReasonAborted), false, StopAborted},
		{end(sessionlog.ReasonBlocked), false, StopRefusal},
		{end(sessionlog.ReasonError), false, StopError},
		{end(sessionlog.ReasonInterrupted), false, StopError},
		{end("novel"), false, StopError},
		{nil, false, StopError},
		{nil, true, StopAborted},
		{end(sessionlog.ReasonMaxTokens), true, StopAborted},
		{end(sessionlog.ReasonError), true, StopAborted},
	}
	for _, tt := range tests {
		if got := OneShotStopReason(tt.end, tt.cancelled); got != tt.want {
			t.Errorf("OneShotStopReason(%+v, %v) = %s, want %s", tt.end, tt.cancelled, got, tt.want)
		}
	}
}

func TestOneShotStopReason_R25_CompletedStaysCompleted(t *testing.T) {
	t.Parallel()
	done := &sessionlog.TurnEnd{Reason: sessionlog.TurnReason{Kind: sessionlog.ReasonCompleted}}
	if got := OneShotStopReason(done, true); got != StopCompleted {
		t.Errorf("a finished turn cancelled afterwards = %s, want completed", got)
	}
}

func TestOneShotResult(t *testing.T) {
	t.Parallel()
	completed := logOf(sessionlog.EventTurnStart, turnStart(1), sessionlog.EventStepStart, step(1),
		sessionlog.EventAssistantMessage, message(model.TextBlock("answer")), sessionlog.EventTurnEnd, turnEnd(1, sessionlog.ReasonCompleted))
	failed := logOf(sessionlog.EventTurnStart, turnStart(1), sessionlog.EventStepStart, step(1), sessionlog.EventAssistantChunk, chunk("text-delta", "par"),
		sessionlog.EventTurnEnd, sessionlog.TurnEndData{Turn: 1, Reason: sessionlog.TurnReason{Kind: sessionlog.ReasonError, Message: "model unavailable"}})
	withUsage := message(model.TextBlock("answer"))
	withUsage.Usage = &sessionlog.UsageData{InputTokens: 7, OutputTokens: 2}
	reported := logOf(sessionlog.EventTurnStart, turnStart(1), sessionlog.EventStepStart, step(1),
		sessionlog.EventAssistantMessage, withUsage, sessionlog.EventTurnEnd, turnEnd(1, sessionlog.ReasonCompleted))
	captured := json.RawMessage(`{"ok":true}`)
	// One model call each: completed's message reported no usage, nor did
	// failed's cut stream.
	oneCall := store.Usage{ModelCalls: 1}
	tests := []struct {
		name            string
		log             []store.Event
		cancelled, want bool
		structured      json.RawMessage
		result          Result
	}{
		{"completed", completed, false, false, nil, Result{Output: []model.Block{model.TextBlock("answer")}, StopReason: StopCompleted, Usage: oneCall}},
		{"failed keeps partial output and message", failed, false, false, nil,
			Result{Output: []model.Block{model.TextBlock("par")}, StopReason: StopError, Diagnostic: "model unavailable", Usage: oneCall}},
		{"schema satisfied", completed, false, true, captured,
			Result{Output: []model.Block{model.TextBlock("answer")}, StopReason: StopCompleted, Structured: captured, Usage: oneCall}},
		{"schema without capture", completed, false, true, nil,
			Result{Output: []model.Block{model.TextBlock("answer")}, StopReason: StopError, Diagnostic: "the child finished without recording structured output", Usage: oneCall}},
		{"schema without capture, cancelled", completed, true, true, nil,
			Result{Output: []model.Block{model.TextBlock("answer")}, StopReason: StopAborted, Diagnostic: "the child finished without recording structured output", Usage: oneCall}},
		{"capture kept on any reason", failed, true, true, captured,
			Result{Output: []model.Block{model.TextBlock("par")}, StopReason: StopAborted, Structured: captured, Diagnostic: "model unavailable", Usage: oneCall}},
		{"usage reported", reported, false, false, nil, Result{Output: []model.Block{model.TextBlock("answer")}, StopReason: StopCompleted,
			Usage: store.Usage{InputTokens: 7, OutputTokens: 2, ModelCalls: 1, Reported: 1}, UsageKnown: true}},
		{"nothing ran", nil, false, false, nil, Result{Output: []model.Block{}, StopReason: StopError, UsageKnown: true}},
	}
	for _, tt := range tests {
		got := OneShotResult(sessionlog.OutcomeOf(tt.log), tt.cancelled, tt.want, tt.structured)
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
