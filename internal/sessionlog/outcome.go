package sessionlog

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
)

// TurnEnd is the turn/end event that accounts for a child's consumed work.
type TurnEnd struct {
	Seq    int64
	Turn   int
	Reason TurnReason
}

// Outcome is what a run or an activation settles on, read from the events
// it appended.
type Outcome struct {
	// Output is the canonical final output (docs/seam.md §6): the last
	// assistant/message with non-empty content (textless content counts);
	// else all text-delta chunks joined into one text block; else none.
	// It is never nil, so a result holds [] when there is no output.
	Output []model.Block
	// End is the consumed-work fold's accounting turn (docs/seam.md §6): the
	// last turn/end of a turn that did work — it stepped, or it claimed
	// inbox input and did not complete cleanly. Nil when none did.
	End *TurnEnd
	// DroppedUnrun reports whether accepted input was cancelled unrun
	// after End.
	DroppedUnrun bool
	// Messages are the ids of the user/messages logged: the messages whose
	// inbox rows are delivered.
	Messages []string
	// Usage is the model usage the events record: a model call per step
	// started, the tokens of each step's message that reported them
	// (Usage.Known says whether every call did).
	Usage store.Usage
}

// OutcomeFold folds events into their Outcome. It is incremental: a writer
// feeds it each event as it appends it (Fold, with the payload it encoded,
// so nothing is decoded again), and settlement reads Outcome without going
// back to the log. The zero value has folded nothing; it is not safe for
// concurrent use.
type OutcomeFold struct {
	output   []model.Block // the last assistant/message with content
	streamed []byte        // text deltas, kept while output is nil
	open     int           // the open turn, 0 between turns
	stepped  map[int]bool
	claimed  map[int]bool
	end      *TurnEnd
	dropped  bool
	messages []string
	usage    store.Usage
}

// Add folds events, which follow those already folded in log order.
func (f *OutcomeFold) Add(events ...store.Event) {
	for _, e := range events {
		f.Fold(e, nil)
	}
}

// Fold folds e, which follows the events already folded. payload is the
// value e's data was encoded from (Encode), when the caller has it, else
// nil; an event whose payload is neither of its type's struct nor
// decodable is skipped.
func (f *OutcomeFold) Fold(e store.Event, payload any) {
	switch e.Type {
	case EventAssistantMessage:
		d, ok := payloadOf[AssistantMessageData](e, payload)
		if ok && len(d.Message.Content) > 0 {
			f.output, f.streamed = d.Message.Content, nil
		}
		if ok && d.Usage != nil {
			f.usage = f.usage.Add(store.Usage{InputTokens: int64(d.Usage.InputTokens), OutputTokens: int64(d.Usage.OutputTokens), Reported: 1})
		}
	case EventAssistantChunk:
		if f.output != nil {
			return // a message outranks every delta
		}
		d, ok := payloadOf[ChunkData](e, payload)
		if ok && d.Chunk.Type == string(model.ChunkText) {
			f.streamed = append(f.streamed, d.Chunk.Text...)
		}
	case EventUserMessage:
		if id := messageIDOf(e, payload); id != "" {
			f.messages = append(f.messages, id)
		}
	case EventTurnStart:
		if d, ok := payloadOf[TurnData](e, payload); ok {
			f.open = d.Turn
		}
	case EventStepStart:
		if d, ok := payloadOf[StepData](e, payload); ok {
			mark(&f.stepped, d.Turn)
		}
		f.usage.ModelCalls++
	case EventInboxSpliced:
		d, ok := spliceOf(e, payload)
		switch {
		case !ok:
		case d.Outcome == OutcomeCanceled:
			if d.Inserted == 0 {
				f.dropped = true
			}
		case d.RemovedCount > 0 && f.open != 0:
			mark(&f.claimed, f.open)
		}
	case EventTurnEnd:
		d, ok := payloadOf[TurnEndData](e, payload)
		if !ok {
			return
		}
		if f.stepped[d.Turn] || (f.claimed[d.Turn] && d.Reason.Kind != ReasonCompleted) {
			f.end = &TurnEnd{Seq: e.Seq, Turn: d.Turn, Reason: d.Reason}
			f.dropped = false
		}
		f.open = 0
	}
}

// Clone returns a fold with the state of f that shares nothing with it, so
// a writer can fold events it has not stored yet without changing f.
func (f *OutcomeFold) Clone() *OutcomeFold {
	c := *f
	c.output = slices.Clone(f.output)
	c.streamed = slices.Clone(f.streamed)
	c.stepped = maps.Clone(f.stepped)
	c.claimed = maps.Clone(f.claimed)
	c.messages = slices.Clone(f.messages)
	return &c
}

// Outcome returns the outcome of the events folded so far; a nil fold's
// is that of no events. It shares nothing that later folding changes.
func (f *OutcomeFold) Outcome() Outcome {
	if f == nil {
		f = &OutcomeFold{}
	}
	o := Outcome{Output: f.output, DroppedUnrun: f.dropped, Messages: f.messages[:len(f.messages):len(f.messages)], Usage: f.usage}
	switch {
	case o.Output != nil:
	case len(f.streamed) > 0:
		o.Output = []model.Block{model.TextBlock(string(f.streamed))}
	default:
		o.Output = []model.Block{}
	}
	if f.end != nil {
		end := *f.end
		o.End = &end
	}
	return o
}

// OutcomeOf is the Outcome of events, folded at once.
func OutcomeOf(events []store.Event) Outcome {
	var f OutcomeFold
	f.Add(events...)
	return f.Outcome()
}

// mark sets m[k], allocating m on first use.
func mark(m *map[int]bool, k int) {
	if *m == nil {
		*m = map[int]bool{}
	}
	(*m)[k] = true
}

// payloadOf returns e's payload as a T: payload when it is one, else e's
// data decoded; ok is false when that does not decode.
func payloadOf[T any](e store.Event, payload any) (T, bool) {
	if p, ok := payload.(T); ok {
		return p, true
	}
	d, err := Decode[T](e)
	return d, err == nil
}

// messageIDOf is the id of user/message e, "" when it has none or does not
// decode. Only the id is decoded, not the content.
func messageIDOf(e store.Event, payload any) string {
	if p, ok := payload.(UserMessage); ok {
		return p.ID
	}
	d, err := Decode[struct {
		ID string `json:"id"`
	}](e)
	if err != nil {
		return ""
	}
	return d.ID
}

// spliceCounts is the part of an agent/inbox/spliced the outcome reads.
type spliceCounts struct {
	RemovedCount int
	Inserted     int
	Outcome      string
}

// spliceOf reads the counts of agent/inbox/spliced e. Only a claim
// (removedCount) or a cancel (outcome) counts: an undecoded insert, which
// carries the messages, has neither key and is reported as not ok without
// decoding; the inserted messages are never decoded.
func spliceOf(e store.Event, payload any) (spliceCounts, bool) {
	if p, ok := payload.(InboxSplicedData); ok {
		return spliceCounts{RemovedCount: p.RemovedCount, Inserted: len(p.Inserted), Outcome: p.Outcome}, true
	}
	if !bytes.Contains(e.Data, []byte(`"removedCount"`)) && !bytes.Contains(e.Data, []byte(`"outcome"`)) {
		return spliceCounts{}, false
	}
	d, err := Decode[struct {
		RemovedCount int               `json:"removedCount"`
		Inserted     []json.RawMessage `json:"inserted"`
		Outcome      string            `json:"outcome"`
	}](e)
	if err != nil {
		return spliceCounts{}, false
	}
	return spliceCounts{RemovedCount: d.RemovedCount, Inserted: len(d.Inserted), Outcome: d.Outcome}, true
}
