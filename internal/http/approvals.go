package http

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Approvals lists, reads and decides human-in-the-loop approvals;
// *governance.Approvals implements it. Its errors are *subagent.Error
// values (APPROVAL_NOT_FOUND, ALREADY_DECIDED, OPTION_UNAVAILABLE,
// INVALID_REQUEST).
type Approvals interface {
	List(ctx context.Context, f store.ApprovalFilter) (governance.Page, error)
	Get(ctx context.Context, id string) (store.Approval, error)
	Decide(ctx context.Context, id string, d governance.Decision) (store.Approval, error)
}

var _ Approvals = (*governance.Approvals)(nil)

// approvalRoutes registers the /v1/approvals routes on r.
func (s *Server) approvalRoutes(r chi.Router) {
	r.Get("/approvals", s.h(s.listApprovals))
	r.Get("/approvals/{approvalId}", s.h(s.getApproval))
	r.Post("/approvals/{approvalId}/decision", s.h(s.decideApproval))
}

// approvalStates are the values of the state filter.
var approvalStates = []string{store.ApprovalPending, store.ApprovalDecided, store.ApprovalExpired, store.ApprovalCancelled}

// Wire forms of approvals (api/openapi.yaml).
type (
	decisionRequest struct {
		OptionID string `json:"optionId" validate:"omitempty,max=256"`
		Outcome  string `json:"outcome" validate:"omitempty,oneof=allow reject"`
		Scope    string `json:"scope" validate:"omitempty,oneof=once always"`
		Reason   string `json:"reason" validate:"max=1024"`
	}
	approvalJSON struct {
		ID            string                   `json:"id"`
		State         string                   `json:"state"`
		SessionID     string                   `json:"sessionId"`
		RunID         string                   `json:"runId"`
		TaskID        string                   `json:"taskId,omitempty"`
		RootSessionID string                   `json:"rootSessionId"`
		Provider      string                   `json:"provider"`
		ToolCall      approvalToolCallJSON     `json:"toolCall"`
		Options       []approvalOptionJSON     `json:"options"`
		Decision      *governance.DecisionJSON `json:"decision,omitempty"`
		CreatedAt     string                   `json:"createdAt"`
		ExpiresAt     string                   `json:"expiresAt,omitempty"`
	}
	approvalToolCallJSON struct {
		ID        string          `json:"id"`
		Title     string          `json:"title"`
		Kind      string          `json:"kind"`
		Locations json.RawMessage `json:"locations,omitempty"`
		RawInput  json.RawMessage `json:"rawInput,omitempty"`
	}
	approvalOptionJSON struct {
		OptionID string `json:"optionId"`
		Name     string `json:"name"`
		Kind     string `json:"kind"`
	}
	approvalListJSON struct {
		Approvals  []approvalJSON `json:"approvals"`
		NextCursor string         `json:"nextCursor,omitempty"`
	}
)

func approvalOut(a store.Approval) approvalJSON {
	out := approvalJSON{
		ID: a.ID, State: a.State, SessionID: a.SessionID, RunID: a.RunID, TaskID: a.TaskID,
		RootSessionID: a.RootSessionID, Provider: a.Provider,
		ToolCall: approvalToolCallJSON{ID: a.ToolCall.ID, Title: a.ToolCall.Title, Kind: a.ToolCall.Kind,
			Locations: a.ToolCall.Locations, RawInput: a.ToolCall.RawInput},
		Options:   make([]approvalOptionJSON, len(a.Options)),
		Decision:  governance.DecisionOf(a.Decision),
		CreatedAt: a.CreatedAt.UTC().Format(time.RFC3339Nano),
	}
	for i, o := range a.Options {
		out.Options[i] = approvalOptionJSON(o)
	}
	if !a.ExpiresAt.IsZero() {
		out.ExpiresAt = a.ExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	return out
}

// approvals returns the approvals service, NOT_READY without one.
func (s *Server) approvals() (Approvals, error) {
	if s.approvalSvc == nil {
		return nil, subagent.Errorf(codeNotReady, "this server takes no approvals")
	}
	return s.approvalSvc, nil
}

// listApprovals answers a page of the tenant's approvals, oldest first.
func (s *Server) listApprovals(w http.ResponseWriter, r *http.Request) error {
	out, err := s.approvalPage(r.Context(), newParams(r))
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// approvalPage reads the filter of GET /v1/approvals from p's query and
// answers that page.
func (s *Server) approvalPage(ctx context.Context, p *params) (approvalListJSON, error) {
	f := store.ApprovalFilter{
		State:         p.str("state", 16),
		RootSessionID: p.str("rootSessionId", maxIDLength),
		SessionID:     p.str("sessionId", maxIDLength),
		AfterID:       p.str("after", maxIDLength),
		Limit:         p.limit(),
	}
	if f.State != "" && !slices.Contains(approvalStates, f.State) {
		p.fail("state", "must be pending, decided, expired or cancelled")
	}
	if err := p.err(); err != nil {
		return approvalListJSON{}, err
	}
	svc, err := s.approvals()
	if err != nil {
		return approvalListJSON{}, err
	}
	page, err := svc.List(ctx, f)
	if err != nil {
		return approvalListJSON{}, err
	}
	out := approvalListJSON{Approvals: make([]approvalJSON, 0, len(page.Approvals)), NextCursor: page.NextCursor}
	for _, a := range page.Approvals {
		out.Approvals = append(out.Approvals, approvalOut(a))
	}
	return out, nil
}

// getApproval answers one approval.
func (s *Server) getApproval(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	id := p.id("approvalId")
	if err := p.err(); err != nil {
		return err
	}
	svc, err := s.approvals()
	if err != nil {
		return err
	}
	a, err := svc.Get(r.Context(), id)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, approvalOut(a))
	return nil
}

// decideApproval decides a pending approval and answers it decided; the
// first decision wins, a later one is ALREADY_DECIDED.
func (s *Server) decideApproval(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	id := p.id("approvalId")
	if err := p.err(); err != nil {
		return err
	}
	var req decisionRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	out, err := s.decide(r.Context(), id, req)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// decide takes req as the decision of approval id.
func (s *Server) decide(ctx context.Context, id string, req decisionRequest) (approvalJSON, error) {
	svc, err := s.approvals()
	if err != nil {
		return approvalJSON{}, err
	}
	a, err := svc.Decide(ctx, id, governance.Decision{OptionID: req.OptionID, Outcome: req.Outcome, Scope: req.Scope, Reason: req.Reason})
	if err != nil {
		return approvalJSON{}, err
	}
	return approvalOut(a), nil
}
