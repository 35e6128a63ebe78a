package children

import (
	"context"

	"github.com/subagentd/subagentd/internal/resident"
	"github.com/subagentd/subagentd/internal/store"
)

// Recover cold-resumes, at start-up, every child that has undelivered
// messages in the durable inbox — accepted before the previous process
// stopped — and delivers them in acceptance order; a message the child had
// already logged is acknowledged, not delivered twice. A child whose
// pending messages are all quiet is not resumed: they wait for the next
// activation something else starts (see coldResume). Root sessions are
// left to internal/roots. Failures are logged per child and returned joined; the
// other children are still recovered.
func (m *Manager) Recover(ctx context.Context) error {
	return m.children.Recover(ctx, m.store, m.log)
}

// recoverIn cold-resumes child c with pending messages unless it is
// already live (resident.Policy.Resume). It runs in c's loop.
func (m *Manager) recoverIn(ctx context.Context, c *child) error {
	if c.act != nil {
		return nil
	}
	sess, err := m.header(ctx, c)
	if err != nil {
		return err
	}
	if err := m.resumable(ctx, c, sess.ParentID); err != nil {
		return err
	}
	return m.resume(ctx, c)
}

// DeliverWaiting cold-resumes continuable child childID with the
// followups its inbox held while its tree was paused, unless it is live
// (a live activation takes its followups itself). The activation outlives
// the call: ctx's cancellation does not reach it.
func (m *Manager) DeliverWaiting(ctx context.Context, childID string) error {
	ctx = context.WithoutCancel(ctx)
	var err error
	m.do(resident.Key{Tenant: store.Tenant(ctx), ID: childID}, func(c *child) { err = m.recoverIn(ctx, c) })
	return err
}
