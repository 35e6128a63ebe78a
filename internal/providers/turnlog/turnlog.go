// Package turnlog writes the turns of external agents into their child
// session logs, in the event types every other child writes
// (internal/sessionlog): the events that end a turn, the output text a turn
// keeps for its result, and how a stop reason is logged. As far as their
// protocols do not shape them, it also holds a one-shot external child's
// run (OneShot) and the live agent of a continuable one (Child). The ACP
// and A2A providers share it; their children run one step per turn.
package turnlog

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Store is the part of the store an external agent's provider writes its
// child sessions and their logs to, and reads the logs of continuable
// children from.
type Store interface {
	CreateSession(ctx context.Context, s store.Session) error
	AppendEvents(ctx context.Context, sessionID string, evs ...store.NewEvent) ([]store.Event, error)
	Events(ctx context.Context, sessionID string, after int64, limit int) ([]store.Event, error)
}

// PromptUsage is the usage of a one-shot run's one prompt as its child
// log records it (the prompt's step opened with the log, the answer's
// usage when the agent reported one): the agent's model calls are its
// own, so the prompt counts as one call, and its usage is known only when
// reported.
func PromptUsage(logged bool, u *sessionlog.UsageData) store.Usage {
	var out store.Usage
	if logged {
		out.ModelCalls = 1
	}
	if u != nil {
		out.InputTokens, out.OutputTokens, out.Reported = int64(u.InputTokens), int64(u.OutputTokens), 1
	}
	return out
}

// Deadlines tell the deadline in force at a session, zero for none
// (governance.Limits).
type Deadlines interface {
	Deadline(ctx context.Context, sessionID string) (time.Time, error)
}

// HoldTo calls stop with the deadline_exceeded outcome at the deadline d
// tells for session id — an external agent's turn ends there as an
// in-process turn does — unless the func it returns is called first.
// Without d or a deadline it does nothing; a deadline it cannot read is
// logged and holds nothing.
func HoldTo(ctx context.Context, d Deadlines, id string, log *slog.Logger, stop func(Outcome)) (release func()) {
	if d == nil {
		return func() {}
	}
	at, err := d.Deadline(ctx, id)
	if err != nil {
		log.WarnContext(ctx, "the tree's deadline is unread; the turn is not held to it", slog.Any("error", err))
		return func() {}
	}
	if at.IsZero() {
		return func() {}
	}
	timer := time.AfterFunc(time.Until(at), func() {
		stop(Outcome{Reason: subagent.StopDeadlineExceeded, Diagnostic: "the tree's deadline " + at.Format(time.RFC3339) + " has passed"})
	})
	return func() { timer.Stop() }
}

// Event is one child-log event before encoding.
type Event struct {
	Type string
	Data any
}

// Encode marshals events for store.AppendEvents; entries keeps each
// event's payload, for the folds fed as events are written.
func Encode(evs ...Event) (batch []store.NewEvent, entries []sessionlog.Entry, err error) {
	batch = make([]store.NewEvent, len(evs))
	entries = make([]sessionlog.Entry, len(evs))
	for i, e := range evs {
		if entries[i], err = sessionlog.Encode(e.Type, e.Data); err != nil {
			return nil, nil, err
		}
		batch[i] = entries[i].NewEvent
	}
	return batch, entries, nil
}

// Outcome is how a turn ends.
type Outcome struct {
	Reason     string
	Diagnostic string
	Cause      string // who cancelled, for aborted turns
	Usage      *sessionlog.UsageData
}

// TurnReason is the turn/end reason of o. A refusal has no agent kind; it
// is logged as "refusal" (the kinds are an open set).
func TurnReason(o Outcome) sessionlog.TurnReason {
	switch o.Reason {
	case subagent.StopCompleted:
		return sessionlog.TurnReason{Kind: sessionlog.ReasonCompleted}
	case subagent.StopMaxTokens:
		return sessionlog.TurnReason{Kind: sessionlog.ReasonMaxTokens}
	case subagent.StopAborted:
		tr := sessionlog.TurnReason{Kind: sessionlog.ReasonAborted}
		if o.Cause != "" {
			tr.Cause = &sessionlog.Cause{Kind: o.Cause}
		}
		return tr
	case subagent.StopRefusal:
		return sessionlog.TurnReason{Kind: subagent.StopRefusal}
	case subagent.StopDeadlineExceeded:
		return sessionlog.TurnReason{Kind: sessionlog.ReasonDeadlineExceeded, Message: o.Diagnostic}
	default:
		return sessionlog.TurnReason{Kind: sessionlog.ReasonError, Message: o.Diagnostic}
	}
}

// Close is the events that end turn (with its one step) as o says:
// the assistant message when there is output or usage, step/end, turn/end.
func Close(turn, step int, output []model.Block, o Outcome) []Event {
	var evs []Event
	if len(output) > 0 || o.Usage != nil {
		evs = append(evs, Event{Type: sessionlog.EventAssistantMessage, Data: sessionlog.AssistantMessageData{
			Turn: turn, Step: step,
			Message:     sessionlog.AssistantMessage{Role: "assistant", Content: output},
			Usage:       o.Usage,
			Interrupted: o.Reason == subagent.StopAborted,
		}})
	}
	return append(evs,
		Event{Type: sessionlog.EventStepEnd, Data: sessionlog.StepData{Turn: turn, Step: step}},
		Event{Type: sessionlog.EventTurnEnd, Data: sessionlog.TurnEndData{Turn: turn, Reason: TurnReason(o)}})
}

// MaxOutput bounds the text a turn keeps for its result. The child log
// holds every chunk; the result is what the turn's assistant/message
// repeats, and that must fit in one event (store.MaxEventBytes, where JSON
// may spend six bytes on one byte of text).
const MaxOutput = 128 << 10

// OutputCut ends an output that was cut at MaxOutput.
const OutputCut = "\n[output truncated: the child's log holds all of it]"

// Output is the message text a turn streamed, kept up to MaxOutput bytes.
type Output struct {
	b   strings.Builder
	cut bool // text beyond MaxOutput was dropped
}

// Add appends s, up to the bound.
func (o *Output) Add(s string) {
	if o.cut || s == "" {
		return
	}
	if room := MaxOutput - o.b.Len(); len(s) > room {
		for room > 0 && !utf8.RuneStart(s[room]) {
			room--
		}
		s, o.cut = s[:room], true
	}
	o.b.WriteString(s)
}

// Blocks is the turn's output: its text, marked where it was cut; none
// when it streamed no text.
func (o *Output) Blocks() []model.Block {
	if o.b.Len() == 0 {
		return []model.Block{}
	}
	text := o.b.String()
	if o.cut {
		text += OutputCut
	}
	return []model.Block{model.TextBlock(text)}
}

// LogFailed is the diagnostic of a turn stopped because its child log
// could not be written (the store failed, or this replica lost the
// child's lease): a turn never settles with events missing from its log.
const LogFailed = "the child's log could not be written, so its turn was stopped"

// CloseTurn writes, through write, the events that end turn n (with its
// one step) as o says. When that fails it writes the turn's end alone, as
// a failed log write. It returns the outcome the log records, and whether
// the turn's end could be written at all.
func CloseTurn(write func(...Event) error, log *slog.Logger, n int, output []model.Block, o Outcome) (Outcome, bool) {
	err := write(Close(n, 1, output, o)...)
	if err == nil {
		return o, true
	}
	log.Error("cannot end the turn in the child log", slog.Int("turn", n), slog.Any("error", err))
	o = Outcome{Reason: subagent.StopError, Diagnostic: LogFailed}
	if err := write(Close(n, 1, nil, o)...); err != nil {
		log.Error("cannot end the turn in the child log as failed", slog.Int("turn", n), slog.Any("error", err))
		return o, false
	}
	return o, true
}

// TextOnly keeps the text blocks of a prompt: the service promises
// external agents nothing else (no image or resource capabilities are
// negotiated).
func TextOnly(blocks []model.Block) []model.Block {
	out := []model.Block{}
	for _, b := range blocks {
		if b.Type == "text" {
			out = append(out, model.TextBlock(b.Text))
		}
	}
	return out
}

// Kept is what the live agent of a continuable external child keeps
// of its log, however long it lives and however much it streams: the
// user/messages (which the manager reads) and the outcome fold of the
// events written since Track. The log itself is the record. Its Events,
// Track and Outcome are those of subagent.ChildAgent, so an agent that
// embeds a Kept has them. Safe for concurrent use.
type Kept struct {
	mu       sync.Mutex
	messages []store.Event
	fold     *sessionlog.OutcomeFold
}

// Loaded keeps e, an event read back from the log, if it is a
// user/message.
func (k *Kept) Loaded(e store.Event) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if e.Type == sessionlog.EventUserMessage {
		k.messages = append(k.messages, e)
	}
}

// Written keeps the events stored by one append, with the entries they
// were encoded from (Encode): the user/messages, and every event but the
// chunks in the fold (a turn's assistant/message repeats their text).
func (k *Kept) Written(stored []store.Event, entries []sessionlog.Entry) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, e := range stored {
		switch e.Type {
		case sessionlog.EventUserMessage:
			k.messages = append(k.messages, e)
		case sessionlog.EventAssistantChunk:
			continue
		}
		if k.fold != nil {
			k.fold.Fold(e, entries[i].Payload)
		}
	}
}

// Events returns a copy of the user/messages kept: the only events of
// the log the agent keeps, and the ones the manager reads (which messages
// the log holds).
func (k *Kept) Events() []store.Event {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.messages)
}

// Track starts the outcome fold of the events written from now on,
// replacing one started earlier.
func (k *Kept) Track() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.fold = &sessionlog.OutcomeFold{}
}

// Outcome returns the outcome of the events written since Track.
func (k *Kept) Outcome() sessionlog.Outcome {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.fold.Outcome()
}

// Rejoined folds the opening of turn n's one step, which the log held
// before Track: n is a turn left open that this agent follows again, and
// its end is the tracked epoch's.
func (k *Kept) Rejoined(n int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fold != nil {
		k.fold.Fold(store.Event{Type: sessionlog.EventStepStart}, sessionlog.StepData{Turn: n, Step: 1})
	}
}

// Scan reads a child log through read, a page at a time, keeping its
// user/messages in k and calling each, if not nil, with every event. It
// returns the last turn number and the turn a crash left open (0 when
// every turn ended), which the caller closes with CutOff.
func Scan(ctx context.Context, read func(ctx context.Context, after int64, limit int) ([]store.Event, error), k *Kept, each func(store.Event)) (last, open int, err error) {
	for after := int64(-1); ; {
		page, err := read(ctx, after, scanPage)
		if err != nil {
			return 0, 0, err
		}
		if len(page) == 0 {
			return last, open, nil
		}
		for _, e := range page {
			switch e.Type {
			case sessionlog.EventTurnStart:
				var d sessionlog.TurnData
				if json.Unmarshal(e.Data, &d) == nil {
					last, open = max(last, d.Turn), d.Turn
				}
			case sessionlog.EventTurnEnd:
				open = 0
			}
			k.Loaded(e)
			if each != nil {
				each(e)
			}
		}
		after = page[len(page)-1].Seq
	}
}

// scanPage is how many events Scan reads at a time.
const scanPage = 1000

// CutOff is how a turn ends that a crash or restart left open: the
// process that ran it is gone.
var CutOff = Outcome{Reason: subagent.StopError, Diagnostic: "the turn was cut off: subagentd stopped while the agent worked on it"}
