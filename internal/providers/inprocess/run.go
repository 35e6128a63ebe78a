package inprocess

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// run is an in-process one-shot child: its agent runs the prompt as one
// turn once launched, and the result is the outcome of the events it logs
// from its prompt on, after the seed, folded as they are logged. The agent
// is closed and dropped once the result has settled: a settled run keeps
// only its result until it is disposed.
type run struct {
	childID string
	base    context.Context // the tenant of the start, without its cancellation
	store   store.Store
	log     *slog.Logger
	schema  bool

	mu        sync.Mutex
	cancelled bool
	agent     *agent.Agent // nil once the result has settled
	// launched is set by launch, abandoned by a disposal before it: one
	// of them closes done (through settle, or at once).
	launched, abandoned bool
	// settleFn stores the turn's end with the run's settlement (nil:
	// the turn's end is a plain append); settled is the result it stored.
	settleFn subagent.Settle
	settled  *subagent.Result

	done   chan struct{}
	result subagent.Result

	disposeOnce sync.Once
	disposed    chan struct{}
	disposeErr  error
}

var (
	_ subagent.Run     = (*run)(nil)
	_ subagent.Steerer = (*run)(nil)
)

func newRun(base context.Context, st store.Store, c child, log *slog.Logger) *run {
	return &run{
		childID:  c.id,
		base:     base,
		store:    st,
		log:      log,
		schema:   c.schema,
		done:     make(chan struct{}),
		disposed: make(chan struct{}),
	}
}

// launch runs the prepared prompt's turn over log, the child's log as
// stored, and starts the goroutine that settles
// the result; a cancellation that came first aborts the turn at once.
// After a disposal it does nothing.
func (r *run) launch(log []store.Event, settle subagent.Settle) {
	r.mu.Lock()
	if r.abandoned {
		r.mu.Unlock()
		return
	}
	r.launched, r.settleFn = true, settle
	a := r.agent
	r.mu.Unlock()
	a.Launch(log)
	go r.settle()
	r.mu.Lock()
	cancelled := r.cancelled
	r.mu.Unlock()
	if cancelled {
		a.Cancel(sessionlog.CauseParent, false)
	}
}

// endTurn is the agent's Config.EndTurn: with a settleFn, the events that
// end the turn are stored together with the run's result, the outcome the
// agent's fold reports once they are stored; else, or if the run was ended
// elsewhere (store.ErrConflict), they are appended alone.
func (r *run) endTurn(ctx context.Context, end agent.TurnEnd) ([]store.Event, error) {
	r.mu.Lock()
	settle, cancelled := r.settleFn, r.cancelled
	r.mu.Unlock()
	if settle != nil {
		res := subagent.OneShotResult(end.Outcome, cancelled, r.schema, end.Structured)
		stored, err := settle(ctx, res, end.Events)
		if err == nil {
			r.mu.Lock()
			r.settled = &res
			r.mu.Unlock()
			return stored, nil
		}
		if !errors.Is(err, store.ErrConflict) {
			return nil, err
		}
	}
	return r.store.AppendEvents(ctx, r.childID, end.Events...)
}

// settle waits until the child is idle, then takes the result endTurn
// stored or the outcome of the child's own events (docs/seam.md §6).
// Child failures are stop reasons, never errors (R27).
func (r *run) settle() {
	defer close(r.done)
	a := r.live()
	// Background never ends, so WaitIdle returns only once the child is idle.
	_ = a.WaitIdle(context.Background())
	r.mu.Lock()
	cancelled, settled := r.cancelled, r.settled
	r.mu.Unlock()
	if settled != nil {
		r.result = *settled
	} else {
		structured, _ := a.Structured() // nil without a committed capture
		r.result = subagent.OneShotResult(a.Outcome(), cancelled, r.schema, structured)
	}
	// Nothing drives a one-shot child after its turn: release the agent
	// (its history mirror, model client and goroutine) now, not at dispose.
	r.mu.Lock()
	r.agent = nil
	r.mu.Unlock()
	if err := a.Close(r.base); err != nil {
		r.log.ErrorContext(r.base, "close a settled in-process child", slog.Any("error", err))
	}
	if reason := r.result.StopReason; reason != subagent.StopCompleted && reason != subagent.StopAborted {
		// R27: a child failure is reported here, never as a Result error.
		r.log.WarnContext(r.base, "in-process child failed",
			slog.String("stop_reason", r.result.StopReason), slog.String("diagnostic", r.result.Diagnostic))
	}
}

// ChildID is the child session id.
func (r *run) ChildID() string { return r.childID }

// live returns the agent, nil once the result has settled.
func (r *run) live() *agent.Agent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.agent
}

// Local is true: the child is an in-process agent.
func (r *run) Local() bool { return true }

// Done is closed once the result has settled.
func (r *run) Done() <-chan struct{} { return r.done }

// Result returns the settled result. It never fails: child failures settle
// as stop reasons (R27).
func (r *run) Result() (subagent.Result, error) {
	<-r.done
	return r.result, nil
}

// Cancel aborts the child's turn with cause parent; the result settles
// aborted unless the turn had already completed (R23, R25). Idempotent.
func (r *run) Cancel() {
	r.mu.Lock()
	r.cancelled = true
	a := r.agent
	r.mu.Unlock()
	if a != nil {
		a.Cancel(sessionlog.CauseParent, false)
	}
}

// Dispose cancels the child, closes its agent and waits until the result
// has settled and the agent's goroutine has exited (R28, R29). Calls after
// the first wait for the same disposal. It returns ctx's error when ctx
// ends first; the disposal then completes in the background. The child's
// session stays in the store (R31).
func (r *run) Dispose(ctx context.Context) error {
	r.disposeOnce.Do(func() { go r.dispose() })
	select {
	case <-r.disposed:
		return r.disposeErr
	case <-ctx.Done():
		return fmt.Errorf("dispose child %s: %w", r.ChildID(), ctx.Err())
	}
}

func (r *run) dispose() {
	defer close(r.disposed)
	r.Cancel()
	r.mu.Lock()
	abandon := !r.launched
	r.abandoned = abandon
	r.mu.Unlock()
	if a := r.live(); a != nil {
		if err := a.Close(r.base); err != nil {
			r.disposeErr = fmt.Errorf("dispose child %s: %w", r.ChildID(), err)
		}
	}
	if abandon {
		// Never launched: nothing settles the result but this.
		r.result = subagent.Result{Output: []model.Block{}, StopReason: subagent.StopAborted}
		r.mu.Lock()
		r.agent = nil
		r.mu.Unlock()
		close(r.done)
	}
	<-r.done
}

// Steer is confirmed steering into the child's running turn: it returns the
// message id once a model step admitted the content. Returns an
// ESteerRejected *subagent.Error when the child is not running a turn, was
// cancelled or disposed, already recorded structured output, or its turn
// ended first; ctx's error when ctx ended before admission.
func (r *run) Steer(ctx context.Context, content []model.Block) (string, error) {
	a := r.live()
	if a == nil {
		return "", r.steerRejected(subagent.ErrSteerRejected)
	}
	id, err := a.Steer(ctx, content, sessionlog.Source{Kind: "user"})
	if errors.Is(err, subagent.ErrSteerRejected) {
		return "", r.steerRejected(err)
	}
	if err != nil {
		return "", fmt.Errorf("steer child %s: %w", r.ChildID(), err)
	}
	return id, nil
}

// steerRejected is the ESteerRejected answer to a steer the child did not
// admit.
func (r *run) steerRejected(err error) error {
	return &subagent.Error{Code: subagent.ESteerRejected,
		Message: "the child did not admit the message: it is not running a turn, was cancelled, " +
			"already recorded structured output, or its turn ended first", Err: err}
}
