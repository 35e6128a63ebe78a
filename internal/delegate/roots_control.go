package delegate

import (
	"context"
	"log/slog"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Roots across replicas (see subagent.Control and RootsConfig.Control).

// Control request ops of Roots.
const (
	opPrompt = "root.prompt"
	opNotify = "root.notify"
)

type notifyArgs struct {
	Msg   agent.UserMessage `json:"msg"`
	Quiet bool              `json:"quiet"`
}

var _ subagent.ResidentKind = (*Roots)(nil)

// route runs local here, or sends op to the replica that drives root id.
func (r *Roots) route(ctx context.Context, id, op string, payload any, local func() error) error {
	if r.cfg.Control == nil {
		return local()
	}
	_, err := subagent.Route(ctx, r.cfg.Control, id, op, payload, func() (struct{}, error) { return struct{}{}, local() })
	return err
}

// hold claims s's resident lease before a command of its loop runs.
// Returns subagent.ErrHeldElsewhere when another replica holds it live.
func (r *Roots) hold(ctx context.Context, s *root) error {
	if r.cfg.Control == nil || s.held {
		return nil
	}
	if err := r.cfg.Control.Claim(ctx, s.key.id); err != nil {
		return err
	}
	s.held = true
	return nil
}

// unhold releases s's lease once it holds nothing live. It runs in s's
// loop.
func (r *Roots) unhold(s *root) {
	if s.held && s.agent == nil && len(s.notices) == 0 {
		s.held = false
		r.cfg.Control.Release(store.WithTenant(context.Background(), s.key.tenant), s.key.id)
	}
}

// fenced returns ctx whose writes are conditional on this replica holding
// the lease of the root they write to.
func (r *Roots) fenced(ctx context.Context) context.Context {
	if r.cfg.Control == nil {
		return ctx
	}
	return r.cfg.Control.Fenced(ctx)
}

// TakeOver loads root session sess, whose owner was lost, which delivers
// its undelivered messages.
func (r *Roots) TakeOver(ctx context.Context, sess store.Session) (bool, error) {
	if sess.ParentID != "" {
		return false, nil
	}
	return true, r.do(ctx, sess.ID, true, func(*root) error { return nil })
}

// Fence closes every live root agent at once — a running turn ends aborted
// and what it had not run stays in the durable inbox — since this replica
// is about to lose its leases.
func (r *Roots) Fence(ctx context.Context) {
	r.roots.Each(func(s *root) {
		if s.agent == nil {
			return
		}
		if err := r.closeAgent(store.WithTenant(ctx, s.key.tenant), s.key.id, s); err != nil {
			r.log.ErrorContext(ctx, "fence: close root agent", slog.String("session_id", s.key.id), slog.Any("error", err))
		}
		r.unhold(s)
	})
}
