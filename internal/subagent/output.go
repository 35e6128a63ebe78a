package subagent

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/subagentd/subagentd/internal/sessionlog"
)

// Diagnostic bounds (docs/seam.md §5).
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

// OneShotStopReason maps the accounting turn/end of an in-process one-shot
// child to its stop reason (docs/seam.md §6): completed, max-tokens
// and aborted keep their name, blocked becomes refusal, a tree's spent
// budget or passed deadline budget_exhausted or deadline_exceeded, and
// anything else —
// error, interrupted, an unknown kind, or no accounting turn — is error.
// When the owner cancelled, every reason but completed becomes aborted
// (R25: a finished turn stays completed).
func OneShotStopReason(end *sessionlog.TurnEnd, cancelled bool) string {
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
		case sessionlog.ReasonBudgetExhausted:
			reason = StopBudgetExhausted
		case sessionlog.ReasonDeadlineExceeded:
			reason = StopDeadlineExceeded
		}
	}
	if cancelled && reason != StopCompleted {
		return StopAborted
	}
	return reason
}

// OneShotResult is the result of a settled in-process one-shot child from
// the outcome of its own events (after any fork seed), per docs/seam.md §6.
// cancelled says whether the owner cancelled; schemaRequested
// whether the start carried an outputSchema; structured is the committed
// capture, nil when none. A requested schema without a capture turns a
// completed run into error (aborted when cancelled). The diagnostic is the
// failed turn's message, bounded by TruncateDiagnostic.
func OneShotResult(o sessionlog.Outcome, cancelled, schemaRequested bool, structured json.RawMessage) Result {
	end := o.End
	r := Result{Output: o.Output, StopReason: OneShotStopReason(end, cancelled), Usage: o.Usage, UsageKnown: o.Usage.Known()}
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
