package children

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// ChildInfo is one child session as GET /v1/subagents/{childId} shows it.
type ChildInfo struct {
	Session store.Session
	// Identity is the child's listing identity (docs/seam.md §10): the last
	// valid descriptor of its log, nil when there is none.
	Identity *sessionlog.Identity
	// Activity is ActivityRunning while the child has a running run or
	// activation (see Running), else ActivityInactive.
	Activity string
	// TaskID is the task of the most recent activation — the running one,
	// if any; "" when the child never had an activation.
	TaskID string
}

// Child returns what the service knows of child session childID, reading
// its header and log without loading or resuming anything. Returns
// ESessionNotFound for an unknown session or one that is not a subagent
// child.
func (m *Manager) Child(ctx context.Context, childID string) (ChildInfo, error) {
	sess, err := m.store.GetSession(ctx, childID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && sess.Origin != OriginSubagent) {
		return ChildInfo{}, subagent.Errorf(subagent.ESessionNotFound, "subagent %q not found", childID)
	}
	if err != nil {
		return ChildInfo{}, fmt.Errorf("read subagent %s: %w", childID, err)
	}
	id, err := m.identity(ctx, childID)
	if err != nil {
		return ChildInfo{}, fmt.Errorf("read subagent %s: %w", childID, err)
	}
	info := ChildInfo{Session: sess, Identity: id, Activity: subagent.ActivityInactive}
	now := time.Now()
	for after := ""; ; {
		runs, err := m.store.ListRuns(ctx, store.RunFilter{ChildID: childID, AfterID: after, Limit: 1000})
		if err != nil {
			return ChildInfo{}, fmt.Errorf("read tasks of subagent %s: %w", childID, err)
		}
		for _, r := range runs {
			if r.Kind == store.KindActivation {
				info.TaskID = r.TaskID
			}
			if subagent.RunningAt(r, now) {
				info.Activity = subagent.ActivityRunning
			}
		}
		if len(runs) < 1000 {
			return info, nil
		}
		after = runs[len(runs)-1].ID
	}
}

// Task returns the activation run of task taskID: its state and, once
// settled, its stop reason and output. Returns ETaskNotFound.
func (m *Manager) Task(ctx context.Context, taskID string) (store.Run, error) {
	runs, err := m.store.ListRuns(ctx, store.RunFilter{TaskID: taskID, Limit: 1})
	if err != nil {
		return store.Run{}, fmt.Errorf("read task %s: %w", taskID, err)
	}
	if len(runs) == 0 || runs[0].Kind != store.KindActivation {
		return store.Run{}, subagent.Errorf(subagent.ETaskNotFound, "task %q not found", taskID)
	}
	return runs[0], nil
}

// Listing entry kinds and diagnostic reasons (docs/seam.md §19).
const (
	EntryChild      = "child"
	EntryDiagnostic = "diagnostic"

	DiagnosticCorrupt = "corrupt"
)

// ListEntry is one row of a children or descendants listing
// (docs/seam.md §19). A child row has Mode, Label (always for continuable children),
// Provider, Activity and HasChildren; a diagnostic row only ID and Reason.
// ParentID and Depth (edges from the root) are set by Descendants.
type ListEntry struct {
	Kind        string
	ID          string
	Mode        string
	Label       string
	Provider    string
	Activity    string
	HasChildren bool
	Reason      string
	ParentID    string
	Depth       int
}

// listConcurrency bounds the hasChildren lookups one listing runs at once
// (R122).
const listConcurrency = 4

// Children lists the subagent children of parentID from their durable
// headers and the runs table (docs/seam.md §19, one read model: R122), without reading
// a log, loading or resuming anything, ordered by creation time then id
// (R121). A child's identity is its header's (see entry). Provider
// registration does not matter (R125). An unknown parent has no children
// (R129). A failing header listing fails the call.
func (m *Manager) Children(ctx context.Context, parentID string) ([]ListEntry, error) {
	kids, err := store.Children(ctx, m.store, parentID)
	if err != nil {
		return nil, err
	}
	kids = slices.DeleteFunc(kids, func(s store.Session) bool { return s.Origin != OriginSubagent })
	running, err := subagent.Running(ctx, m.store, sessionIDs(kids)...)
	if err != nil {
		return nil, err
	}
	rows := make([]*ListEntry, len(kids))
	errs := make([]error, len(kids))
	sem := make(chan struct{}, listConcurrency)
	var wg sync.WaitGroup
	for i, s := range kids {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			rows[i], errs[i] = m.entry(ctx, s, running[s.ID])
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := []ListEntry{}
	for _, r := range rows {
		if r != nil {
			out = append(out, *r)
		}
	}
	return out, nil
}

// Descendants lists every subagent below rootID in stable pre-order
// (siblings by creation time then id), walking through ordinary sessions
// and one-shot children alike, with each row's durable parent and depth
// (R128). The walk is iterative and never revisits a session, so cycles and
// deep chains are safe.
func (m *Manager) Descendants(ctx context.Context, rootID string) ([]ListEntry, error) {
	type frame struct {
		sess  store.Session
		depth int
	}
	var stack []frame
	running := map[string]bool{}
	push := func(parentID string, depth int) error {
		kids, err := store.Children(ctx, m.store, parentID)
		if err != nil {
			return err
		}
		r, err := subagent.Running(ctx, m.store, sessionIDs(kids)...)
		if err != nil {
			return err
		}
		maps.Copy(running, r)
		for _, s := range slices.Backward(kids) {
			stack = append(stack, frame{s, depth})
		}
		return nil
	}
	if err := push(rootID, 1); err != nil {
		return nil, err
	}
	visited := map[string]bool{rootID: true}
	out := []ListEntry{}
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if visited[f.sess.ID] {
			continue
		}
		visited[f.sess.ID] = true
		if f.sess.Origin == OriginSubagent {
			row, err := m.entry(ctx, f.sess, running[f.sess.ID])
			if err != nil {
				return nil, err
			}
			if row != nil {
				row.ParentID, row.Depth = f.sess.ParentID, f.depth
				out = append(out, *row)
			}
		}
		if err := push(f.sess.ID, f.depth+1); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// entry is the listing row of child session s, running when live (see
// Running). Its identity — mode, label, provider — is the one its header
// was created with (one read model, R122): no log is read. A header
// without a mode has none: the row is omitted while the child is live (its
// creation window) and a "corrupt" diagnostic once it is not (R123). The
// error is that of a failed header listing.
func (m *Manager) entry(ctx context.Context, s store.Session, live bool) (*ListEntry, error) {
	switch {
	case s.Mode == "" && live:
		return nil, nil
	case s.Mode == "":
		return &ListEntry{Kind: EntryDiagnostic, ID: s.ID, Reason: DiagnosticCorrupt}, nil
	}
	has, err := m.hasChildren(ctx, s.ID)
	if err != nil {
		return nil, err
	}
	row := &ListEntry{Kind: EntryChild, ID: s.ID, Mode: s.Mode, Label: s.Label, Provider: s.Provider,
		Activity: subagent.ActivityInactive, HasChildren: has}
	if live {
		row.Activity = subagent.ActivityRunning
	}
	return row, nil
}

// hasChildren reports whether some subagent session has id as its parent
// (an ordinary session does not count, R121).
func (m *Manager) hasChildren(ctx context.Context, id string) (bool, error) {
	kids, err := store.Children(ctx, m.store, id)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(kids, func(s store.Session) bool { return s.Origin == OriginSubagent }), nil
}

// identity is IdentityDescriptor over child id's whole log: the full
// descriptor GET /v1/subagents/{childId} shows, read for one child and
// never cached.
func (m *Manager) identity(ctx context.Context, id string) (*sessionlog.Identity, error) {
	var last *sessionlog.Identity
	for after := int64(-1); ; {
		page, err := m.store.Events(ctx, id, after, 1000)
		if err != nil {
			return nil, fmt.Errorf("read log of %s: %w", id, err)
		}
		if len(page) == 0 {
			return last, nil
		}
		// Last wins: the page's own last descriptor, valid or not, decides.
		if slices.ContainsFunc(page, func(e store.Event) bool { return e.Type == sessionlog.EventDescriptor }) {
			last = sessionlog.IdentityDescriptor(page)
		}
		after = page[len(page)-1].Seq
	}
}

// sessionIDs returns the ids of sessions.
func sessionIDs(sessions []store.Session) []string {
	ids := make([]string, len(sessions))
	for i, s := range sessions {
		ids[i] = s.ID
	}
	return ids
}
