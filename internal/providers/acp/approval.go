package acp

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"unicode/utf8"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/providers/turnlog"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
)

// Approver sends the permission requests a policy asks about to a person:
// *governance.Approvals implements it.
type Approver interface {
	// Open creates the pending approval of ask and announces it.
	Open(ctx context.Context, ask governance.Ask) (store.Approval, error)
	// Await waits until the approval is closed — decided, expired, or
	// cancelled once ctx ends — and returns it closed.
	Await(ctx context.Context, ap store.Approval, onTimeout string) (store.Approval, error)
}

var _ Approver = (*governance.Approvals)(nil)

// Session-log event types of approvals: the child's transcript shows each
// approval it waited on and how it was closed.
const (
	eventApprovalRequested = governance.EventApprovalRequested
	eventApprovalDecided   = governance.EventApprovalDecided
)

// approvalRequestedData is the payload of approval/requested in a child log.
type approvalRequestedData struct {
	Turn       int                    `json:"turn"`
	ApprovalID string                 `json:"approvalId"`
	ToolCallID string                 `json:"toolCallId"`
	Title      string                 `json:"title,omitempty"`
	Kind       string                 `json:"kind"`
	Options    []permissionOptionData `json:"options"`
}

type permissionOptionData struct {
	OptionID string `json:"optionId"`
	Name     string `json:"name"`
	Kind     string `json:"kind"`
}

// approvalDecidedData is the payload of approval/decided in a child log.
type approvalDecidedData struct {
	Turn       int                      `json:"turn"`
	ApprovalID string                   `json:"approvalId"`
	State      string                   `json:"state"`
	Decision   *governance.DecisionJSON `json:"decision,omitempty"`
}

// Bounds of what an agent's permission request may put in an approval:
// longer titles are cut, and locations or input beyond them are left out.
const (
	maxTitle      = 1024
	maxOptions    = 16
	maxOptionText = 256
	maxLocations  = 64
	maxRawInput   = 64 << 10
)

// policyFor is the configured answer to req: allow, reject or ask.
func (p *Provider) policyFor(req sdk.RequestPermissionRequest) string {
	title := ""
	if req.ToolCall.Title != nil {
		title = *req.ToolCall.Title
	}
	return p.cfg.PermissionFor(toolKind(req.ToolCall.Kind), title)
}

// toolKind is the ACP kind of a tool call, "other" when absent or unknown.
func toolKind(k *sdk.ToolKind) string {
	if k == nil || !slices.Contains(config.ToolKinds, string(*k)) {
		return "other"
	}
	return string(*k)
}

// ask sends req to a person and returns the agent's answer: the option
// decided (or chosen by the timeout policy), or "cancelled" once one of
// stops closes (the turn was cancelled or ended) or when no approval can be
// opened. record writes events to the child's log; it returns an error
// once a write failed (the turn then stops).
func (p *Provider) ask(ctx context.Context, childID string, turn int, req sdk.RequestPermissionRequest,
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
	ask := approvalAsk(childID, p.cfg, req)
	ap, err := p.approver.Open(actx, ask)
	if err != nil {
		if actx.Err() == nil {
			p.log.Error("cannot open an approval; answering the agent cancelled", slog.String("child_id", childID), slog.Any("error", err))
		}
		_ = record(turnlog.Event{Type: sessionlog.EventACPPermission, Data: perm})
		return permissionCancelled()
	}
	opts := make([]permissionOptionData, len(ap.Options))
	for i, o := range ap.Options {
		opts[i] = permissionOptionData(o)
	}
	if err := record(turnlog.Event{Type: eventApprovalRequested, Data: approvalRequestedData{
		Turn: turn, ApprovalID: ap.ID, ToolCallID: ap.ToolCall.ID, Title: ap.ToolCall.Title, Kind: ap.ToolCall.Kind, Options: opts,
	}}); err != nil {
		cancel() // the turn stops: the approval is cancelled
	}
	closed, err := p.approver.Await(actx, ap, p.cfg.OnTimeout)
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
		turnlog.Event{Type: eventApprovalDecided, Data: approvalDecidedData{Turn: turn, ApprovalID: ap.ID, State: closed.State, Decision: governance.DecisionOf(closed.Decision)}},
		turnlog.Event{Type: sessionlog.EventACPPermission, Data: perm},
	); err != nil {
		return permissionCancelled()
	}
	return resp
}

// approvalAsk is the approval request of req, bounded: what an agent sends
// is cut to fit, never refused.
func approvalAsk(childID string, cfg config.ProviderConfig, req sdk.RequestPermissionRequest) governance.Ask {
	tc := store.ApprovalToolCall{ID: clean(string(req.ToolCall.ToolCallId), maxOptionText), Kind: toolKind(req.ToolCall.Kind)}
	if req.ToolCall.Title != nil {
		tc.Title = clean(*req.ToolCall.Title, maxTitle)
	}
	if locs := req.ToolCall.Locations; len(locs) > 0 && len(locs) <= maxLocations {
		tc.Locations = boundedJSON(locs)
	}
	if req.ToolCall.RawInput != nil {
		tc.RawInput = boundedJSON(req.ToolCall.RawInput)
	}
	ask := governance.Ask{SessionID: childID, Provider: cfg.Name, ToolCall: tc, Timeout: cfg.ApprovalTimeout}
	for _, o := range req.Options[:min(len(req.Options), maxOptions)] {
		ask.Options = append(ask.Options, store.ApprovalOption{
			OptionID: string(o.OptionId), Name: clean(o.Name, maxOptionText), Kind: string(o.Kind),
		})
	}
	return ask
}

// clean makes s storable text of at most n bytes: valid UTF-8 (the JSON
// decoder already replaced invalid bytes), without NUL characters.
func clean(s string, n int) string {
	s = strings.ReplaceAll(s, "\x00", "")
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// boundedJSON encodes v, nil when it is larger than maxRawInput or holds a
// NUL character (which jsonb refuses).
func boundedJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil || len(b) > maxRawInput || bytes.Contains(b, []byte(`\u0000`)) {
		return nil
	}
	return b
}
