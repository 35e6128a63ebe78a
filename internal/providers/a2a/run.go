package a2a

import (
	"context"
	"fmt"
	"log/slog"
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
	p       *Provider
	log     *slog.Logger
	childID string
	// logCtx carries the start request's values (its tenant, its trace)
	// without its cancellation: the child outlives the request.
	logCtx context.Context
	f      *follower

	done      chan struct{} // closed once the result settled
	stopOnce  sync.Once
	driveDone chan struct{}

	disposeOnce sync.Once
	disposed    chan struct{}

	// mu guards the fields below and serialises log writes, so that nothing
	// is appended after the turn/end that settlement writes.
	mu        sync.Mutex
	logging   bool // the child session exists
	logFailed bool // a write to the child log failed: the turn fails
	settled   bool
	result    subagent.Result
	text      turnlog.Output
}

var _ subagent.Run = (*run)(nil)

func newRun(logCtx context.Context, p *Provider, c *conn, childID string) *run {
	r := &run{
		p: p, log: p.log.With(slog.String("child_id", childID)), childID: childID, logCtx: logCtx,
		done: make(chan struct{}), driveDone: make(chan struct{}), disposed: make(chan struct{}),
	}
	r.f = newFollower(logCtx, p, c, r.log, childID, turn, r.record)
	return r
}

// ChildID is the child session's id, minted by the service.
func (r *run) ChildID() string { return r.childID }

// Local is false: the child is a remote agent.
func (r *run) Local() bool { return false }

// Done is closed once the result has settled.
func (r *run) Done() <-chan struct{} { return r.done }

// Result waits for settlement and returns the result. It never fails:
// remote failures and lost connections settle as stop reason "error".
func (r *run) Result() (subagent.Result, error) {
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.result, nil
}

// Cancel settles the run "aborted" at once, unless it already settled,
// and sends tasks/cancel without waiting for the agent (R23, R26).
func (r *run) Cancel() { r.cancel(sessionlog.CauseParent) }

func (r *run) cancel(cause string) {
	r.stop(turnlog.Outcome{Reason: subagent.StopAborted, Cause: cause})
}

// stop settles the run with o at once, unless it already settled, and
// stops following its task. Only the first call does anything.
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
		r.cancel(sessionlog.CauseDisposed)
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
		return fmt.Errorf("dispose A2A child %s: %w", r.childID, ctx.Err())
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
func (r *run) record(e turnlog.Event, text string) error {
	r.mu.Lock()
	var err error
	if r.logging && !r.settled && !r.logFailed {
		if err = r.appendLocked(e); err == nil {
			r.text.Add(text)
		}
	}
	r.mu.Unlock()
	if err != nil {
		r.log.Error("cannot write the A2A child log; stopping its turn", slog.String("event", e.Type), slog.Any("error", err))
		r.stop(turnlog.Outcome{Reason: subagent.StopError, Diagnostic: turnlog.LogFailed})
	}
	return err
}

// appendLocked writes evs to the child log, which must exist, in one
// append; call it with mu held. A failure is remembered: the turn then
// fails.
func (r *run) appendLocked(evs ...turnlog.Event) error {
	batch, _, err := turnlog.Encode(evs...)
	if err == nil {
		_, err = r.p.store.AppendEvents(r.logCtx, r.childID, batch...)
	}
	if err != nil {
		r.logFailed = true
		return fmt.Errorf("write log of A2A child %s: %w", r.childID, err)
	}
	return nil
}

// settle records the result once, with the text streamed so far as
// output, closes the turn in the child log and then closes done, so a
// reader woken by Done finds the log complete.
func (r *run) settle(o turnlog.Outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.settled {
		return
	}
	r.settled = true
	o.Diagnostic = clean(o.Diagnostic)
	r.result = turnlog.OneShotResult(turnlog.OneShotEnd{Write: r.appendLocked, Log: r.log,
		Logging: r.logging, LogFailed: r.logFailed, Output: r.text.Blocks()}, o)
	close(r.done)
}
