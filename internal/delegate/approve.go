package delegate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/store"
)

// delegationOptions are the answers a person has to a delegation: the
// service's own, since no agent offers any.
var delegationOptions = []store.ApprovalOption{
	{OptionID: "allow", Name: "Allow", Kind: governance.KindAllowOnce},
	{OptionID: "allow-always", Name: "Always allow", Kind: governance.KindAllowAlways},
	{OptionID: "reject", Name: "Decline", Kind: governance.KindRejectOnce},
}

// delegationTitle is what a person sees of a delegation: the provider and
// the prompt's first line.
func delegationTitle(provider, prompt string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(prompt), "\n")
	return governance.Clean(provider+": "+strings.TrimSpace(line), governance.MaxTitle)
}

// approve asks, before any child exists, whether the calling agent
// (session caller) may delegate prompt to provider: the policy of its tree
// answers (kind delegate), and what it asks about waits for a person
// within the calling turn — when the turn ends first (interrupt, cancel),
// the approval is cancelled. The tool call's arguments are the approval's
// raw input. Returns nil to go ahead, else the error the model reads.
//
// The approval's question and its close are noted in the calling agent's
// log (note), so its transcript shows them as a child's shows an ACP
// agent's; a note that cannot be written is logged and changes nothing.
func (t *Tools) approve(ctx context.Context, caller, callID, provider, prompt string, args json.RawMessage, note notifier) error {
	if t.approvals == nil {
		return nil
	}
	title := delegationTitle(provider, prompt)
	v, err := t.approvals.Policy(ctx, governance.Query{SessionID: caller, Kind: governance.KindDelegate, Title: title})
	if err != nil {
		t.log.ErrorContext(ctx, "delegation: read the approvals policy", slog.String("session_id", caller), slog.Any("error", err))
		return fmt.Errorf("nothing was delegated to %s: the approvals policy cannot be read", provider)
	}
	switch v.Decision {
	case config.PermissionAllow:
		return nil
	case config.PermissionReject:
		return fmt.Errorf("nothing was delegated to %s: the approvals policy declines it", provider)
	}
	var raw json.RawMessage
	if len(args) <= governance.MaxRawInput && json.Valid(args) {
		raw = args
	}
	ap, err := t.approvals.Open(ctx, governance.Ask{SessionID: caller, Provider: provider, Timeout: v.Timeout, Options: delegationOptions,
		ToolCall: store.ApprovalToolCall{ID: governance.Clean(callID, governance.MaxOptionText), Title: title, Kind: governance.KindDelegate, RawInput: raw}})
	if err != nil {
		if ctx.Err() == nil {
			t.log.ErrorContext(ctx, "delegation: open an approval", slog.String("session_id", caller), slog.Any("error", err))
		}
		return fmt.Errorf("nothing was delegated to %s: no approval could be asked for", provider)
	}
	t.note(ctx, note, governance.EventApprovalRequested, func(turn int) any { return governance.Requested(turn, ap) })
	closed, err := t.approvals.Await(ctx, ap, v.OnTimeout)
	if err != nil {
		t.log.ErrorContext(ctx, "delegation: close an approval", slog.String("approval_id", ap.ID), slog.Any("error", err))
		return fmt.Errorf("nothing was delegated to %s: its approval could not be closed", provider)
	}
	t.note(ctx, note, governance.EventApprovalDecided, func(turn int) any { return governance.Decided(turn, closed) })
	d := closed.Decision
	switch {
	case d != nil && (d.Kind == governance.KindAllowOnce || d.Kind == governance.KindAllowAlways):
		return nil
	case d != nil && d.By == governance.ByTimeout:
		return fmt.Errorf("nothing was delegated to %s: nobody approved it in time", provider)
	case d != nil:
		msg := "a person declined delegating to " + provider
		if d.Reason != "" {
			msg += ": " + d.Reason
		}
		return errors.New(msg)
	}
	return fmt.Errorf("nothing was delegated to %s: its approval was cancelled", provider)
}

// notifier is what approve notes an approval's events through: the
// calling agent's (agent.Agent.Note).
type notifier interface {
	Note(typ string, data func(turn int) any) error
}

// note writes one of an approval's events through n, logging a failure.
func (t *Tools) note(ctx context.Context, n notifier, typ string, data func(turn int) any) {
	if err := n.Note(typ, data); err != nil {
		t.log.WarnContext(ctx, "delegation: note an approval in the calling agent's log", slog.String("event", typ), slog.Any("error", err))
	}
}
