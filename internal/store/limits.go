package store

import (
	"context"
	"time"
)

// Limits bounds a delegation tree (docs/architecture.md §1, internal/governance):
// a root's limits, or the narrowing a child was started with. A nil field
// is not set. Deadline is absolute; IdleTimeout a duration.
type Limits struct {
	MaxDepth      *int64         `json:"maxDepth,omitempty"`
	MaxChildren   *int64         `json:"maxChildren,omitempty"`
	MaxConcurrent *int64         `json:"maxConcurrent,omitempty"`
	TokenBudget   *int64         `json:"tokenBudget,omitempty"`
	Deadline      *time.Time     `json:"deadline,omitempty"`
	IdleTimeout   *time.Duration `json:"idleTimeout,omitempty"`
}

// The JSON names of the fields of Limits, as the API and the stores name
// them.
const (
	LimitMaxDepth      = "maxDepth"
	LimitMaxChildren   = "maxChildren"
	LimitMaxConcurrent = "maxConcurrent"
	LimitTokenBudget   = "tokenBudget"
	LimitDeadline      = "deadline"
	LimitIdleTimeout   = "idleTimeout"
)

// LimitNames lists the JSON name of every field of Limits.
var LimitNames = []string{LimitMaxDepth, LimitMaxChildren, LimitMaxConcurrent, LimitTokenBudget, LimitDeadline, LimitIdleTimeout}

// LimitsPatch is a change to stored limits (TreeLimits.PatchSessionLimits):
// the fields Clear names (LimitNames) are removed, then the fields set in
// Set replace what is stored. A field neither names stays as it is.
type LimitsPatch struct {
	Clear []string
	Set   Limits
}

// Patched returns a copy of l with p applied; a name in p.Clear that is
// none of LimitNames changes nothing.
func (l Limits) Patched(p LimitsPatch) Limits {
	out := l.Clone()
	for _, name := range p.Clear {
		switch name {
		case LimitMaxDepth:
			out.MaxDepth = nil
		case LimitMaxChildren:
			out.MaxChildren = nil
		case LimitMaxConcurrent:
			out.MaxConcurrent = nil
		case LimitTokenBudget:
			out.TokenBudget = nil
		case LimitDeadline:
			out.Deadline = nil
		case LimitIdleTimeout:
			out.IdleTimeout = nil
		}
	}
	set := p.Set.Clone()
	if set.MaxDepth != nil {
		out.MaxDepth = set.MaxDepth
	}
	if set.MaxChildren != nil {
		out.MaxChildren = set.MaxChildren
	}
	if set.MaxConcurrent != nil {
		out.MaxConcurrent = set.MaxConcurrent
	}
	if set.TokenBudget != nil {
		out.TokenBudget = set.TokenBudget
	}
	if set.Deadline != nil {
		out.Deadline = set.Deadline
	}
	if set.IdleTimeout != nil {
		out.IdleTimeout = set.IdleTimeout
	}
	return out
}

// Clone returns a copy of l that shares no pointer with it.
func (l Limits) Clone() Limits {
	return Limits{MaxDepth: clonePtr(l.MaxDepth), MaxChildren: clonePtr(l.MaxChildren),
		MaxConcurrent: clonePtr(l.MaxConcurrent), TokenBudget: clonePtr(l.TokenBudget),
		Deadline: clonePtr(l.Deadline), IdleTimeout: clonePtr(l.IdleTimeout)}
}

// Stored returns a copy of l as stores keep it: its deadline in UTC, whole
// microseconds, like a timestamptz column.
func (l Limits) Stored() Limits {
	l = l.Clone()
	if l.Deadline != nil {
		*l.Deadline = l.Deadline.UTC().Truncate(time.Microsecond)
	}
	return l
}

// IsZero reports whether no field of l is set.
func (l Limits) IsZero() bool {
	return l.MaxDepth == nil && l.MaxChildren == nil && l.MaxConcurrent == nil &&
		l.TokenBudget == nil && l.Deadline == nil && l.IdleTimeout == nil
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// TreeLimits is the part of Store that keeps the limits of a session:
// written with its header at creation (Session.Limits), and changed
// afterwards for a root only (PATCH /v1/sessions/{id}/limits). Headers are
// cached as immutable, so a root's current limits are read with
// SessionLimits, which a Store may cache only until a change is announced,
// and changed with PatchSessionLimits.
type TreeLimits interface {
	// SessionLimits returns the limits stored with session id. Returns
	// ErrNotFound.
	SessionLimits(ctx context.Context, id string) (Limits, error)
	// SetSessionLimits replaces the limits stored with session id.
	// Returns ErrNotFound.
	SetSessionLimits(ctx context.Context, id string, l Limits) error
	// PatchSessionLimits applies p to the limits stored with session id
	// in one write and returns the result (as Stored): writers on any
	// replica never undo each other's changes, and a field this build
	// does not know, written by a newer replica, is kept. Returns
	// ErrNotFound.
	PatchSessionLimits(ctx context.Context, id string, p LimitsPatch) (Limits, error)
	// SetTreePaused marks root id's tree paused or not and reports
	// whether the mark changed: of racing callers, on any replica, one
	// sees each flip. A new session is not paused. Returns ErrNotFound.
	SetTreePaused(ctx context.Context, id string, paused bool) (changed bool, err error)
	// LockTree takes the admission lock of the tree rooted at root in the
	// context's tenant, waiting while another holder, on any replica, has
	// it, and returns the func that releases it. Whoever counts a tree's
	// children or live runs to admit a new one holds it until the child's
	// start is committed, so two starts never both pass one count. It
	// does not check that root exists; it fails only with ctx's error or
	// the store's.
	LockTree(ctx context.Context, root string) (unlock func(), err error)
}
