package memstore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

// Resident leases live under s.mu with the tables whose writes they fence
// (session logs, runs); control requests under a lock of their own.

// ClaimResident makes owner the holder of sessionID's lease when it is
// free, owner's, or lapsed before now.
func (s *Store) ClaimResident(ctx context.Context, p store.ClaimParams) (store.Resident, bool, error) {
	sessionID, owner, now, until := p.SessionID, p.Owner, p.Now, p.Until
	key := [2]string{store.Tenant(ctx), sessionID}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.residents[key]
	if ok && r.Owner != owner && !r.LeaseUntil.Before(now) {
		return r, false, nil
	}
	r = store.Resident{Tenant: key[0], SessionID: sessionID, Owner: owner, LeaseUntil: norm(until)}
	if s.residents == nil {
		s.residents = map[[2]string]store.Resident{}
	}
	s.residents[key] = r
	return r, true, nil
}

// GetResident returns sessionID's lease. Returns store.ErrNotFound.
func (s *Store) GetResident(ctx context.Context, sessionID string) (store.Resident, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r, ok := s.residents[[2]string{store.Tenant(ctx), sessionID}]
	if !ok {
		return store.Resident{}, fmt.Errorf("memstore: resident %q: %w", sessionID, store.ErrNotFound)
	}
	return r, nil
}

// ReleaseResident drops sessionID's lease if owner holds it.
func (s *Store) ReleaseResident(ctx context.Context, sessionID, owner string) error {
	key := [2]string{store.Tenant(ctx), sessionID}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.residents[key]; ok && r.Owner == owner {
		delete(s.residents, key)
	}
	return nil
}

// Driving returns which of sessionIDs have a live lease and an open turn.
func (s *Store) Driving(ctx context.Context, sessionIDs []string, now time.Time) (map[string]bool, error) {
	tenant := store.Tenant(ctx)
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := map[string]bool{}
	for _, id := range sessionIDs[:min(len(sessionIDs), maxLimit)] {
		r, ok := s.residents[[2]string{tenant, id}]
		sess := s.sessions[id]
		if !ok || r.LeaseUntil.Before(now) || sess == nil || sess.tenant != tenant {
			continue
		}
		for _, e := range slices.Backward(sess.events) {
			if e.Type == store.TurnStartEvent || e.Type == store.TurnEndEvent {
				if e.Type == store.TurnStartEvent {
					out[id] = true
				}
				break
			}
		}
	}
	return out, nil
}

// ExpiredResidents returns the leases of every tenant that ended before
// now, oldest first, at most 1000.
func (s *Store) ExpiredResidents(_ context.Context, now time.Time) ([]store.Resident, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []store.Resident
	for _, r := range s.residents {
		if r.LeaseUntil.Before(now) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b store.Resident) int {
		return cmp.Or(a.LeaseUntil.Compare(b.LeaseUntil), cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.SessionID, b.SessionID))
	})
	return out[:min(len(out), maxLimit)], nil
}

// renewResidents sets LeaseUntil of owner's leases. The caller holds s.mu.
func (s *Store) renewResidents(owner string, until time.Time) {
	for k, r := range s.residents {
		if r.Owner == owner {
			r.LeaseUntil = until
			s.residents[k] = r
		}
	}
}

// fenced returns store.ErrFenced when ctx carries an owner that does not
// hold the lease of tenant's session id. The caller holds s.mu.
func (s *Store) fenced(ctx context.Context, tenant, id string) error {
	owner := store.Owner(ctx)
	if owner == "" {
		return nil
	}
	if r, ok := s.residents[[2]string{tenant, id}]; ok && r.Owner == owner {
		return nil
	}
	return fmt.Errorf("%q no longer holds the lease of %q: %w", owner, id, store.ErrFenced)
}

// controls are the control requests, by id, in sending order.
type controls struct {
	mu    sync.Mutex
	byID  map[string]*store.Control
	order []string
}

// SendControl stores c unanswered and wakes its owner.
func (s *Store) SendControl(ctx context.Context, c store.Control) error {
	if err := checkJSON(c.Payload); err != nil {
		return fmt.Errorf("memstore: send control %q: payload: %w", c.ID, err)
	}
	t := &s.controls
	t.mu.Lock()
	if _, ok := t.byID[c.ID]; ok {
		t.mu.Unlock()
		return fmt.Errorf("memstore: send control %q: %w", c.ID, store.ErrConflict)
	}
	if t.byID == nil {
		t.byID = map[string]*store.Control{}
	}
	c.Tenant, c.CreatedAt, c.Payload = store.Tenant(ctx), stamp(c.CreatedAt), cloneJSON(c.Payload)
	c.Answer, c.AnsweredAt = nil, time.Time{}
	t.byID[c.ID] = &c
	t.order = append(t.order, c.ID)
	t.mu.Unlock()
	s.hub.Wake(store.ControlTopic(c.Owner))
	return nil
}

// Controls returns owner's unanswered requests of every tenant, oldest
// first, at most 1000.
func (s *Store) Controls(_ context.Context, owner string) ([]store.Control, error) {
	t := &s.controls
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []store.Control
	for _, id := range t.order {
		if c := t.byID[id]; c.Owner == owner && c.AnsweredAt.IsZero() && len(out) < maxLimit {
			out = append(out, cloneControl(*c))
		}
	}
	return out, nil
}

// AnswerControl stores the answer to request id and wakes its requester.
func (s *Store) AnswerControl(ctx context.Context, id string, answer json.RawMessage) error {
	if err := checkJSON(answer); err != nil {
		return fmt.Errorf("memstore: answer control %q: %w", id, err)
	}
	t := &s.controls
	t.mu.Lock()
	c, ok := t.byID[id]
	var err error
	switch {
	case !ok || c.Tenant != store.Tenant(ctx):
		err = store.ErrNotFound
	case !c.AnsweredAt.IsZero():
		err = store.ErrConflict
	default:
		c.Answer, c.AnsweredAt = cloneJSON(answer), stamp(time.Time{})
	}
	t.mu.Unlock()
	if err != nil {
		return fmt.Errorf("memstore: answer control %q: %w", id, err)
	}
	s.hub.Wake(store.AnswerTopic(id))
	return nil
}

// GetControl returns one request. Returns store.ErrNotFound.
func (s *Store) GetControl(ctx context.Context, id string) (store.Control, error) {
	t := &s.controls
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.byID[id]
	if !ok || c.Tenant != store.Tenant(ctx) {
		return store.Control{}, fmt.Errorf("memstore: control %q: %w", id, store.ErrNotFound)
	}
	return cloneControl(*c), nil
}

// DeleteControl removes request id; unknown ids are ignored.
func (s *Store) DeleteControl(ctx context.Context, id string) error {
	t := &s.controls
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.byID[id]; ok && c.Tenant == store.Tenant(ctx) {
		delete(t.byID, id)
		t.order = slices.DeleteFunc(t.order, func(x string) bool { return x == id })
	}
	return nil
}

// SweepControls deletes the requests of every tenant sent before before.
func (s *Store) SweepControls(_ context.Context, before time.Time) (int64, error) {
	t := &s.controls
	t.mu.Lock()
	defer t.mu.Unlock()
	n := sweep(t.byID, func(c *store.Control) bool { return c.CreatedAt.Before(before) })
	if n > 0 {
		t.order = slices.DeleteFunc(t.order, func(id string) bool { _, ok := t.byID[id]; return !ok })
	}
	return n, nil
}

func cloneControl(c store.Control) store.Control {
	c.Payload, c.Answer = cloneJSON(c.Payload), cloneJSON(c.Answer)
	return c
}
