package subagent

import (
	"context"
	"fmt"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

// Limits is a tree's limits as a client asks for them: on a root at its
// creation, or, only narrowing, on a child's start. A nil field, or an
// empty string, is not set. Deadline is an RFC 3339 time or a Go duration
// from the root's creation; IdleTimeout a Go duration.
type Limits struct {
	MaxDepth      *int64
	MaxChildren   *int64
	MaxConcurrent *int64
	TokenBudget   *int64
	Deadline      string
	IdleTimeout   string
}

// MaxLimitText bounds the deadline and idleTimeout strings, in bytes.
const MaxLimitText = 64

// Resolve validates l and returns it as stored: a deadline given as a
// duration counted from rootCreated. Returns EInvalidRequest naming the
// field ("limits.tokenBudget").
func (l Limits) Resolve(rootCreated time.Time) (store.Limits, error) {
	out := store.Limits{}
	for _, n := range []struct {
		name string
		v    *int64
		dst  **int64
	}{
		{"maxDepth", l.MaxDepth, &out.MaxDepth},
		{"maxChildren", l.MaxChildren, &out.MaxChildren},
		{"maxConcurrent", l.MaxConcurrent, &out.MaxConcurrent},
		{"tokenBudget", l.TokenBudget, &out.TokenBudget},
	} {
		if n.v == nil {
			continue
		}
		if *n.v < 0 || *n.v > MaxSafeInteger {
			return store.Limits{}, limitError(n.name, "must be a non-negative safe integer")
		}
		*n.dst = ClonePtr(n.v)
	}
	if len(l.Deadline) > MaxLimitText {
		return store.Limits{}, limitError("deadline", fmt.Sprintf("must be at most %d bytes", MaxLimitText))
	}
	if len(l.IdleTimeout) > MaxLimitText {
		return store.Limits{}, limitError("idleTimeout", fmt.Sprintf("must be at most %d bytes", MaxLimitText))
	}
	if l.Deadline != "" {
		at, err := time.Parse(time.RFC3339Nano, l.Deadline)
		if err != nil {
			d, derr := time.ParseDuration(l.Deadline)
			if derr != nil || d <= 0 {
				return store.Limits{}, limitError("deadline", "must be an RFC 3339 time or a positive Go duration")
			}
			at = rootCreated.Add(d)
		}
		at = at.UTC()
		out.Deadline = &at
	}
	if l.IdleTimeout != "" {
		d, err := time.ParseDuration(l.IdleTimeout)
		if err != nil || d <= 0 {
			return store.Limits{}, limitError("idleTimeout", "must be a positive Go duration")
		}
		out.IdleTimeout = &d
	}
	return out, nil
}

func limitError(field, msg string) error {
	return &Error{Code: EInvalidRequest, Message: "limits." + field + " " + msg,
		Fields: map[string]string{"limits." + field: msg}}
}

// Governor admits a child into its tree: the tree's limits, budget,
// deadline and counts (internal/governance implements it). Both start
// paths — Service.Start and Manager.StartContinuable — ask it, so every
// face and the delegation tools meet the same rules.
type Governor interface {
	// AdmitChild reports whether parent may get a new child now, given
	// the child's own narrowing (nil: none): ELimitExceeded,
	// ERateLimited, EBudgetExhausted, EDeadlineExceeded or
	// EInvalidRequest. It returns the narrowing to store with the child
	// and the tree's depth cap for the child (nil: none).
	AdmitChild(ctx context.Context, parent store.Session, narrow *Limits) (Admission, error)
	// Paused reports whether the tree of session sessionID spent its
	// budget: a followup to a child that is not live then waits in its
	// inbox (Manager.DeliverWaiting delivers it).
	Paused(ctx context.Context, sessionID string) (bool, error)
}

// Admission is what a Governor answers an admitted child.
type Admission struct {
	// Stored is the child's narrowing as its header stores it.
	Stored store.Limits
	// MaxDepth is the tree's effective depth cap at the child, nil for
	// none: the child's depth is checked against it as against a
	// request's maxDepth (ChildDepth).
	MaxDepth *int
	// Release, when set, ends the admission: the start path calls it once
	// the child's start is committed (or failed), so that the next
	// admission of the tree counts this child.
	Release func()
}

// treePaused reports whether the Governor, if any, holds session id's
// tree paused.
func (s *Service) TreePaused(ctx context.Context, id string) (bool, error) {
	if s.gov == nil {
		return false, nil
	}
	return s.gov.Paused(ctx, id)
}

// admitTree asks the Governor, if any, whether parent may have the child
// now, then holds the child's depth to the tree's cap (ChildDepth, the
// one depth rule). It returns the limits the child's header stores and
// the func that ends the admission, which the caller calls once the
// child's start is committed or failed.
func (s *Service) AdmitTree(ctx context.Context, parent Parent, narrow *Limits) (store.Limits, func(), error) {
	if s.gov == nil {
		return store.Limits{}, func() {}, nil
	}
	a, err := s.gov.AdmitChild(ctx, parent.Session, narrow)
	if err != nil {
		return store.Limits{}, nil, err
	}
	release := a.Release
	if release == nil {
		release = func() {}
	}
	if _, err := ChildDepth(parent, a.MaxDepth); err != nil {
		release()
		return store.Limits{}, nil, err
	}
	return a.Stored, release, nil
}
