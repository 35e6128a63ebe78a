package children

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/subagentd/subagentd/internal/resident"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Control request ops of disposal and tree cancel.
const (
	opDispose            = "child.dispose"
	opCancelTreeRun      = "run.cancel-tree"
	opCancelTreeActivity = "activation.cancel-tree"
)

// cancelTreeArgs is the payload of a tree cancel of one run.
type cancelTreeArgs struct {
	RunID      string `json:"runId"`
	Diagnostic string `json:"diagnostic"`
}

// handleDispose registers the control handlers of Dispose and CancelRunForTree.
func (m *Manager) handleDispose() {
	ctl := m.ctl
	ctl.Handle(opDispose, func(ctx context.Context, child string, raw json.RawMessage) (any, error) {
		var parent string
		if err := json.Unmarshal(raw, &parent); err != nil {
			return nil, err
		}
		return nil, m.Dispose(ctx, parent, child)
	})
	for _, op := range []string{opCancelTreeRun, opCancelTreeActivity} {
		ctl.Handle(op, func(ctx context.Context, _ string, raw json.RawMessage) (any, error) {
			var a cancelTreeArgs
			if err := json.Unmarshal(raw, &a); err != nil {
				return nil, err
			}
			return m.cancelTree(ctx, a.RunID, a.Diagnostic)
		})
	}
}

// Dispose disposes continuable child childID on behalf of its durable
// parent parentSessionID (DELETE /v1/subagents/{childId}): the child is
// marked disposed in the store first (store.DisposeSession), so that no
// replica delivers to it again; the messages accepted and not yet
// delivered are withdrawn (their followup calls answer EDisposed); a live
// activation's turn is cancelled, discarding what it had queued, and
// Dispose returns once it has settled — exactly once, aborted, its agent
// (an ACP process too) closed and its lease released. Later followups get
// EDisposed. Disposing again is a no-op that succeeds. Nothing cascades to
// the child's own children: a tree is disposed from its root
// (internal/governance).
//
// Returns EInvalidRequest for an empty parent id, ESessionNotFound for an
// unknown child, EForbidden when parentSessionID is not its durable
// parent, ENotResumable for a one-shot child (dispose its run instead),
// EAborted when ctx ends before the activation settled (it still settles).
// A child another replica drives is disposed there (see Control).
func (m *Manager) Dispose(ctx context.Context, parentSessionID, childID string) error {
	if parentSessionID == "" {
		return &subagent.Error{Code: subagent.EInvalidRequest, Message: "parentSessionId is required",
			Fields: map[string]string{"parentSessionId": "required"}}
	}
	_, err := resident.Forward(ctx, m.ctl, childID, opDispose, parentSessionID, func() (struct{}, error) {
		var done <-chan struct{}
		var err error
		key := resident.Key{Tenant: store.Tenant(ctx), ID: childID}
		if derr := m.children.DoContext(ctx, key, func(c *child) { done, err = m.dispose(ctx, c, parentSessionID) }); derr != nil {
			return struct{}{}, &subagent.Error{Code: subagent.EAborted, Message: "the dispose was aborted before the child took it", Err: derr}
		}
		if err != nil || done == nil {
			return struct{}{}, err
		}
		select {
		case <-done:
			if sess, err := m.store.GetSession(ctx, childID); err == nil {
				m.forget(ctx, sess)
			}
			return struct{}{}, nil
		case <-ctx.Done():
			return struct{}{}, &subagent.Error{Code: subagent.EAborted, Err: context.Cause(ctx),
				Message: "stopped waiting for the disposed child's activation to settle; it still settles"}
		}
	})
	return err
}

// dispose is Dispose in c's loop. It returns the done channel of the
// activation it stopped, to be awaited off the loop, nil when none was
// live.
func (m *Manager) dispose(ctx context.Context, c *child, parentSessionID string) (<-chan struct{}, error) {
	sess, err := m.header(ctx, c)
	if err != nil {
		return nil, err
	}
	if sess.ParentID != parentSessionID {
		return nil, subagent.Errorf(subagent.EForbidden, "subagent %q belongs to another parent session", c.key.ID)
	}
	if sess.Mode == subagent.ModeOneShot {
		return nil, subagent.Errorf(subagent.ENotResumable, "subagent %q is a one-shot child: dispose its run (DELETE /v1/runs/{runId})", c.key.ID)
	}
	act := c.act
	if act == nil {
		// The lease, held for this command only, orders the mark against
		// a cold resume that another replica is about to start.
		if err := m.children.Hold(ctx, c.key); err != nil {
			return nil, err
		}
	}
	if _, err := m.store.DisposeSession(ctx, c.key.ID, time.Now()); err != nil {
		return nil, fmt.Errorf("dispose subagent %s: %w", c.key.ID, err)
	}
	c.disposed = true
	// What was accepted and not delivered never will be.
	pending, err := m.store.Pending(ctx, c.key.ID)
	if err != nil {
		return nil, fmt.Errorf("dispose subagent %s: read inbox: %w", c.key.ID, err)
	}
	ids := make([]string, len(pending))
	for i, r := range pending {
		ids[i] = r.ID
	}
	if len(ids) > 0 {
		m.ack(ctx, c.key.ID, ids...)
	}
	for id, w := range c.waiters {
		w <- answer{err: disposedError(c.key.ID)}
		delete(c.waiters, id)
	}
	if act == nil {
		m.forget(ctx, sess)
		return nil, nil
	}
	if act.state < actSettling {
		// Read by settle, which a later command of this loop starts; an
		// activation settling already closes its agent, and Dispose has
		// the provider forget what that kept.
		act.discard = true
	}
	if act.to(actInterrupted) {
		act.agent.Cancel(sessionlog.CauseDisposed, false)
	}
	return act.done, nil
}

// Discarder is a ChildAgent whose Close keeps something for the child's
// next activation (an ACP agent's process, for its idle timeout): Discard
// closes it keeping nothing. A disposed child's agent is discarded.
type Discarder interface {
	Discard(ctx context.Context) error
}

// ChildForgetter is a provider that may keep something for a continuable
// child between its activations (an idle ACP agent): ForgetChild stops it
// and returns once it is gone. A disposed child is forgotten.
type ChildForgetter interface {
	ForgetChild(ctx context.Context, childID string)
}

// forget has the provider of the child sess stop what it keeps for it.
func (m *Manager) forget(ctx context.Context, sess store.Session) {
	if p, ok := m.svc.Provider(sess.Provider); ok {
		if f, ok := p.(ChildForgetter); ok {
			f.ForgetChild(ctx, sess.ID)
		}
	}
}

// disposedError is the answer to input for disposed child id.
func disposedError(id string) error {
	return subagent.Errorf(subagent.EDisposed, "subagent %q was disposed; it takes no more messages", id)
}

// notDisposed returns EDisposed when c was disposed, known in its loop or
// read from the store when c has no live activation (a live one was
// disposed through this loop). It runs in c's loop.
func (m *Manager) notDisposed(ctx context.Context, c *child) error {
	if !c.disposed && c.act == nil {
		at, err := m.store.Disposed(ctx, c.key.ID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("read disposal of %s: %w", c.key.ID, err)
		}
		c.disposed = !at.IsZero()
	}
	if c.disposed {
		return disposedError(c.key.ID)
	}
	return nil
}

// CancelRunForTree cancels run runID — a one-shot run or an activation —
// as part of a tree cancel, on the replica that drives it, and returns
// once it has settled and, for a one-shot run, its provider released it
// (an ACP agent's process is stopped; or ctx ended), with diagnostic as
// the diagnostic of its aborted end. It reports whether the run was live and this call
// cancelled it: a run settled already, settling, or lost with its owner
// (the reaper closes it) counts as not. An activation's accepted messages
// stay in the durable inbox, as after Interrupt, and run with the next
// followup.
func (m *Manager) CancelRunForTree(ctx context.Context, runID, diagnostic string) (bool, error) {
	run, err := m.store.GetRun(ctx, runID)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read run %s: %w", runID, err)
	}
	if run.State != store.StateRunning {
		return false, nil
	}
	args := cancelTreeArgs{RunID: runID, Diagnostic: diagnostic}
	local := func() (bool, error) { return m.cancelTree(ctx, runID, diagnostic) }
	if run.Kind == store.KindActivation {
		return resident.Forward(ctx, m.ctl, run.ChildID, opCancelTreeActivity, args, local)
	}
	return resident.ForwardRun(ctx, m.ctl, run, opCancelTreeRun, args, local)
}

// cancelTree is CancelRunForTree on this replica.
func (m *Manager) cancelTree(ctx context.Context, runID, diagnostic string) (bool, error) {
	if h, ok := m.svc.Run(ctx, runID); ok {
		cancelled := h.CancelWith(diagnostic)
		select {
		case <-h.Done():
		case <-ctx.Done():
		}
		if cancelled {
			// As at a settlement the agent answered: its process goes too.
			if err := h.Release(ctx); err != nil {
				m.log.WarnContext(ctx, "release a run cancelled by its tree", slog.String("run_id", runID), slog.Any("error", err))
			}
		}
		return cancelled, nil
	}
	act, err := m.liveRun(ctx, runID)
	if err != nil {
		if subagent.ErrorCode(err) == subagent.ERunNotFound {
			return false, nil
		}
		return false, err
	}
	cancelled := false
	m.do(act.c.key, func(c *child) {
		if c.act == act && act.to(actInterrupted) {
			act.diagnostic = diagnostic
			act.agent.Cancel(sessionlog.CauseUser, true)
			cancelled = true
		}
	})
	select {
	case <-act.done:
	case <-ctx.Done():
	}
	return cancelled, nil
}
