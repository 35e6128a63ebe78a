package subagent

import (
	"context"

	"github.com/subagentd/subagentd/internal/store"
)

// Recover cold-resumes, at start-up, every child that has undelivered
// messages in the durable inbox — accepted before the previous process
// stopped — and delivers them in acceptance order; a message the child had
// already logged is acknowledged, not delivered twice. A child whose
// pending messages are all quiet is not resumed: they wait for the next
// activation something else starts (see coldResume). Root sessions are
// left to Roots. Failures are logged per child and returned joined; the
// other children are still recovered.
func (m *Manager) Recover(ctx context.Context) error {
	return RecoverInboxes(ctx, m.store, m.log, func(ctx context.Context, sess store.Session) error {
		if sess.ParentID == "" {
			return nil // a root session
		}
		return m.recoverChild(ctx, sess.ID)
	})
}

// recoverChild cold-resumes one child with pending messages unless it is
// already live.
func (m *Manager) recoverChild(ctx context.Context, childID string) error {
	var err error
	m.do(childKey{store.Tenant(ctx), childID}, func(c *child) {
		if c.act != nil {
			return
		}
		var sess store.Session
		if sess, err = m.header(ctx, c); err != nil {
			return
		}
		if err = m.resumable(ctx, c, sess.ParentID); err != nil {
			return
		}
		err = m.resume(ctx, c)
	})
	return err
}
