package sessionlog

import (
	"encoding/json"
	"fmt"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
)

// EventSnapshot is history/snapshot (store.SnapshotEvent): the state of
// the folds a cold resume needs as of the event before it, so that a
// resume reads the newest snapshot and what follows it (store.LogTail)
// instead of the whole log. The log stays the truth: a snapshot repeats
// what the events before it say, and a fold over the whole log that meets
// one arrives where it would have without it.
const EventSnapshot = store.SnapshotEvent

// SnapshotVersion is the version of SnapshotData this package writes. A
// snapshot of another version does not decode (DecodeSnapshot); a reader
// then folds the whole log.
const SnapshotVersion = 1

// SnapshotData is the payload of history/snapshot.
type SnapshotData struct {
	Version int `json:"version"`
	// Messages and Open are the History fold: the model history, and the
	// tool calls of its last assistant message still without a result.
	Messages []SnapshotMessage `json:"messages"`
	Open     []SnapshotCall    `json:"open,omitempty"`
	// Turn is the highest turn number so far.
	Turn int `json:"turn"`
	// Queue is the next-turn inbox: messages accepted and not yet run.
	Queue []UserMessage `json:"queue,omitempty"`
	// Logged are the ids of the user/messages logged since the snapshot
	// its writer loaded (all of them when it loaded none): the messages
	// whose inbox rows a crash may have left unacknowledged, which
	// LoggedMessages must still recognise.
	Logged []string `json:"logged,omitempty"`
	// Structured is the committed structured_output capture of the
	// writer's own suffix, if any.
	Structured json.RawMessage `json:"structured,omitempty"`
}

// SnapshotMessage is one model.Message of a snapshot.
type SnapshotMessage struct {
	Role       model.Role     `json:"role"`
	Content    []model.Block  `json:"content"`
	ToolCalls  []SnapshotCall `json:"toolCalls,omitempty"`
	ToolCallID string         `json:"toolCallId,omitempty"`
	IsError    bool           `json:"isError,omitempty"`
}

// SnapshotCall is one model.ToolCall of a snapshot.
type SnapshotCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// DecodeSnapshot reads a history/snapshot payload. It fails for a payload
// that does not decode or has another version: such a snapshot is skipped
// by every fold, and a reader that started at it must read the whole log.
func DecodeSnapshot(e store.Event) (SnapshotData, error) {
	d, err := Decode[SnapshotData](e)
	if err == nil && d.Version != SnapshotVersion {
		err = fmt.Errorf("history/snapshot version %d, want %d", d.Version, SnapshotVersion)
	}
	return d, err
}

// Snapshot returns the History part of a snapshot of the events added so
// far (Version, Messages, Open); the writer fills in the rest.
func (h *History) Snapshot() SnapshotData {
	d := SnapshotData{Version: SnapshotVersion, Messages: make([]SnapshotMessage, len(h.msgs)), Open: snapshotCalls(h.open)}
	for i, m := range h.msgs {
		d.Messages[i] = SnapshotMessage{Role: m.Role, Content: m.Content, ToolCalls: snapshotCalls(m.ToolCalls),
			ToolCallID: m.ToolCallID, IsError: m.IsError}
	}
	return d
}

// restore replaces the fold's state with that of snapshot d.
func (h *History) restore(d SnapshotData) {
	h.msgs = make([]model.Message, len(d.Messages))
	for i, m := range d.Messages {
		h.msgs[i] = model.Message{Role: m.Role, Content: m.Content, ToolCalls: toolCalls(m.ToolCalls),
			ToolCallID: m.ToolCallID, IsError: m.IsError}
	}
	h.open = toolCalls(d.Open)
}

func snapshotCalls(cs []model.ToolCall) []SnapshotCall {
	if len(cs) == 0 {
		return nil
	}
	out := make([]SnapshotCall, len(cs))
	for i, c := range cs {
		out[i] = SnapshotCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments}
	}
	return out
}

func toolCalls(cs []SnapshotCall) []model.ToolCall {
	if len(cs) == 0 {
		return nil
	}
	out := make([]model.ToolCall, len(cs))
	for i, c := range cs {
		out[i] = model.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments}
	}
	return out
}

// SnapshotLogged returns the Logged ids of a history/snapshot, without
// decoding its history; none for a snapshot that does not decode.
func SnapshotLogged(e store.Event) []string {
	d, err := Decode[struct {
		Version int      `json:"version"`
		Logged  []string `json:"logged"`
	}](e)
	if err != nil || d.Version != SnapshotVersion {
		return nil
	}
	return d.Logged
}
