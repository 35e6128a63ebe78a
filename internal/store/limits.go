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
// and changed with SwapSessionLimits over what was read.
type TreeLimits interface {
	// SessionLimits returns the limits stored with session id. Returns
	// ErrNotFound.
	SessionLimits(ctx context.Context, id string) (Limits, error)
	// SetSessionLimits replaces the limits stored with session id.
	// Returns ErrNotFound.
	SetSessionLimits(ctx context.Context, id string, l Limits) error
	// SwapSessionLimits replaces the limits stored with session id by
	// next if they still are old (as Stored), and reports whether it did:
	// a read-modify-write that another writer, on any replica, changed
	// in between reads again. Returns ErrNotFound.
	SwapSessionLimits(ctx context.Context, id string, old, next Limits) (swapped bool, err error)
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
