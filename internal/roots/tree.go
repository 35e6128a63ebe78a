package roots

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/subagentd/subagentd/internal/resident"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Tree control of root sessions (internal/governance drives it): stopping
// a root's own turn, and disposing a root.

// Control request ops of tree control.
const (
	opStopTurn = "root.stop-turn"
	opDispose  = "root.dispose"
)

// handleTree registers the control handlers of StopTurn and Dispose.
func (r *Manager) handleTree(ctl *resident.Control) {
	ctl.Handle(opStopTurn, func(ctx context.Context, id string, _ json.RawMessage) (any, error) {
		return r.StopTurn(ctx, id)
	})
	ctl.Handle(opDispose, func(ctx context.Context, id string, _ json.RawMessage) (any, error) {
		return nil, r.Dispose(ctx, id)
	})
}

// StopTurn stops the running turn of root session id's own agent, on the
// replica that drives it, and reports whether one ran: the agent is
// closed, so the turn ends aborted and what it had queued and not run
// stays in the durable inbox for the root's next prompt; notices that
// arrive meanwhile go to the log without waking it. A root without a
// running turn is left alone. Returns ESessionNotFound, EInvalidRequest
// for a child session.
func (r *Manager) StopTurn(ctx context.Context, id string) (bool, error) {
	if err := r.isRoot(ctx, id); err != nil {
		return false, err
	}
	local := func() (bool, error) {
		stopped := false
		var err error
		r.roots.Peek(resident.Key{Tenant: store.Tenant(ctx), ID: id}, func(s *root) {
			if s.agent == nil || !s.agent.Running() {
				return
			}
			if err = r.closeAgent(ctx, id, s); err == nil {
				stopped = true
			}
		})
		return stopped, err
	}
	if r.cfg.Control == nil {
		return local()
	}
	return resident.Forward(ctx, r.cfg.Control, id, opStopTurn, struct{}{}, local)
}

// Dispose disposes root session id (the last step of DELETE
// /v1/sessions/{id}): it is marked disposed (store.DisposeSession), so
// that later prompts get EDisposed on every replica; its live agent is
// closed, a running turn ending aborted, and the messages accepted and not
// delivered are withdrawn. Idempotent. Returns ESessionNotFound,
// EInvalidRequest for a child session.
func (r *Manager) Dispose(ctx context.Context, id string) error {
	if err := r.isRoot(ctx, id); err != nil {
		return err
	}
	return r.route(ctx, id, opDispose, struct{}{}, func() error {
		return r.do(ctx, id, false, func(s *root) error {
			if _, err := r.cfg.Store.DisposeSession(ctx, id, time.Now()); err != nil {
				return fmt.Errorf("dispose session %s: %w", id, err)
			}
			s.disposed = true
			if s.agent != nil {
				if err := r.closeAgent(ctx, id, s); err != nil {
					r.log.ErrorContext(ctx, "dispose: close root agent", slog.String("session_id", id), slog.Any("error", err))
				}
			}
			pending, err := r.cfg.Store.Pending(ctx, id)
			if err != nil {
				return fmt.Errorf("dispose session %s: read inbox: %w", id, err)
			}
			ids := make([]string, len(pending))
			for i, p := range pending {
				ids[i] = p.ID
			}
			if len(ids) > 0 {
				r.ack(ctx, id, ids...)
			}
			return nil
		})
	})
}

// notDisposed returns EDisposed when root s was disposed, remembered once
// known. It runs in s's loop.
func (r *Manager) notDisposed(ctx context.Context, s *root) error {
	if !s.disposed {
		at, err := r.cfg.Store.Disposed(ctx, s.key.ID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("read disposal of %s: %w", s.key.ID, err)
		}
		s.disposed = !at.IsZero()
	}
	if s.disposed {
		return subagent.Errorf(subagent.EDisposed, "session %q was disposed; it takes no more prompts", s.key.ID)
	}
	return nil
}
