package acp

import (
	"context"
	"log/slog"
	"slices"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/providers/turnlog"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
)

// Session-log event types of approvals: the child's transcript shows each
// approval it waited on and how it was closed.
const (
	eventApprovalRequested = governance.EventApprovalRequested
	eventApprovalDecided   = governance.EventApprovalDecided
)

// verdict is the policy's answer to req of child childID: the provider's
// own policy narrowed by its tree's (governance.Approvals.Policy). A
// policy that cannot be read rejects.
func (p *Provider) verdict(ctx context.Context, childID string, req sdk.RequestPermissionRequest) governance.Verdict {
	q := governance.Query{SessionID: childID, Provider: p.cfg, Kind: toolKind(req.ToolCall.Kind)}
	if req.ToolCall.Title != nil {
		q.Title = *req.ToolCall.Title
	}
	if p.approver == nil {
		return governance.Verdict{Decision: p.cfg.PermissionFor(q.Kind, q.Title)}
	}
	v, err := p.approver.Policy(ctx, q)
	if err != nil {
		p.log.Error("cannot read the approvals policy; rejecting", slog.String("child_id", childID), slog.Any("error", err))
		return governance.Verdict{Decision: config.PermissionReject}
	}
	return v
}

// toolKind is the ACP kind of a tool call, "other" when absent or unknown.
func toolKind(k *sdk.ToolKind) string {
	if k == nil || !slices.Contains(config.ToolKinds, string(*k)) {
		return "other"
	}
	return string(*k)
}

// ask sends req to a person, waiting as long as verdict v says, and returns the agent's answer: the option
// decided (or chosen by the timeout policy), or "cancelled" once one of
// stops closes (the turn was cancelled or ended) or when no approval can be
// opened. record writes events to the child's log; it returns an error
// once a write failed (the turn then stops).
func (p *Provider) ask(ctx context.Context, childID string, turn int, req sdk.RequestPermissionRequest, v governance.Verdict,
	record func(evs ...turnlog.Event) error, stops ...<-chan struct{}) sdk.RequestPermissionResponse {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, stop := range stops {
		go func() {
			select {
			case <-stop:
				cancel()
			case <-actx.Done():
			}
		}()
	}
	stopped := func() bool {
		for _, stop := range stops {
			select {
			case <-stop:
				return true
			default:
			}
		}
		return false
	}
	perm := sessionlog.ACPPermissionData{Turn: turn, ToolCallID: string(req.ToolCall.ToolCallId), Outcome: "cancelled"}
	if req.ToolCall.Title != nil {
		perm.Title = *req.ToolCall.Title
	}
	ask := approvalAsk(childID, p.cfg.Name, v.Timeout, req)
	ap, err := p.approver.Open(actx, ask)
	if err != nil {
		if actx.Err() == nil {
			p.log.Error("cannot open an approval; answering the agent cancelled", slog.String("child_id", childID), slog.Any("error", err))
		}
		_ = record(turnlog.Event{Type: sessionlog.EventACPPermission, Data: perm})
		return permissionCancelled()
	}
	if err := record(turnlog.Event{Type: eventApprovalRequested, Data: governance.Requested(turn, ap)}); err != nil {
		cancel() // the turn stops: the approval is cancelled
	}
	closed, err := p.approver.Await(actx, ap, v.OnTimeout)
	if err != nil {
		p.log.Error("cannot close an approval", slog.String("approval_id", ap.ID), slog.Any("error", err))
		closed = ap
	}
	resp := permissionCancelled()
	if d := closed.Decision; d != nil && !stopped() &&
		slices.ContainsFunc(req.Options, func(o sdk.PermissionOption) bool { return string(o.OptionId) == d.OptionID }) {
		perm.Outcome, perm.OptionID, perm.OptionKind = "selected", d.OptionID, d.Kind
		resp.Outcome = sdk.RequestPermissionOutcome{
			Selected: &sdk.RequestPermissionOutcomeSelected{Outcome: "selected", OptionId: sdk.PermissionOptionId(d.OptionID)},
		}
	}
	if err := record(
		turnlog.Event{Type: eventApprovalDecided, Data: governance.Decided(turn, closed)},
		turnlog.Event{Type: sessionlog.EventACPPermission, Data: perm},
	); err != nil {
		return permissionCancelled()
	}
	return resp
}

// approvalAsk is the approval request of req, bounded: what an agent sends
// is cut to fit, never refused.
func approvalAsk(childID, provider string, timeout time.Duration, req sdk.RequestPermissionRequest) governance.Ask {
	tc := store.ApprovalToolCall{ID: governance.Clean(string(req.ToolCall.ToolCallId), governance.MaxOptionText), Kind: toolKind(req.ToolCall.Kind)}
	if req.ToolCall.Title != nil {
		tc.Title = governance.Clean(*req.ToolCall.Title, governance.MaxTitle)
	}
	if locs := req.ToolCall.Locations; len(locs) > 0 && len(locs) <= governance.MaxLocations {
		tc.Locations = governance.BoundedJSON(locs)
	}
	if req.ToolCall.RawInput != nil {
		tc.RawInput = governance.BoundedJSON(req.ToolCall.RawInput)
	}
	ask := governance.Ask{SessionID: childID, Provider: provider, ToolCall: tc, Timeout: timeout}
	for _, o := range req.Options[:min(len(req.Options), governance.MaxOptions)] {
		ask.Options = append(ask.Options, store.ApprovalOption{
			OptionID: string(o.OptionId), Name: governance.Clean(o.Name, governance.MaxOptionText), Kind: string(o.Kind),
		})
	}
	return ask
}
