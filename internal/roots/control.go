package roots

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/subagentd/subagentd/internal/children"
	"github.com/subagentd/subagentd/internal/resident"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/subagent"
)

// The Manager across replicas (see resident.Control and ManagerConfig.Control).

// Control request ops of the Manager.
const (
	opPrompt = "root.prompt"
	opNotify = "root.notify"
)

type notifyArgs struct {
	Msg   sessionlog.UserMessage `json:"msg"`
	Quiet bool                   `json:"quiet"`
}

// route runs local here, or sends op to the replica that drives root id.
func (r *Manager) route(ctx context.Context, id, op string, payload any, local func() error) error {
	if r.cfg.Control == nil {
		return local()
	}
	_, err := resident.Forward(ctx, r.cfg.Control, id, op, payload, func() (struct{}, error) { return struct{}{}, local() })
	return err
}

// fenced returns ctx whose writes are conditional on this replica holding
// the lease of the root they write to.
func (r *Manager) fenced(ctx context.Context) context.Context {
	if r.cfg.Control == nil {
		return ctx
	}
	return r.cfg.Control.Fenced(ctx)
}

// stop is the fence of s's loop (resident.Policy.Stop): a live root agent
// is closed — a running turn ends aborted and what it had not run stays in
// the durable inbox — since this replica is about to lose its leases.
func (r *Manager) stop(ctx context.Context, s *root) {
	if s.agent == nil {
		return
	}
	if err := r.closeAgent(ctx, s.key.ID, s); err != nil {
		r.log.ErrorContext(ctx, "fence: close root agent", slog.String("session_id", s.key.ID), slog.Any("error", err))
	}
}

// opDeliverWaiting is the control op of DeliverWaiting.
const opDeliverWaiting = "root.deliver-waiting"

// paused reports whether root id's tree holds its prompts back
// (ManagerConfig.Budget); without a Budget nothing is held.
func (r *Manager) paused(ctx context.Context, id string) (bool, error) {
	if r.cfg.Budget == nil {
		return false, nil
	}
	paused, err := r.cfg.Budget.Paused(ctx, id)
	if err != nil {
		return false, fmt.Errorf("read the budget of %s: %w", id, err)
	}
	return paused, nil
}

// DeliverWaiting delivers, on the replica that drives root session id,
// the prompts its durable inbox held back while its tree was paused
// (governance.Waiting): a root without an agent loads one, which
// delivers them (open); a loaded agent gets each prompt it was not
// handed as its next turn, in acceptance order. Notices and reports are
// not held back, so they are left to their own delivery. Returns
// ESessionNotFound, EInvalidRequest for a child session.
func (r *Manager) DeliverWaiting(ctx context.Context, id string) error {
	if err := r.isRoot(ctx, id); err != nil {
		return err
	}
	return r.route(ctx, id, opDeliverWaiting, struct{}{}, func() error {
		return r.do(ctx, id, false, func(s *root) error {
			if s.closed || s.disposed {
				return nil
			}
			// The turns outlive the call: its cancellation reaches none.
			ctx := context.WithoutCancel(ctx)
			if s.agent == nil {
				return r.open(ctx, s, false)
			}
			rows, err := r.cfg.Store.Pending(ctx, id)
			if err != nil {
				return fmt.Errorf("root agent %s: read inbox: %w", id, err)
			}
			logged := sessionlog.LoggedMessages(s.agent.Events())
			for _, row := range rows {
				if row.Quiet || s.unacked[row.ID] || logged[row.ID] {
					continue
				}
				msg, err := children.RowMessage(row)
				if err != nil || msg.Source.Kind != subagent.SourceUser {
					// Notices have their own delivery; an undecodable row
					// is dropped when the agent next loads.
					continue
				}
				if err := s.followup(ctx, msg); err != nil {
					return fmt.Errorf("root agent %s: deliver message %s: %w", id, row.ID, err)
				}
			}
			r.sweep(ctx, id, s)
			return nil
		})
	})
}
