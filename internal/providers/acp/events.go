package acp

import (
	"log/slog"
	"strings"
	"unicode/utf8"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// logUpdate is the child-log event of a session/update in turn and step:
// its type and payload, and the text it adds to the turn's output (only
// message text does; thoughts are logged as reasoning). ok is false for
// updates the log does not record.
func logUpdate(u sdk.SessionUpdate, turn, step int) (typ string, payload any, text string, ok bool) {
	switch {
	case u.AgentMessageChunk != nil:
		if t := blockText(u.AgentMessageChunk.Content); t != "" {
			return sessionlog.EventAssistantChunk, sessionlog.ChunkData{Turn: turn, Step: step,
				Chunk: sessionlog.Chunk{Type: string(model.ChunkText), Text: t}}, t, true
		}
	case u.AgentThoughtChunk != nil:
		if t := blockText(u.AgentThoughtChunk.Content); t != "" {
			return sessionlog.EventAssistantChunk, sessionlog.ChunkData{Turn: turn, Step: step,
				Chunk: sessionlog.Chunk{Type: string(model.ChunkReasoning), Text: t}}, "", true
		}
	case u.ToolCall != nil:
		tc := u.ToolCall
		return sessionlog.EventACPToolCall, sessionlog.ACPToolCallData{Turn: turn, ToolCallID: string(tc.ToolCallId),
			Title: tc.Title, Kind: string(tc.Kind), Status: string(tc.Status)}, "", true
	case u.ToolCallUpdate != nil:
		tc := u.ToolCallUpdate
		d := sessionlog.ACPToolCallData{Turn: turn, ToolCallID: string(tc.ToolCallId)}
		if tc.Title != nil {
			d.Title = *tc.Title
		}
		if tc.Kind != nil {
			d.Kind = string(*tc.Kind)
		}
		if tc.Status != nil {
			d.Status = string(*tc.Status)
		}
		return sessionlog.EventACPToolCallUpdate, d, "", true
	case u.Plan != nil:
		d := sessionlog.ACPPlanData{Turn: turn, Entries: make([]sessionlog.ACPPlanEntry, len(u.Plan.Entries))}
		for i, e := range u.Plan.Entries {
			d.Entries[i] = sessionlog.ACPPlanEntry{Content: e.Content, Priority: string(e.Priority), Status: string(e.Status)}
		}
		return sessionlog.EventACPPlan, d, "", true
	}
	return "", nil, "", false
}

func blockText(b sdk.ContentBlock) string {
	if b.Text != nil {
		return b.Text.Text
	}
	return ""
}

// typed is one child-log event before encoding.
type typed struct {
	typ  string
	data any
}

// encode marshals events for store.AppendEvents; entries keeps each
// event's payload, for the folds fed as events are written.
func encode(evs ...typed) (batch []store.NewEvent, entries []sessionlog.Entry, err error) {
	batch = make([]store.NewEvent, len(evs))
	entries = make([]sessionlog.Entry, len(evs))
	for i, e := range evs {
		if entries[i], err = sessionlog.Encode(e.typ, e.data); err != nil {
			return nil, nil, err
		}
		batch[i] = entries[i].NewEvent
	}
	return batch, entries, nil
}

// turnClose is the events that end turn (with its one step) as o says:
// the assistant message when there is output or usage, step/end, turn/end.
func turnClose(turn, step int, output []model.Block, o outcome) []typed {
	var evs []typed
	if len(output) > 0 || o.usage != nil {
		evs = append(evs, typed{sessionlog.EventAssistantMessage, sessionlog.AssistantMessageData{
			Turn: turn, Step: step,
			Message:     sessionlog.AssistantMessage{Role: "assistant", Content: output},
			Usage:       o.usage,
			Interrupted: o.reason == subagent.StopAborted,
		}})
	}
	return append(evs,
		typed{sessionlog.EventStepEnd, sessionlog.StepData{Turn: turn, Step: step}},
		typed{sessionlog.EventTurnEnd, sessionlog.TurnEndData{Turn: turn, Reason: turnReason(o)}})
}

// maxOutput bounds the text a turn keeps for its result. The child log
// holds every chunk; the result is what the turn's assistant/message
// repeats, and that must fit in one event (store.MaxEventBytes, where JSON
// may spend six bytes on one byte of text).
const maxOutput = 128 << 10

// outputCut ends an output that was cut at maxOutput.
const outputCut = "\n[output truncated: the child's log holds all of it]"

// outputText is the message text a turn streamed, kept up to maxOutput
// bytes.
type outputText struct {
	b   strings.Builder
	cut bool // text beyond maxOutput was dropped
}

func (o *outputText) add(s string) {
	if o.cut || s == "" {
		return
	}
	if room := maxOutput - o.b.Len(); len(s) > room {
		for room > 0 && !utf8.RuneStart(s[room]) {
			room--
		}
		s, o.cut = s[:room], true
	}
	o.b.WriteString(s)
}

// blocks is the turn's output: its text, marked where it was cut; none
// when it streamed no text.
func (o *outputText) blocks() []model.Block {
	if o.b.Len() == 0 {
		return []model.Block{}
	}
	text := o.b.String()
	if o.cut {
		text += outputCut
	}
	return []model.Block{model.TextBlock(text)}
}

// logFailed is the diagnostic of a turn stopped because its child log
// could not be written (the store failed, or this replica lost the
// child's lease): a turn never settles with events missing from its log.
const logFailed = "the child's log could not be written, so its turn was stopped"

// closeTurn writes, through write, the events that end turn n (with its
// one step) as o says. When that fails it writes the turn's end alone, as
// a failed log write. It returns the outcome the log records, and whether
// the turn's end could be written at all.
func closeTurn(write func(...typed) error, log *slog.Logger, n int, output []model.Block, o outcome) (outcome, bool) {
	err := write(turnClose(n, 1, output, o)...)
	if err == nil {
		return o, true
	}
	log.Error("cannot end the turn in the ACP child log", slog.Int("turn", n), slog.Any("error", err))
	o = outcome{reason: subagent.StopError, diagnostic: logFailed}
	if err := write(turnClose(n, 1, nil, o)...); err != nil {
		log.Error("cannot end the turn in the ACP child log as failed", slog.Int("turn", n), slog.Any("error", err))
		return o, false
	}
	return o, true
}
