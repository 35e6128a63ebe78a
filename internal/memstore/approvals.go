package memstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/subagentd/subagentd/internal/store"
)

// approvals are the stored approvals. They live under s.mu: every state
// change appends a lifecycle event in the same critical section.
type approvals struct {
	byID    map[string]*store.Approval // every tenant
	pending map[string]int             // pending approvals by run id
	// policies are the trees' policies by root id, every tenant.
	policies map[string]*store.TreePolicy
}

// CreateApproval stores a as pending and appends requested, atomically.
// Returns store.ErrConflict if the id exists, an error for invalid JSON.
func (s *Store) CreateApproval(ctx context.Context, a store.Approval, requested store.LifecycleEvent) (store.Approval, store.LifecycleEvent, error) {
	for _, b := range [][]byte{a.ToolCall.Locations, a.ToolCall.RawInput, requested.Payload} {
		if err := checkJSON(b); err != nil {
			return store.Approval{}, store.LifecycleEvent{}, fmt.Errorf("memstore: create approval %q: %w", a.ID, err)
		}
	}
	s.mu.Lock()
	if _, ok := s.approvals.byID[a.ID]; ok {
		s.mu.Unlock()
		return store.Approval{}, store.LifecycleEvent{}, fmt.Errorf("memstore: create approval %q: %w", a.ID, store.ErrConflict)
	}
	if s.approvals.byID == nil {
		s.approvals.byID, s.approvals.pending = map[string]*store.Approval{}, map[string]int{}
	}
	a.Tenant = store.Tenant(ctx)
	a.State = store.ApprovalPending
	a.Decision = nil
	a.CreatedAt = stamp(a.CreatedAt)
	a.ExpiresAt = norm(a.ExpiresAt)
	a = cloneApproval(a)
	s.approvals.byID[a.ID] = &a
	s.approvals.pending[a.RunID]++
	ev := s.appendLifecycle(a.Tenant, requested)
	out := cloneApproval(a)
	s.mu.Unlock()
	s.hub.Wake(store.LifecycleTopic)
	return out, ev, nil
}

// approval returns the tenant's approval id; s.mu is held.
func (s *Store) approval(ctx context.Context, id string) (*store.Approval, error) {
	a, ok := s.approvals.byID[id]
	if !ok || a.Tenant != store.Tenant(ctx) {
		return nil, fmt.Errorf("memstore: approval %q: %w", id, store.ErrNotFound)
	}
	return a, nil
}

// GetApproval returns one approval. Returns store.ErrNotFound.
func (s *Store) GetApproval(ctx context.Context, id string) (store.Approval, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	a, err := s.approval(ctx, id)
	if err != nil {
		return store.Approval{}, err
	}
	return cloneApproval(*a), nil
}

// ListApprovals returns the tenant's approvals matching f by (CreatedAt,
// ID). Returns store.ErrNotFound for an unknown AfterID.
func (s *Store) ListApprovals(ctx context.Context, f store.ApprovalFilter) ([]store.Approval, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var after *store.Approval
	if f.AfterID != "" {
		a, err := s.approval(ctx, f.AfterID)
		if err != nil {
			return nil, fmt.Errorf("memstore: list approvals after cursor: %w", err)
		}
		after = a
	}
	tenant := store.Tenant(ctx)
	var list []store.Approval
	for _, a := range s.approvals.byID {
		if a.Tenant != tenant || after != nil && cmpApproval(*a, *after) <= 0 ||
			f.State != "" && a.State != f.State || f.RootSessionID != "" && a.RootSessionID != f.RootSessionID ||
			f.SessionID != "" && a.SessionID != f.SessionID || f.RunID != "" && a.RunID != f.RunID {
			continue
		}
		list = append(list, *a)
	}
	slices.SortFunc(list, cmpApproval)
	list = list[:min(len(list), limit(f.Limit))]
	out := make([]store.Approval, len(list))
	for i, a := range list {
		out[i] = cloneApproval(a)
	}
	return out, nil
}

// CloseApproval moves a pending approval to c and appends ev, atomically.
// Returns store.ErrNotFound, or store.ErrConflict if it is not pending.
func (s *Store) CloseApproval(ctx context.Context, id string, c store.ApprovalClose, ev store.LifecycleEvent) (store.Approval, store.LifecycleEvent, error) {
	if err := checkJSON(ev.Payload); err != nil {
		return store.Approval{}, store.LifecycleEvent{}, fmt.Errorf("memstore: close approval %q: %w", id, err)
	}
	s.mu.Lock()
	a, err := s.approval(ctx, id)
	if err == nil && a.State != store.ApprovalPending {
		err = fmt.Errorf("memstore: approval %q is %s: %w", id, a.State, store.ErrConflict)
	}
	if err != nil {
		s.mu.Unlock()
		return store.Approval{}, store.LifecycleEvent{}, err
	}
	if s.approvals.pending[a.RunID]--; s.approvals.pending[a.RunID] <= 0 {
		delete(s.approvals.pending, a.RunID)
	}
	a.State = c.State
	a.Decision = nil
	if c.Always != nil {
		s.rememberLocked(a.Tenant, a.RootSessionID, *c.Always)
	}
	if c.Decision != nil {
		d := *c.Decision
		d.At = stamp(d.At)
		a.Decision = &d
	}
	ev = s.appendLifecycle(a.Tenant, ev)
	out := cloneApproval(*a)
	s.mu.Unlock()
	s.hub.Wake(store.LifecycleTopic)
	return out, ev, nil
}

// PendingApprovals returns the pending approvals of every tenant, oldest
// first, at most 1000.
func (s *Store) PendingApprovals(context.Context) ([]store.Approval, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []store.Approval
	for _, a := range s.approvals.byID {
		if a.State == store.ApprovalPending {
			out = append(out, cloneApproval(*a))
		}
	}
	slices.SortFunc(out, cmpApproval)
	return out[:min(len(out), maxLimit)], nil
}

func cmpApproval(a, b store.Approval) int {
	return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
}

func cloneApproval(a store.Approval) store.Approval {
	a.ToolCall.Locations = cloneJSON(a.ToolCall.Locations)
	a.ToolCall.RawInput = cloneJSON(a.ToolCall.RawInput)
	a.Options = slices.Clone(a.Options)
	if a.Decision != nil {
		d := *a.Decision
		a.Decision = &d
	}
	return a
}

// rememberLocked adds rule to the policy of root as its newest always
// rule; s.mu is held.
func (s *Store) rememberLocked(tenant, root string, rule store.AlwaysRule) {
	p, ok := s.approvals.policies[root]
	if !ok || p.Tenant != tenant {
		if s.approvals.policies == nil {
			s.approvals.policies = map[string]*store.TreePolicy{}
		}
		p = &store.TreePolicy{RootID: root, Tenant: tenant}
		s.approvals.policies[root] = p
	}
	kept := []store.AlwaysRule{rule}
	for _, r := range p.Always {
		if (r.Kind != rule.Kind || r.Title != rule.Title) && len(kept) < store.MaxAlwaysRules {
			kept = append(kept, r)
		}
	}
	p.Always = kept
}

// CreateTreePolicy stores p. Returns store.ErrConflict if its root has a
// policy.
func (s *Store) CreateTreePolicy(ctx context.Context, p store.TreePolicy) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.approvals.policies[p.RootID]; ok {
		return fmt.Errorf("memstore: create the policy of %q: %w", p.RootID, store.ErrConflict)
	}
	if s.approvals.policies == nil {
		s.approvals.policies = map[string]*store.TreePolicy{}
	}
	p = clonePolicy(p)
	p.Tenant = store.Tenant(ctx)
	s.approvals.policies[p.RootID] = &p
	return nil
}

// TreePolicy returns the policy of rootID. Returns store.ErrNotFound.
func (s *Store) TreePolicy(ctx context.Context, rootID string) (store.TreePolicy, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.approvals.policies[rootID]
	if !ok || p.Tenant != store.Tenant(ctx) {
		return store.TreePolicy{}, fmt.Errorf("memstore: the policy of %q: %w", rootID, store.ErrNotFound)
	}
	return clonePolicy(*p), nil
}

func clonePolicy(p store.TreePolicy) store.TreePolicy {
	p.Rules = slices.Clone(p.Rules)
	p.Always = slices.Clone(p.Always)
	return p
}
