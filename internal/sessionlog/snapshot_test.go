package sessionlog

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
)

// snapLog gives evs contiguous seqs from 0, as a store would.
func snapLog(t *testing.T, evs ...store.NewEvent) []store.Event {
	t.Helper()
	out := make([]store.Event, len(evs))
	for i, e := range evs {
		out[i] = store.Event{Seq: int64(i), Type: e.Type, Data: e.Data}
	}
	return out
}

func mustEncode(t *testing.T, typ string, data any) store.NewEvent {
	t.Helper()
	e, err := Encode(typ, data)
	if err != nil {
		t.Fatal(err)
	}
	return e.NewEvent
}

// snapHistoryJSON is the model history of evs as JSON: what a model request
// carries, so two folds that agree on it agree on what the model sees.
func snapHistoryJSON(t *testing.T, evs []store.Event) string {
	t.Helper()
	var h History
	h.Add(evs...)
	var msgs []SnapshotMessage
	for _, m := range h.Messages() {
		msgs = append(msgs, SnapshotMessage{Role: m.Role, Content: m.Content, ToolCalls: snapshotCalls(m.ToolCalls),
			ToolCallID: m.ToolCallID, IsError: m.IsError})
	}
	raw, err := json.Marshal(msgs)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// TestSnapshot_FoldFromSnapshotEqualsWholeFold: a snapshot taken with a
// tool call still open, then the log goes on; folding from the snapshot,
// folding the whole log through it and folding the log without it give
// the same history.
func TestSnapshot_FoldFromSnapshotEqualsWholeFold(t *testing.T) {
	user := func(id, s string) store.NewEvent {
		return mustEncode(t, EventUserMessage, UserMessage{ID: id, Role: "user", Content: []model.Block{model.TextBlock(s)}})
	}
	assistant := func(s string, calls ...model.ToolCall) store.NewEvent {
		content := []model.Block{model.TextBlock(s)}
		for _, c := range calls {
			content = append(content, ToolCallBlock(c))
		}
		return mustEncode(t, EventAssistantMessage, AssistantMessageData{Turn: 1, Step: 1, Message: AssistantMessage{Role: "assistant", Content: content}})
	}
	result := func(id, s string) store.NewEvent {
		return mustEncode(t, EventToolResult, ToolResultData{CallID: id, Name: "read", Content: []model.Block{model.TextBlock(s)}})
	}
	before := []store.NewEvent{
		user("m1", "one"),
		assistant("reading", model.ToolCall{ID: "c1", Name: "read", Arguments: `{"p":1}`}, model.ToolCall{ID: "c2", Name: "read", Arguments: "{}"}),
		result("c1", "first"),
		mustEncode(t, EventAssistantChunk, ChunkData{Turn: 1, Step: 2, Chunk: Chunk{Type: "text-delta", Text: "x"}}),
	}
	after := []store.NewEvent{result("c2", "second"), assistant("done"), user("m2", "two")}

	var h History
	h.Add(snapLog(t, before...)...)
	snap := mustEncode(t, EventSnapshot, h.Snapshot())
	whole := snapLog(t, append(append(append([]store.NewEvent{}, before...), snap), after...)...)
	without := snapLog(t, append(append([]store.NewEvent{}, before...), after...)...)
	tail := whole[len(before):]

	want := snapHistoryJSON(t, without)
	if got := snapHistoryJSON(t, tail); got != want {
		t.Errorf("fold from the snapshot:\n%s\nwant\n%s", got, want)
	}
	if got := snapHistoryJSON(t, whole); got != want {
		t.Errorf("fold of the whole log through the snapshot:\n%s\nwant\n%s", got, want)
	}
	// The snapshot alone is the history before it, its open call answered
	// as not run.
	if got, want := snapHistoryJSON(t, tail[:1]), snapHistoryJSON(t, without[:len(before)]); got != want {
		t.Errorf("fold of the snapshot alone:\n%s\nwant\n%s", got, want)
	}
}

// TestSnapshot_OtherVersionIsSkipped: a snapshot this package cannot read
// changes nothing; DecodeSnapshot and SnapshotLogged refuse it.
func TestSnapshot_OtherVersionIsSkipped(t *testing.T) {
	user := mustEncode(t, EventUserMessage, UserMessage{ID: "m1", Role: "user", Content: []model.Block{model.TextBlock("one")}})
	future := mustEncode(t, EventSnapshot, map[string]any{"version": SnapshotVersion + 1, "messages": []any{}, "logged": []string{"m9"}})
	evs := snapLog(t, user, future)
	if got, want := snapHistoryJSON(t, evs), snapHistoryJSON(t, evs[:1]); got != want {
		t.Errorf("history with an unreadable snapshot = %s, want %s", got, want)
	}
	if _, err := DecodeSnapshot(evs[1]); err == nil {
		t.Error("DecodeSnapshot accepted another version")
	}
	if got := SnapshotLogged(evs[1]); got != nil {
		t.Errorf("SnapshotLogged of another version = %v", got)
	}
	ok := snapLog(t, mustEncode(t, EventSnapshot, SnapshotData{Version: SnapshotVersion, Logged: []string{"m1", "m2"}}))[0]
	if got := SnapshotLogged(ok); len(got) != 2 || got[0] != "m1" || got[1] != "m2" {
		t.Errorf("SnapshotLogged = %v, want [m1 m2]", got)
	}
}

// TestLoggedMessages_CountsSnapshotLogged: a log read from its newest
// history/snapshot on still shows the messages the snapshot lists, so a
// resume acknowledges their rows instead of running them again.
func TestLoggedMessages_CountsSnapshotLogged(t *testing.T) {
	evs := snapLog(t,
		mustEncode(t, EventSnapshot, SnapshotData{Version: SnapshotVersion, Logged: []string{"m1", "m2"}}),
		mustEncode(t, EventUserMessage, UserMessage{ID: "m3", Role: "user"}),
		mustEncode(t, EventSnapshot, map[string]any{"version": SnapshotVersion + 1, "logged": []string{"m9"}}),
	)
	got := slices.Sorted(maps.Keys(LoggedMessages(evs)))
	if want := []string{"m1", "m2", "m3"}; !slices.Equal(got, want) {
		t.Errorf("LoggedMessages = %v, want %v (an unreadable snapshot counts none)", got, want)
	}
}
