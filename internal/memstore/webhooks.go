package memstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

// maxDeliveries bounds the delivery log kept per endpoint; the oldest
// attempts beyond it are dropped.
const maxDeliveries = 1000

// hooks are the webhook endpoints and their delivery logs. They live under
// s.mu: claims read the lifecycle log, and creation takes its newest id.
type hooks struct {
	byID map[string]*hook // every tenant
}

type hook struct {
	w          store.Webhook
	deliveries []store.WebhookDelivery // oldest first
}

// CreateWebhook stores w with Cursor at the newest lifecycle id. Returns
// store.ErrConflict if the id exists.
func (s *Store) CreateWebhook(ctx context.Context, w store.Webhook) (store.Webhook, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.hooks.byID[w.ID]; ok {
		return store.Webhook{}, fmt.Errorf("memstore: create webhook %q: %w", w.ID, store.ErrConflict)
	}
	if w.Push != nil {
		for _, h := range s.hooks.byID {
			if p := h.w.Push; p != nil && h.w.Tenant == store.Tenant(ctx) && p.TaskID == w.Push.TaskID && p.ConfigID == w.Push.ConfigID {
				return store.Webhook{}, fmt.Errorf("memstore: create webhook %q: task %q has config %q: %w", w.ID, p.TaskID, p.ConfigID, store.ErrConflict)
			}
		}
	}
	if s.hooks.byID == nil {
		s.hooks.byID = map[string]*hook{}
	}
	w.Tenant = store.Tenant(ctx)
	w.CreatedAt = stamp(w.CreatedAt)
	w.PrevSecretUntil = norm(w.PrevSecretUntil)
	w.NextAttemptAt = norm(w.NextAttemptAt)
	w.Cursor = s.lifeBase + int64(len(s.lifecycle))
	w.RetryEvent, w.Attempts, w.Owner, w.LeaseUntil = 0, 0, "", time.Time{}
	w = cloneWebhook(w)
	s.hooks.byID[w.ID] = &hook{w: w}
	defer s.hub.Wake(store.WebhooksTopic)
	return cloneWebhook(w), nil
}

// hook returns the tenant's endpoint id; s.mu is held.
func (s *Store) hook(ctx context.Context, id string) (*hook, error) {
	h, ok := s.hooks.byID[id]
	if !ok || h.w.Tenant != store.Tenant(ctx) {
		return nil, fmt.Errorf("memstore: webhook %q: %w", id, store.ErrNotFound)
	}
	return h, nil
}

// GetWebhook returns one endpoint. Returns store.ErrNotFound.
func (s *Store) GetWebhook(ctx context.Context, id string) (store.Webhook, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	h, err := s.hook(ctx, id)
	if err != nil {
		return store.Webhook{}, err
	}
	return cloneWebhook(h.w), nil
}

// ListWebhooks returns the tenant's endpoints not scoped to a task by
// (CreatedAt, ID).
func (s *Store) ListWebhooks(ctx context.Context) ([]store.Webhook, error) {
	return s.listWebhooks(ctx, "")
}

// TaskWebhooks returns the tenant's endpoints scoped to task taskID by
// (CreatedAt, ID).
func (s *Store) TaskWebhooks(ctx context.Context, taskID string) ([]store.Webhook, error) {
	if taskID == "" {
		return []store.Webhook{}, nil
	}
	return s.listWebhooks(ctx, taskID)
}

// listWebhooks returns the tenant's endpoints scoped to task taskID, or to
// none when taskID is "", by (CreatedAt, ID).
func (s *Store) listWebhooks(ctx context.Context, taskID string) ([]store.Webhook, error) {
	tenant := store.Tenant(ctx)
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := []store.Webhook{}
	for _, h := range s.hooks.byID {
		task := ""
		if h.w.Push != nil {
			task = h.w.Push.TaskID
		}
		if h.w.Tenant == tenant && task == taskID {
			out = append(out, cloneWebhook(h.w))
		}
	}
	slices.SortFunc(out, func(a, b store.Webhook) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return out[:min(len(out), maxLimit)], nil
}

// UpdateWebhook applies u. Returns store.ErrNotFound.
func (s *Store) UpdateWebhook(ctx context.Context, id string, u store.WebhookUpdate) (store.Webhook, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, err := s.hook(ctx, id)
	if err != nil {
		return store.Webhook{}, err
	}
	w := &h.w
	if u.URL != nil {
		w.URL = *u.URL
	}
	if u.Events != nil {
		w.Events = slices.Clone(u.Events)
	}
	if u.Description != nil {
		w.Description = *u.Description
	}
	if u.Enabled != nil {
		switch {
		case *u.Enabled && !w.Enabled:
			w.Enabled, w.DisabledReason = true, ""
			w.RetryEvent, w.Attempts, w.NextAttemptAt = 0, 0, time.Time{}
		case !*u.Enabled && w.Enabled:
			w.Enabled, w.DisabledReason = false, "manual"
		}
	}
	if u.Secret != "" {
		w.PrevSecret, w.PrevSecretUntil, w.Secret = w.Secret, norm(u.PrevSecretUntil), u.Secret
	}
	defer s.hub.Wake(store.WebhooksTopic)
	return cloneWebhook(*w), nil
}

// DeleteWebhook removes the endpoint and its deliveries. Returns
// store.ErrNotFound.
func (s *Store) DeleteWebhook(ctx context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.hook(ctx, id); err != nil {
		return err
	}
	delete(s.hooks.byID, id)
	return nil
}

// ClaimWebhooks leases to p.Owner the enabled endpoints with events after
// their cursor, a due retry and a free, lapsed or own lease.
func (s *Store) ClaimWebhooks(_ context.Context, p store.ClaimWebhooksParams) ([]store.Webhook, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.Webhook
	for _, h := range s.hooks.byID {
		w := &h.w
		if len(out) == limit(p.Limit) {
			break
		}
		if !w.Enabled || s.lifeLast[w.Tenant] <= w.Cursor || w.NextAttemptAt.After(p.Now) ||
			(w.Owner != "" && w.Owner != p.Owner && !w.LeaseUntil.Before(p.Now)) {
			continue
		}
		w.Owner, w.LeaseUntil = p.Owner, norm(p.Until)
		out = append(out, cloneWebhook(*w))
	}
	return out, nil
}

// AdvanceWebhook records p if p.Owner holds the lease. Returns
// store.ErrFenced or store.ErrNotFound.
func (s *Store) AdvanceWebhook(_ context.Context, p store.AdvanceWebhookParams) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.hooks.byID[p.ID]
	switch {
	case !ok:
		return fmt.Errorf("memstore: advance webhook %q: %w", p.ID, store.ErrNotFound)
	case h.w.Owner != p.Owner:
		return fmt.Errorf("memstore: advance webhook %q: %w", p.ID, store.ErrFenced)
	}
	w := &h.w
	w.Cursor = max(w.Cursor, p.Cursor)
	w.RetryEvent, w.Attempts, w.NextAttemptAt = p.RetryEvent, p.Attempts, norm(p.NextAttemptAt)
	if p.Disable != "" {
		w.Enabled, w.DisabledReason = false, p.Disable
	}
	w.LeaseUntil = norm(p.Until)
	if p.Delivery != nil {
		h.add(*p.Delivery)
	}
	return nil
}

// add appends d to the delivery log, dropping the oldest beyond
// maxDeliveries; s.mu is held.
func (h *hook) add(d store.WebhookDelivery) {
	d.At = stamp(d.At)
	d.Body = slices.Clone(d.Body)
	h.deliveries = append(h.deliveries, d)
	if over := len(h.deliveries) - maxDeliveries; over > 0 {
		h.deliveries = slices.Delete(h.deliveries, 0, over)
	}
}

// ReleaseWebhook drops owner's lease on the endpoint.
func (s *Store) ReleaseWebhook(_ context.Context, id, owner string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.hooks.byID[id]; ok && h.w.Owner == owner {
		h.w.Owner, h.w.LeaseUntil = "", time.Time{}
	}
	return nil
}

// WebhooksEnabled reports whether any tenant has an enabled endpoint.
func (s *Store) WebhooksEnabled(context.Context) (bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, h := range s.hooks.byID {
		if h.w.Enabled {
			return true, nil
		}
	}
	return false, nil
}

// WebhookBacklog counts, per enabled endpoint, at most upTo of its
// tenant's lifecycle events after its cursor, and finds the oldest.
func (s *Store) WebhookBacklog(_ context.Context, upTo int) (store.WebhookBacklog, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var b store.WebhookBacklog
	for _, h := range s.hooks.byID {
		if !h.w.Enabled {
			continue
		}
		n := 0
		for _, rec := range s.lifecycle[min(max(h.w.Cursor-s.lifeBase, 0), int64(len(s.lifecycle))):] {
			if n == upTo {
				break
			}
			if rec.tenant != h.w.Tenant {
				continue
			}
			if n == 0 && (b.Oldest.IsZero() || rec.ev.Time.Before(b.Oldest)) {
				b.Oldest = rec.ev.Time
			}
			n++
		}
		b.Events += int64(n)
	}
	return b, nil
}

// AddWebhookDelivery adds d to the endpoint's delivery log. Returns
// store.ErrNotFound.
func (s *Store) AddWebhookDelivery(ctx context.Context, d store.WebhookDelivery) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, err := s.hook(ctx, d.WebhookID)
	if err != nil {
		return err
	}
	h.add(d)
	return nil
}

// WebhookDeliveries returns the endpoint's deliveries, newest first.
// Returns store.ErrNotFound for an unknown endpoint or f.BeforeID.
func (s *Store) WebhookDeliveries(ctx context.Context, f store.WebhookDeliveryFilter) ([]store.WebhookDelivery, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	h, err := s.hook(ctx, f.WebhookID)
	if err != nil {
		return nil, err
	}
	end := len(h.deliveries)
	if f.BeforeID != "" {
		end = slices.IndexFunc(h.deliveries, func(d store.WebhookDelivery) bool { return d.ID == f.BeforeID })
		if end < 0 {
			return nil, fmt.Errorf("memstore: delivery %q: %w", f.BeforeID, store.ErrNotFound)
		}
	}
	out := []store.WebhookDelivery{}
	for i := end - 1; i >= 0 && len(out) < limit(f.Limit); i-- {
		out = append(out, cloneDelivery(h.deliveries[i]))
	}
	return out, nil
}

// GetWebhookDelivery returns one delivery. Returns store.ErrNotFound.
func (s *Store) GetWebhookDelivery(ctx context.Context, webhookID, id string) (store.WebhookDelivery, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	h, err := s.hook(ctx, webhookID)
	if err != nil {
		return store.WebhookDelivery{}, err
	}
	for _, d := range h.deliveries {
		if d.ID == id {
			return cloneDelivery(d), nil
		}
	}
	return store.WebhookDelivery{}, fmt.Errorf("memstore: delivery %q: %w", id, store.ErrNotFound)
}

// SweepWebhookDeliveries deletes the deliveries made before before.
func (s *Store) SweepWebhookDeliveries(_ context.Context, before time.Time) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, h := range s.hooks.byID {
		kept := slices.DeleteFunc(h.deliveries, func(d store.WebhookDelivery) bool { return d.At.Before(before) })
		n += int64(len(h.deliveries) - len(kept))
		h.deliveries = kept
	}
	return n, nil
}

func cloneWebhook(w store.Webhook) store.Webhook {
	w.Events = slices.Clone(w.Events)
	if w.Push != nil {
		p := *w.Push
		w.Push = &p
	}
	return w
}

func cloneDelivery(d store.WebhookDelivery) store.WebhookDelivery {
	d.Body = slices.Clone(d.Body)
	return d
}
