package children

import (
	"context"
	"fmt"

	"github.com/subagentd/subagentd/internal/resident"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Interrupt stops the current turn of continuable child childID on behalf
// of a human presenting its durable parent's address (docs/seam.md §16,
// user authority). The turn ends aborted with cause user (R101) and returns
// before it has unwound. Messages accepted but not yet admitted stay parked
// in the durable inbox and run first, in order, when the next followup
// starts the child again (R102–R103); their followup calls answer then.
// The interrupted activation then settles (it emits
// its subagent/end and notice) instead of staying resident: residency is
// not observable through the API, and the parked messages are durable.
// Nothing cascades to the child's own children.
//
// A child that is not live, a one-shot child, or an activation already
// settling is an accepted no-op (R98, R104). Returns ESessionNotFound for
// an unknown child and EForbidden when parentSessionID is not its
// durable parent — checked for live and settled children alike. A child
// another replica drives is interrupted there (see Control).
func (m *Manager) Interrupt(ctx context.Context, parentSessionID, childID string) error {
	_, err := resident.Forward(ctx, m.ctl, childID, opInterrupt, parentSessionID, func() (struct{}, error) {
		var err error
		key := resident.Key{Tenant: store.Tenant(ctx), ID: childID}
		if derr := m.children.DoContext(ctx, key, func(c *child) { err = m.interrupt(ctx, c, parentSessionID) }); derr != nil {
			return struct{}{}, &subagent.Error{Code: subagent.EAborted, Message: "the interrupt was aborted before the child took it", Err: derr}
		}
		return struct{}{}, err
	})
	return err
}

// interrupt is Interrupt in c's loop.
func (m *Manager) interrupt(ctx context.Context, c *child, parentSessionID string) error {
	childID := c.key.ID
	sess, err := m.header(ctx, c)
	if err != nil {
		return err
	}
	if sess.ParentID != parentSessionID {
		return subagent.Errorf(subagent.EForbidden, "subagent %q belongs to another parent session", childID)
	}
	act := c.act
	if act == nil {
		return nil // not running: a no-op (R98)
	}
	if !act.to(actInterrupted) {
		return nil // interrupted or settling already (R104)
	}
	act.agent.Cancel(sessionlog.CauseUser, true)
	return nil
}

// Shutdown stops admission (EDraining for every later start, followup and
// report), cancels the turn of every live activation keeping its inbox, and
// waits until each has settled (subagent/end emitted); their notices no
// longer wake parents (R118). Messages not yet admitted stay in the durable
// inbox for Recover after the restart, and followup calls still waiting for
// them return EAborted; durable sessions are untouched. Returns ctx's error
// when it ends first.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.draining.Store(true)
	var acts []*activation
	m.children.Each(func(c *child) {
		if act := c.act; act != nil {
			act.agent.Cancel(sessionlog.CauseDisposed, true)
			acts = append(acts, act)
		}
	})
	for _, act := range acts {
		select {
		case <-act.done:
		case <-ctx.Done():
			return fmt.Errorf("shutdown: waiting for activations to settle: %w", ctx.Err())
		}
	}
	// Followups still waiting for a route (parked, or owed to an activation
	// that will not start now) are released; their messages stay accepted.
	m.children.Each(func(c *child) {
		for id, w := range c.waiters {
			w <- answer{err: &subagent.Error{Code: subagent.EAborted,
				Message: "the service is shutting down; the followup was accepted and will be delivered when the child next runs"}}
			delete(c.waiters, id)
		}
	})
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("shutdown: waiting for deliveries: %w", ctx.Err())
	}
}
