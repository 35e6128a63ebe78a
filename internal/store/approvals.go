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
	// Always, when set, is a rule a decision with scope "always" adds to
	// the policy of the approval's tree: if the close happens, it is added
	// in the same transaction to the policy of the approval's
	// RootSessionID (created without a mode when the root has none), as
	// the newest, replacing one of the same kind and title; the oldest
	// beyond MaxAlwaysRules are dropped.
	Always *AlwaysRule
}

// TreePolicy is the approvals policy a root session sets for its tree
// (internal/governance combines it with each provider's own policy).
type TreePolicy struct {
	RootID string
	// Tenant is filled in when reading; the context's tenant is used on
	// write.
	Tenant string
	// Mode is "allow", "ask" or "reject", the answer to a tool call no rule
	// matches; "" leaves that to each provider's own policy.
	Mode  string
	Rules []PolicyRule
	// Timeout, when positive, bounds how long an approval of the tree
	// waits; OnTimeout ("reject" or "cancel") is then the agent's answer.
	Timeout   time.Duration
	OnTimeout string
	// Always are the rules that decisions with scope "always" added,
	// newest first.
	Always []AlwaysRule
}

// PolicyRule is one rule of a tree's policy: a tool call of Kind whose
// title TitlePattern (a Go regular expression, unanchored; "" matches
// every title) matches is answered by Decision.
type PolicyRule struct {
	Kind         string
	TitlePattern string
	Decision     string
}

// AlwaysRule answers, as Decision ("allow" or "reject"), the tool calls of
// Kind with exactly Title that the tree's policy would ask about: a
// person decided approval ApprovalID so, for always.
type AlwaysRule struct {
	Kind       string
	Title      string
	Decision   string
	ApprovalID string
}

// MaxAlwaysRules bounds the always rules a tree's policy keeps.
const MaxAlwaysRules = 256

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
	// CreateTreePolicy stores p, the policy of root session p.RootID.
	// Returns ErrConflict if that root has a policy.
	CreateTreePolicy(ctx context.Context, p TreePolicy) error
	// TreePolicy returns the policy of root session rootID. Returns
	// ErrNotFound when it has none.
	TreePolicy(ctx context.Context, rootID string) (TreePolicy, error)
}
