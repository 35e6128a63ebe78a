package store

import (
	"context"
	"encoding/json"
	"time"
)

// Approval states. An approval is created pending and closed once, by the
// first conditional write (CloseApproval): decided by a person, expired by
// its timeout, or cancelled because its turn ended first.
const (
	ApprovalPending   = "pending"
	ApprovalDecided   = "decided"
	ApprovalExpired   = "expired"
	ApprovalCancelled = "cancelled"
)

// Approval is a human-in-the-loop approval (internal/governance): a tool
// call an agent asked permission for, the agent's own options and, once
// closed, the decision.
type Approval struct {
	ID string
	// Tenant is filled in when reading; the context's tenant is used on
	// write.
	Tenant string
	State  string
	// SessionID is the asking child's session; ParentID its parent's,
	// RootSessionID the root of its tree.
	SessionID     string
	ParentID      string
	RootSessionID string
	RunID         string
	TaskID        string // "" for a one-shot run
	Provider      string
	// Owner is the replica whose agent waits for the decision: recovery
	// cancels the approvals of owners that are gone.
	Owner    string
	ToolCall ApprovalToolCall
	Options  []ApprovalOption
	// Decision is nil while pending, and for a close that chose no option
	// (a cancellation, a timeout that cancels).
	Decision  *ApprovalDecision
	CreatedAt time.Time
	ExpiresAt time.Time // zero: no timeout
}

// ApprovalToolCall is the tool call an approval is about.
type ApprovalToolCall struct {
	ID    string
	Title string
	Kind  string
	// Locations and RawInput are the agent's JSON as it sent them, nil when
	// absent.
	Locations json.RawMessage
	RawInput  json.RawMessage
}

// ApprovalOption is one of the agent's own answers to a permission request.
type ApprovalOption struct {
	OptionID string
	Name     string
	Kind     string
}

// ApprovalDecision is how an approval was closed with an option.
type ApprovalDecision struct {
	OptionID string
	Kind     string
	// By names who decided: the deciding tenant, or "timeout".
	By     string
	Reason string
	At     time.Time
}

// ApprovalClose is the end of a pending approval.
type ApprovalClose struct {
	// State is ApprovalDecided, ApprovalExpired or ApprovalCancelled.
	State    string
	Decision *ApprovalDecision
}

// ApprovalFilter selects approvals for ListApprovals, oldest first. Empty
// fields select everything.
type ApprovalFilter struct {
	State         string
	RootSessionID string
	SessionID     string
	RunID         string
	// AfterID continues a listing after the approval with this id.
	AfterID string
	Limit   int
}

// Approvals stores approvals. Each write that changes an approval's state
// appends its lifecycle event in the same transaction, so every replica
// learns of it through the lifecycle log (LifecycleTopic).
type Approvals interface {
	// CreateApproval stores a, whose State is forced to pending, and
	// appends requested to the lifecycle log in one transaction, returning
	// both as stored. Returns ErrConflict if the id exists (any tenant),
	// an invalid-input error for JSON that is not valid; either way nothing
	// is stored.
	CreateApproval(ctx context.Context, a Approval, requested LifecycleEvent) (Approval, LifecycleEvent, error)
	// GetApproval returns one approval. Returns ErrNotFound.
	GetApproval(ctx context.Context, id string) (Approval, error)
	// ListApprovals returns the approvals matching f ordered by
	// (CreatedAt, ID). Returns ErrNotFound for an unknown AfterID.
	ListApprovals(ctx context.Context, f ApprovalFilter) ([]Approval, error)
	// CloseApproval moves approval id from pending to c.State with
	// c.Decision and appends ev to the lifecycle log, in one transaction,
	// and returns both as stored. The write is conditional: only the first
	// close of an approval happens, on any replica. Returns ErrNotFound,
	// or ErrConflict if the approval is no longer pending; then nothing
	// is stored.
	CloseApproval(ctx context.Context, id string, c ApprovalClose, ev LifecycleEvent) (Approval, LifecycleEvent, error)
	// PendingApprovals returns the pending approvals of every tenant,
	// oldest first, at most 1000: what recovery checks for owners that
	// are gone.
	PendingApprovals(ctx context.Context) ([]Approval, error)
}
