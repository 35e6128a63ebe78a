package delegate

import (
	"context"
	"log/slog"

	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Roots across replicas (see subagent.Control and RootsConfig.Control).

// Control request ops of Roots.
const (
	opPrompt = "root.prompt"
	opNotify = "root.notify"
)

type notifyArgs struct {
	Msg   sessionlog.UserMessage `json:"msg"`
	Quiet bool                   `json:"quiet"`
}

// route runs local here, or sends op to the replica that drives root id.
func (r *Roots) route(ctx context.Context, id, op string, payload any, local func() error) error {
	if r.cfg.Control == nil {
		return local()
	}
	_, err := subagent.Forward(ctx, r.cfg.Control, id, op, payload, func() (struct{}, error) { return struct{}{}, local() })
	return err
}

// fenced returns ctx whose writes are conditional on this replica holding
// the lease of the root they write to.
func (r *Roots) fenced(ctx context.Context) context.Context {
	if r.cfg.Control == nil {
		return ctx
	}
	return r.cfg.Control.Fenced(ctx)
}

// stop is the fence of s's loop (resident.Policy.Stop): a live root agent
// is closed — a running turn ends aborted and what it had not run stays in
// the durable inbox — since this replica is about to lose its leases.
func (r *Roots) stop(ctx context.Context, s *root) {
	if s.agent == nil {
		return
	}
	if err := r.closeAgent(ctx, s.key.ID, s); err != nil {
		r.log.ErrorContext(ctx, "fence: close root agent", slog.String("session_id", s.key.ID), slog.Any("error", err))
	}
}
