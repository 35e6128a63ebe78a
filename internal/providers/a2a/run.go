package a2a

import (
	"context"
	"fmt"
	"sync"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/providers/turnlog"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/subagent"
)

// run is a published one-shot A2A child: one remote task in a new
// context. Its result settles exactly once, first come: the task's final
// state, a failure to follow it, or a local cancellation, which never
// waits for the agent (R26) and sends tasks/cancel once the task is known.
type run struct {
	*turnlog.OneShot
	f *follower

	stopOnce  sync.Once
	driveDone chan struct{}

	disposeOnce sync.Once
	disposed    chan struct{}
}

var _ subagent.Run = (*run)(nil)

// newRun returns the run of child childID, which keeps ctx's values, not
// its cancellation.
func newRun(ctx context.Context, p *Provider, c *conn, childID string) *run {
	r := &run{driveDone: make(chan struct{}), disposed: make(chan struct{})}
	r.OneShot = turnlog.NewOneShot(ctx, turnlog.OneShotParams{Store: p.store, ID: childID, Name: "A2A", Log: p.log, Stop: r.stop})
	r.f = newFollower(r.LogCtx, p, c, r.Log, childID, turn, r.record)
	return r
}

// stop settles the run with o at once, unless it already settled, and
// stops following its task (sending tasks/cancel once the task is known).
// Only the first call does anything.
func (r *run) stop(o turnlog.Outcome) {
	r.stopOnce.Do(func() {
		r.settle(o)
		r.f.stop()
	})
}

// Dispose cancels (sending tasks/cancel), then waits until the call that
// followed the task and the cancel have returned. Every call returns the
// same outcome; ctx only bounds how long this call waits.
func (r *run) Dispose(ctx context.Context) error {
	r.disposeOnce.Do(func() {
		r.Abort(sessionlog.CauseDisposed)
		go func() {
			<-r.driveDone
			r.f.wait()
			close(r.disposed)
		}()
	})
	select {
	case <-r.disposed:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("dispose A2A child %s: %w", r.ChildID(), ctx.Err())
	}
}

// drive follows the task to its end, then settles with it; a local
// cancel has settled already.
func (r *run) drive(prompt []model.Block) {
	defer close(r.driveDone)
	r.settle(r.f.follow(prompt, ""))
}

// record is the follower's journal: it appends e to the child log unless
// the turn is over, and adds text to the output once e is stored. A
// failed write stops the turn, which then fails.
func (r *run) record(e turnlog.Event, text string) error { return r.Record(text, e) }

// settle is Settle, with the diagnostic cleaned of what the remote agent
// may send that a log cannot hold.
func (r *run) settle(o turnlog.Outcome) {
	o.Diagnostic = clean(o.Diagnostic)
	r.Settle(o)
}
