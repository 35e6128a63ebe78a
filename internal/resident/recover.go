package resident

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/subagentd/subagentd/internal/store"
)

// RecoverInboxes calls recover, at start-up, for the header of every
// session of any tenant that has undelivered inbox rows, oldest message
// first, with ctx scoped to the session's tenant and without cancellation.
// Every kind recovers through it (Group.Recover), each taking its own
// sessions. Failures are logged per session and returned joined; the other
// sessions are still recovered. A session another replica drives (its
// lease is live: ErrHeldElsewhere) is left to that replica.
func RecoverInboxes(ctx context.Context, st store.Store, log *slog.Logger, recover func(ctx context.Context, sess store.Session) error) error {
	tried := map[store.PendingChild]bool{}
	var errs []error
	for {
		// The store lists at most 1000 sessions a call: list again until a
		// call names none that was not tried already.
		pending, err := st.PendingChildren(ctx)
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("recover inboxes: %w", err))...)
		}
		more := false
		for _, p := range pending {
			if tried[p] {
				continue
			}
			tried[p], more = true, true
			base := store.WithTenant(context.WithoutCancel(ctx), p.Tenant)
			sess, err := st.GetSession(base, p.ChildID)
			if err == nil {
				err = recover(base, sess)
			}
			if errors.Is(err, ErrHeldElsewhere) {
				continue // another replica drives it and delivers its messages
			}
			if err != nil {
				log.ErrorContext(base, "recover accepted messages", slog.String("session_id", p.ChildID), slog.Any("error", err))
				errs = append(errs, fmt.Errorf("recover %s: %w", p.ChildID, err))
			}
		}
		if !more {
			return errors.Join(errs...)
		}
	}
}
