package sessionlog

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
)

// logOf builds a session log from (type, payload) pairs, seq = index.
func logOf(pairs ...any) []store.Event {
	var out []store.Event
	for _, r := range entriesOf(pairs...) {
		out = append(out, r.event)
	}
	return out
}

// logged is one event of logOf with the payload it was encoded from.
type logged struct {
	event   store.Event
	payload any
}

// entriesOf is logOf keeping each payload, for folds fed at write time.
func entriesOf(pairs ...any) []logged {
	var out []logged
	for i := 0; i < len(pairs); i += 2 {
		e, err := Encode(pairs[i].(string), pairs[i+1])
		if err != nil {
			panic(err)
		}
		out = append(out, logged{store.Event{Seq: int64(len(out)), Type: e.Type, Data: e.Data}, e.Payload})
	}
	return out
}

// outcomes folds a log both ways: decoding every event (Add) and from the
// payloads its writer had (Fold). Both must agree.
func outcomes(t *testing.T, name string, pairs ...any) Outcome {
	t.Helper()
	raw := OutcomeOf(logOf(pairs...))
	var f OutcomeFold
	for _, r := range entriesOf(pairs...) {
		f.Fold(r.event, r.payload)
	}
	// Blocks decoded keep their raw JSON, so compare the encodings.
	typed, _ := json.Marshal(f.Outcome())
	if decoded, _ := json.Marshal(raw); string(typed) != string(decoded) {
		t.Errorf("%s: fed payloads %s, decoded %s", name, typed, decoded)
	}
	return raw
}

func message(blocks ...model.Block) AssistantMessageData {
	return AssistantMessageData{Turn: 1, Step: 1, Message: AssistantMessage{Role: "assistant", Content: blocks}}
}

func chunk(kind, text string) ChunkData {
	return ChunkData{Turn: 1, Step: 1, Chunk: Chunk{Type: kind, Text: text}}
}

var toolCall = model.Block{Type: "tool-call", Raw: json.RawMessage(`{"type":"tool-call","callId":"c","name":"read","arguments":"{}"}`)}

func TestOutcome_Output(t *testing.T) {
	t.Parallel()
	text := string(model.ChunkText)
	tests := []struct {
		name string
		log  []any
		want string // JSON of the selected blocks
	}{
		{"nothing", nil, `[]`},
		{"last non-empty message wins",
			[]any{EventAssistantMessage, message(model.TextBlock("first")), EventAssistantMessage, message(model.TextBlock("second"))},
			`[{"type":"text","text":"second"}]`},
		{"empty usage-only message is ignored (docs/seam.md §6)",
			[]any{EventAssistantMessage, message(model.TextBlock("answer")), EventAssistantMessage, message()},
			`[{"type":"text","text":"answer"}]`},
		{"textless message still counts",
			[]any{EventAssistantChunk, chunk(text, "streamed"), EventAssistantMessage, message(toolCall)},
			`[{"type":"tool-call","callId":"c","name":"read","arguments":"{}"}]`},
		{"message beats later streamed text",
			[]any{EventAssistantMessage, message(model.TextBlock("complete")), EventAssistantChunk, chunk(text, "partial")},
			`[{"type":"text","text":"complete"}]`},
		{"text deltas joined when no message",
			[]any{EventAssistantChunk, chunk(text, "hel"), EventAssistantChunk, chunk("reasoning-delta", "hmm"),
				EventToolResult, ToolResultData{CallID: "c", Content: []model.Block{model.TextBlock("tool")}},
				EventAssistantChunk, chunk(text, "lo"), EventAssistantMessage, message()},
			`[{"type":"text","text":"hello"}]`},
		{"reasoning only streamed is no output",
			[]any{EventAssistantChunk, chunk("reasoning-delta", "hmm")},
			`[]`},
	}
	for _, tt := range tests {
		got, err := json.Marshal(outcomes(t, tt.name, tt.log...).Output)
		if err != nil || string(got) != tt.want {
			t.Errorf("%s: got %s, want %s", tt.name, got, tt.want)
		}
	}
}

func turnStart(n int) TurnData { return TurnData{Turn: n} }
func step(n int) StepData      { return StepData{Turn: n, Step: 1} }
func turnEnd(n int, kind string) TurnEndData {
	return TurnEndData{Turn: n, Reason: TurnReason{Kind: kind}}
}

var (
	claim       = InboxSplicedData{Target: TargetNextTurn, RemovedCount: 1, Inserted: []UserMessage{}}
	insert      = InboxSplicedData{Target: TargetNextTurn, Inserted: []UserMessage{{ID: "m"}}}
	cancelUnrun = InboxSplicedData{Target: TargetNextTurn, RemovedCount: 1, Inserted: []UserMessage{}, Outcome: OutcomeCanceled}
)

func TestOutcome_ConsumedWork(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		log     []any
		endTurn int // 0 = no accounting turn
		kind    string
		dropped bool
	}{
		{"empty", nil, 0, "", false},
		{"stepped turn accounts",
			[]any{EventTurnStart, turnStart(1), EventStepStart, step(1), EventTurnEnd, turnEnd(1, ReasonCompleted)},
			1, ReasonCompleted, false},
		{"completed no-step turn does not account",
			[]any{EventTurnStart, turnStart(1), EventStepStart, step(1), EventTurnEnd, turnEnd(1, ReasonMaxTokens),
				EventTurnStart, turnStart(2), EventInboxSpliced, claim, EventTurnEnd, turnEnd(2, ReasonCompleted)},
			1, ReasonMaxTokens, false},
		{"claimed blocked turn accounts",
			[]any{EventTurnStart, turnStart(1), EventInboxSpliced, claim, EventTurnEnd, turnEnd(1, ReasonBlocked)},
			1, ReasonBlocked, false},
		{"unclaimed aborted no-step turn does not account",
			[]any{EventTurnStart, turnStart(1), EventTurnEnd, turnEnd(1, ReasonAborted)},
			0, "", false},
		{"canceled claim does not count as claimed",
			[]any{EventTurnStart, turnStart(1), EventInboxSpliced, cancelUnrun, EventTurnEnd, turnEnd(1, ReasonAborted)},
			0, "", true},
		{"work dropped after the accounting turn",
			[]any{EventTurnStart, turnStart(1), EventStepStart, step(1), EventTurnEnd, turnEnd(1, ReasonCompleted),
				EventInboxSpliced, insert, EventInboxSpliced, cancelUnrun},
			1, ReasonCompleted, true},
		{"a later accounting turn resets dropped",
			[]any{EventInboxSpliced, cancelUnrun, EventTurnStart, turnStart(1), EventStepStart, step(1), EventTurnEnd, turnEnd(1, ReasonError)},
			1, ReasonError, false},
		{"canceled with replacement is not dropped",
			[]any{EventInboxSpliced, InboxSplicedData{Target: TargetNextStep, Inserted: []UserMessage{{ID: "x"}}, Outcome: OutcomeCanceled}},
			0, "", false},
	}
	for _, tt := range tests {
		o := outcomes(t, tt.name, tt.log...)
		end, dropped := o.End, o.DroppedUnrun
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

// TestOutcomeFold_CloneSharesNothing: folding a turn's work and end into a
// clone leaves the original fold's outcome as it was.
func TestOutcomeFold_CloneSharesNothing(t *testing.T) {
	t.Parallel()
	var f OutcomeFold
	for _, r := range entriesOf(EventTurnStart, turnStart(1), EventUserMessage, UserMessage{ID: "m1"}) {
		f.Fold(r.event, r.payload)
	}
	before, _ := json.Marshal(f.Outcome())
	c := f.Clone()
	for _, r := range entriesOf(EventStepStart, step(1), EventAssistantChunk, chunk(string(model.ChunkText), "hi"),
		EventUserMessage, UserMessage{ID: "m2"}, EventTurnEnd, turnEnd(1, ReasonCompleted)) {
		c.Fold(r.event, r.payload)
	}
	if o := c.Outcome(); o.End == nil || o.End.Turn != 1 || len(o.Messages) != 2 || model.Text(o.Output) != "hi" {
		t.Fatalf("clone outcome %+v, want turn 1 accounted, two messages, output hi", o)
	}
	if after, _ := json.Marshal(f.Outcome()); string(after) != string(before) {
		t.Errorf("original outcome changed from %s to %s", before, after)
	}
}

// A nil fold reports the outcome of no events, as an empty fold does.
func TestOutcome_NilFoldIsEmpty(t *testing.T) {
	t.Parallel()
	var f *OutcomeFold
	got, want := f.Outcome(), (&OutcomeFold{}).Outcome()
	if !reflect.DeepEqual(got, want) || got.Output == nil || len(got.Output) != 0 {
		t.Fatalf("nil fold's outcome = %+v, want the empty fold's %+v (no output, not nil)", got, want)
	}
}
