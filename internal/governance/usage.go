// Package governance holds the rules that bound and account for a whole
// delegation tree; for now its usage roll-ups. It is domain code: it reads
// the store's interfaces and knows nothing of HTTP or SQL.
package governance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Usage scopes.
const (
	ScopeSelf = "self"
	ScopeTree = "tree"
)

// UsageStore is the part of store.Store the roll-ups read.
type UsageStore interface {
	SessionUsage(ctx context.Context, id string, tree bool, now time.Time) ([]store.SessionUsage, error)
}

// Totals is the usage of one session or a sum of several.
type Totals struct {
	InputTokens  int64
	OutputTokens int64
	ModelCalls   int64
	Runs         int64
	LiveRuns     int64
	// Known is false when some model call or run counted did not report
	// its usage (an ACP agent that sent none, a run closed without a
	// result): the tokens are then a lower bound.
	Known bool
}

// add returns the sum of t and u.
func (t Totals) add(u Totals) Totals {
	return Totals{InputTokens: t.InputTokens + u.InputTokens, OutputTokens: t.OutputTokens + u.OutputTokens,
		ModelCalls: t.ModelCalls + u.ModelCalls, Runs: t.Runs + u.Runs, LiveRuns: t.LiveRuns + u.LiveRuns,
		Known: t.Known && u.Known}
}

// SessionTotals is the own usage of one session of a tree.
type SessionTotals struct {
	SessionID string
	Totals
}

// Report is the usage of a session (ScopeSelf) or of its tree
// (ScopeTree): then Children has the own usage of every session below it,
// and Totals is the sum of the session's and theirs.
type Report struct {
	Totals
	Children []SessionTotals
}

// Usage answers usage roll-ups from the store's sums: the usage of a
// child is the sum over its settled runs rows, that of a root session the
// running sum of its own turns the store keeps with its log; no log is
// read. A run still running counts in LiveRuns and adds its usage once it
// settles.
type Usage struct {
	store UsageStore
	now   func() time.Time
}

// NewUsage returns the roll-ups over st.
func NewUsage(st UsageStore) *Usage { return &Usage{store: st, now: time.Now} }

// Session returns the usage of session id in scope ("" is ScopeSelf).
// Returns EInvalidRequest for another scope, ESessionNotFound for a
// session the tenant does not have.
func (u *Usage) Session(ctx context.Context, id, scope string) (Report, error) {
	var tree bool
	switch scope {
	case "", ScopeSelf:
	case ScopeTree:
		tree = true
	default:
		msg := `must be "self" or "tree"`
		return Report{}, &subagent.Error{Code: subagent.EInvalidRequest, Message: "scope " + msg, Fields: map[string]string{"scope": msg}}
	}
	rows, err := u.store.SessionUsage(ctx, id, tree, u.now())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return Report{}, subagent.Errorf(subagent.ESessionNotFound, "session %q not found", id)
	case err != nil:
		return Report{}, fmt.Errorf("read usage of session %s: %w", id, err)
	}
	rep := Report{Totals: own(rows[0])}
	if !tree {
		return rep, nil
	}
	rep.Children = make([]SessionTotals, 0, len(rows)-1)
	for _, r := range rows[1:] {
		t := own(r)
		rep.Children = append(rep.Children, SessionTotals{SessionID: r.SessionID, Totals: t})
		rep.Totals = rep.Totals.add(t)
	}
	return rep, nil
}

// own is the usage of one session's own work: its settled runs' (a
// child's model calls all happen in its runs and activations) and, for a
// root, which has no runs rows, the running sum of its log.
func own(r store.SessionUsage) Totals {
	sum, known := r.Runs, r.Unknown == 0
	if r.ParentID == "" {
		sum = sum.Add(r.Log)
	}
	return Totals{InputTokens: sum.InputTokens, OutputTokens: sum.OutputTokens, ModelCalls: sum.ModelCalls,
		Runs: r.RunCount, LiveRuns: r.LiveRuns, Known: known && sum.Known()}
}
