package sessionlog

import (
	"fmt"
	"testing"

	"github.com/subagentd/subagentd/internal/model"
)

// agentTurn is the (type, payload) pairs of one turn of steps model steps,
// each streaming chunks text deltas and calling one tool, the way the agent
// logs them; the last step answers without a tool.
func agentTurn(turn, steps, chunks int) []any {
	pairs := []any{
		EventTurnStart, TurnData{Turn: turn},
		EventInboxSpliced, InboxSplicedData{Target: TargetNextTurn, RemovedCount: 1, Inserted: []UserMessage{}},
		EventUserMessage, UserMessage{ID: fmt.Sprintf("m%d", turn), Role: "user", Content: []model.Block{model.TextBlock("do the next thing")}, Source: Source{Kind: "user"}},
	}
	for s := 1; s <= steps; s++ {
		pairs = append(pairs, EventStepStart, StepData{Turn: turn, Step: s})
		for range chunks {
			pairs = append(pairs, EventAssistantChunk, ChunkData{Turn: turn, Step: s, Chunk: Chunk{Type: string(model.ChunkText), Text: "some words "}})
		}
		content := []model.Block{model.TextBlock("some words, assembled")}
		if s < steps {
			call := model.ToolCall{ID: fmt.Sprintf("c%d.%d", turn, s), Name: "read", Arguments: `{"path":"a.go"}`}
			content = append(content, ToolCallBlock(call))
			pairs = append(pairs,
				EventAssistantMessage, AssistantMessageData{Turn: turn, Step: s, Message: AssistantMessage{Role: "assistant", Content: content}},
				EventToolCall, ToolCallData{Turn: turn, Step: s, CallID: call.ID, Name: call.Name, Arguments: call.Arguments},
				EventToolResult, ToolResultData{Turn: turn, Step: s, CallID: call.ID, Name: call.Name, Content: []model.Block{model.TextBlock("package a")}})
		} else {
			pairs = append(pairs, EventAssistantMessage, AssistantMessageData{Turn: turn, Step: s, Message: AssistantMessage{Role: "assistant", Content: content}})
		}
		pairs = append(pairs, EventStepEnd, StepData{Turn: turn, Step: s})
	}
	return append(pairs, EventTurnEnd, TurnEndData{Turn: turn, Reason: TurnReason{Kind: ReasonCompleted}})
}

// BenchmarkHistory is the history the agent reads at every model step of
// a session of 10 turns of 5 steps: re-folding the whole log at each step
// (what the agent did before), catching an incremental History up by
// decoding the new events, and feeding it the payloads as they are
// appended (what the agent does).
func BenchmarkHistory(b *testing.B) {
	var pairs []any
	for turn := 1; turn <= 10; turn++ {
		pairs = append(pairs, agentTurn(turn, 5, 20)...)
	}
	entries := entriesOf(pairs...)
	var stepStarts []int // the log length at each step's model call
	for i, e := range entries {
		if e.event.Type == EventStepStart {
			stepStarts = append(stepStarts, i+1)
		}
	}
	log := logOf(pairs...)
	b.Run("refold-whole-log-per-step", func(b *testing.B) {
		for b.Loop() {
			for _, n := range stepStarts {
				var h History
				h.Add(log[:n]...)
				_ = h.Messages()
			}
		}
	})
	b.Run("incremental-decoded", func(b *testing.B) {
		for b.Loop() {
			var h History
			done := 0
			for _, n := range stepStarts {
				h.Add(log[done:n]...)
				done = n
				_ = h.Messages()
			}
		}
	})
	b.Run("incremental-payloads", func(b *testing.B) {
		for b.Loop() {
			var h History
			done := 0
			for _, n := range stepStarts {
				for _, e := range entries[done:n] {
					h.Fold(e.event, e.payload)
				}
				done = n
				_ = h.Messages()
			}
		}
	})
}

// BenchmarkOutcome is a settlement's outcome of an echo run's own events
// (one turn, one step): folded by decoding the events, as settlement did
// from the log, and fed the payloads as the events were appended, as the
// agent does now, read once.
func BenchmarkOutcome(b *testing.B) {
	pairs := agentTurn(1, 1, 8)
	entries := entriesOf(pairs...)
	log := logOf(pairs...)
	b.Run("decoded", func(b *testing.B) {
		for b.Loop() {
			_ = OutcomeOf(log)
		}
	})
	b.Run("payloads", func(b *testing.B) {
		for b.Loop() {
			var f OutcomeFold
			for _, e := range entries {
				f.Fold(e.event, e.payload)
			}
			_ = f.Outcome()
		}
	})
}
