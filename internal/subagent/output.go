package subagent

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
)

// Diagnostic bounds (seam-spec §1.10).
const (
	MaxDiagnosticBytes = 4096
	DiagnosticSuffix   = "\n[diagnostic truncated]"
)

// TruncateDiagnostic bounds a diagnostic to MaxDiagnosticBytes: a longer
// one is cut to MaxDiagnosticBytes-len(DiagnosticSuffix) bytes, backed off
// to a UTF-8 character boundary, and gets DiagnosticSuffix. A diagnostic of
// exactly MaxDiagnosticBytes is kept.
func TruncateDiagnostic(s string) string {
	if len(s) <= MaxDiagnosticBytes {
		return s
	}
	cut := MaxDiagnosticBytes - len(DiagnosticSuffix)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + DiagnosticSuffix
}

// SelectOutput is the canonical final-output rule (seam-spec §1.11) over a
// child-owned event suffix: the last assistant/message with non-empty
// content (textless content counts); else all text-delta chunks joined into
// one text block; else none. It never returns nil, so a result holds [] when
// there is no output. Events it cannot decode are skipped.
func SelectOutput(events []store.Event) []model.Block {
	// The last message wins, so look for it from the end: the chunks
	// before it need no decoding.
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Type != sessionlog.EventAssistantMessage {
			continue
		}
		var d sessionlog.AssistantMessageData
		if json.Unmarshal(events[i].Data, &d) == nil && len(d.Message.Content) > 0 {
			return d.Message.Content
		}
	}
	var streamed strings.Builder
	for _, e := range events {
		if e.Type != sessionlog.EventAssistantChunk {
			continue
		}
		var d sessionlog.ChunkData
		if json.Unmarshal(e.Data, &d) == nil && d.Chunk.Type == string(model.ChunkText) {
			streamed.WriteString(d.Chunk.Text)
		}
	}
	if streamed.Len() > 0 {
		return []model.Block{model.TextBlock(streamed.String())}
	}
	return []model.Block{}
}

// TurnEnd is the turn/end event that accounts for a child's consumed work.
type TurnEnd struct {
	Seq    int64
	Turn   int
	Reason sessionlog.TurnReason
}

// FoldConsumedWork is the consumed-work fold (seam-spec §3.5) over an event
// suffix. end is the last turn/end of a turn that did work: it stepped, or
// it claimed inbox input and did not complete cleanly. droppedUnrun reports
// whether accepted input was cancelled unrun after that turn.
func FoldConsumedWork(events []store.Event) (end *TurnEnd, droppedUnrun bool) {
	open := 0 // the open turn, 0 between turns
	stepped := map[int]bool{}
	claimed := map[int]bool{}
	for _, e := range events {
		switch e.Type {
		case sessionlog.EventTurnStart:
			var d sessionlog.TurnData
			if json.Unmarshal(e.Data, &d) == nil {
				open = d.Turn
			}
		case sessionlog.EventStepStart:
			var d sessionlog.StepData
			if json.Unmarshal(e.Data, &d) == nil {
				stepped[d.Turn] = true
			}
		case sessionlog.EventInboxSpliced:
			// Only a claim (removedCount) or a cancel (outcome) counts;
			// an insert, which carries the messages, has neither key and
			// needs no decoding. The inserted messages stay undecoded.
			if !bytes.Contains(e.Data, []byte(`"removedCount"`)) && !bytes.Contains(e.Data, []byte(`"outcome"`)) {
				continue
			}
			var d struct {
				RemovedCount int               `json:"removedCount"`
				Inserted     []json.RawMessage `json:"inserted"`
				Outcome      string            `json:"outcome"`
			}
			if json.Unmarshal(e.Data, &d) != nil {
				continue
			}
			switch {
			case d.Outcome == sessionlog.OutcomeCanceled:
				if len(d.Inserted) == 0 {
					droppedUnrun = true
				}
			case d.RemovedCount > 0 && open != 0:
				claimed[open] = true
			}
		case sessionlog.EventTurnEnd:
			var d sessionlog.TurnEndData
			if json.Unmarshal(e.Data, &d) != nil {
				continue
			}
			if stepped[d.Turn] || (claimed[d.Turn] && d.Reason.Kind != sessionlog.ReasonCompleted) {
				end = &TurnEnd{Seq: e.Seq, Turn: d.Turn, Reason: d.Reason}
				droppedUnrun = false
			}
			open = 0
		}
	}
	return end, droppedUnrun
}

// OneShotStopReason maps the accounting turn/end of an in-process one-shot
// child to its stop reason (seam-spec §4.1 step 8): completed, max-tokens
// and aborted keep their name, blocked becomes refusal, and anything else —
// error, interrupted, an unknown kind, or no accounting turn — is error.
// When the owner cancelled, every reason but completed becomes aborted
// (R25: a finished turn stays completed).
func OneShotStopReason(end *TurnEnd, cancelled bool) string {
	reason := StopError
	if end != nil {
		switch end.Reason.Kind {
		case sessionlog.ReasonCompleted:
			reason = StopCompleted
		case sessionlog.ReasonMaxTokens:
			reason = StopMaxTokens
		case sessionlog.ReasonAborted:
			reason = StopAborted
		case sessionlog.ReasonBlocked:
			reason = StopRefusal
		}
	}
	if cancelled && reason != StopCompleted {
		return StopAborted
	}
	return reason
}

// OneShotResult reads the result of a settled in-process one-shot child
// from its own events (after any fork seed), per seam-spec §4.1 step 8.
// cancelled says whether the owner cancelled; schemaRequested whether the
// start carried an outputSchema; structured is the committed capture, nil
// when none. A requested schema without a capture turns a completed run
// into error (aborted when cancelled). The diagnostic is the failed turn's
// message, bounded by TruncateDiagnostic.
func OneShotResult(events []store.Event, cancelled, schemaRequested bool, structured json.RawMessage) Result {
	end, _ := FoldConsumedWork(events)
	r := Result{Output: SelectOutput(events), StopReason: OneShotStopReason(end, cancelled)}
	switch {
	case structured != nil:
		r.Structured = structured
	case schemaRequested && r.StopReason == StopCompleted:
		r.StopReason = StopError
		r.Diagnostic = "the child finished without recording structured output"
		if cancelled {
			r.StopReason = StopAborted
		}
	}
	if r.StopReason != StopCompleted && r.Diagnostic == "" && end != nil {
		r.Diagnostic = TruncateDiagnostic(end.Reason.Message)
	}
	return r
}
