package subagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/telemetry"
)

// ErrNotSettled is returned by RunHandle.Result before the run settled.
var ErrNotSettled = errors.New("run has not settled")

// RunHandle is a published one-shot run as its starter holds it: the
// provider's Run plus the run id the service minted, the recorded lifecycle
// and idempotent disposal.
type RunHandle struct {
	svc *Service
	// ctx carries the tenant of the Start call, without its cancellation,
	// for every later store write and listener call.
	ctx      context.Context
	tenant   string
	id       string
	provider string
	childID  string
	parentID string
	rootID   string
	local    bool
	run      Run
	// inv is the run's invoke_agent span, ended when it settles.
	inv *telemetry.Invocation

	// done is closed once the end was recorded and dispatched; result and
	// resultErr are written before.
	done      chan struct{}
	result    Result
	resultErr error
	// expiry disposes of the run RetainSettled after it settled; written
	// before done is closed.
	expiry *time.Timer
	// release gives back the run's live-run slot (Service.reserveLive)
	// before done is closed.
	release func()

	disposeOnce sync.Once
	disposed    chan struct{}
	disposeErr  error

	// cause is the diagnostic CancelWith gave an aborted end.
	cause atomic.Pointer[string]
	// settled is the end settleWith recorded, for watch to dispatch.
	settled atomic.Pointer[settlement]
	// row is the run row as recorded at the start; it never changes once
	// published. ended is the row as settled, set before done is closed
	// when its end was recorded (recorded): Row reads it only after done.
	row      store.Run
	ended    store.Run
	recorded bool
}

// settlement is a recorded end, the result it settled and how the run row
// stores it.
type settlement struct {
	end Event
	res Result
	rr  store.RunResult
}

// Row returns the run row as this process recorded it — what the store
// returns for it, up to the spacing and key order of its JSON — so that an
// answer needs no read back: running until Done is closed, then settled
// with its result. ok is false once the run is done but its end could not
// be recorded: read the store.
func (h *RunHandle) Row() (store.Run, bool) {
	select {
	case <-h.done:
		return h.ended, h.recorded
	default:
		return h.row, true
	}
}

// logger is the service's logger naming the run. It is built on use, not
// at publication: only failures log, and a JSON handler formats the
// attributes of every With.
func (h *RunHandle) logger() *slog.Logger {
	return h.svc.log.With(slog.String("run_id", h.id), slog.String("provider", h.provider))
}

// ID is the run id: a fresh UUID per start, never reused (R17).
func (h *RunHandle) ID() string { return h.id }

// Tenant is the tenant of the Start call; Service.Run shows the handle to
// that tenant only.
func (h *RunHandle) Tenant() string { return h.tenant }

// ProviderName is the provider that published the run, even if it has been
// unregistered since (R6).
func (h *RunHandle) ProviderName() string { return h.provider }

// ChildID is the child session id for local runs, else a provider-minted
// UUID.
func (h *RunHandle) ChildID() string { return h.childID }

// ParentID is the delegating parent session.
func (h *RunHandle) ParentID() string { return h.parentID }

// Local reports whether the child is an in-process agent (snapshotted at
// publication).
func (h *RunHandle) Local() bool { return h.local }

// Done is closed once the run settled and its subagent/end was recorded and
// dispatched.
func (h *RunHandle) Done() <-chan struct{} { return h.done }

// Result returns the settled result, or ErrNotSettled before Done is closed.
// When the provider's result failed (an infrastructure fault), Result
// returns that error together with the result that was recorded for it:
// stop reason "error" and no output (R16).
func (h *RunHandle) Result() (Result, error) {
	select {
	case <-h.done:
		return h.result, h.resultErr
	default:
		return Result{}, ErrNotSettled
	}
}

// Cancel aborts the run's remaining work; it settles "aborted" unless it
// had already completed (R23, R25). Idempotent.
func (h *RunHandle) Cancel() { h.run.Cancel() }

// CancelWith is Cancel with diagnostic as the diagnostic of the aborted
// end (a tree cancel's). It reports whether this call cancelled the run:
// false when it had settled, or was cancelled with a diagnostic, before.
func (h *RunHandle) CancelWith(diagnostic string) bool {
	select {
	case <-h.done:
		return false
	default:
	}
	if !h.cause.CompareAndSwap(nil, &diagnostic) {
		return false
	}
	h.run.Cancel()
	return true
}

// Release stops what the provider keeps for the run once it is cancelled
// — an ACP agent's process group — and waits for that, without disposing
// of the run: it stays readable, and Dispose still marks it disposed
// later. ctx bounds the wait. Returns the provider's release error.
func (h *RunHandle) Release(ctx context.Context) error {
	if err := h.run.Dispose(ctx); err != nil {
		return fmt.Errorf("release run %s: %w", h.id, err)
	}
	return nil
}

// Steer sends content into the running child and returns the message id
// once a model step admitted it. Returns EUnsupportedCapability when the
// provider's runs cannot be steered, and the provider's ESteerRejected when
// the child no longer accepts input.
func (h *RunHandle) Steer(ctx context.Context, content []model.Block) (string, error) {
	st, ok := h.run.(Steerer)
	if !ok {
		return "", Errorf(EUnsupportedCapability, "provider %q runs cannot be steered", h.provider)
	}
	return st.Steer(ctx, content)
}

// Dispose cancels the run, waits until it settled (subagent/end included)
// and the provider released its resources, marks the run disposed in the
// store and forgets the handle (R28–R31). Calls after the first wait for
// the same disposal. It returns only release and store errors — never the
// result's (R30) — or ctx's error when ctx ends first, in which case the
// disposal still completes in the background.
func (h *RunHandle) Dispose(ctx context.Context) error {
	h.disposeOnce.Do(func() { go h.dispose() })
	select {
	case <-h.disposed:
		return h.disposeErr
	case <-ctx.Done():
		return fmt.Errorf("dispose run %s: %w", h.id, ctx.Err())
	}
}

func (h *RunHandle) dispose() {
	defer close(h.disposed)
	h.run.Cancel()
	var errs []error
	if err := h.run.Dispose(h.ctx); err != nil {
		errs = append(errs, fmt.Errorf("release run %s: %w", h.id, err))
	}
	<-h.done
	if h.expiry != nil {
		h.expiry.Stop()
	}
	if err := h.svc.store.DisposeRun(h.ctx, h.id); err != nil {
		errs = append(errs, fmt.Errorf("record disposal of run %s: %w", h.id, err))
	}
	h.svc.forget(h)
	h.disposeErr = errors.Join(errs...)
}

// abandon releases a run that was published by its provider but could not
// be published by the service; it is never dispatched.
func (h *RunHandle) abandon() {
	h.run.Cancel()
	if err := h.run.Dispose(h.ctx); err != nil {
		h.logger().ErrorContext(h.ctx, "release unpublished run", slog.Any("error", err))
	}
	h.release()
	close(h.done)
}

// event returns the lifecycle event of type typ for this run (R17: start
// and end share run id, provider, child id and local).
func (h *RunHandle) event(typ string) Event {
	return Event{Type: typ, RunID: h.id, Provider: h.provider, ID: h.childID, Local: h.local, ParentID: h.parentID, RootID: h.rootID}
}

// watch waits for the provider's result, then records and dispatches
// subagent/end exactly once (R14–R16) and closes done. An end the run
// recorded itself (settleWith) is only dispatched.
func (h *RunHandle) watch() {
	<-h.run.Done()
	if st := h.settled.Load(); st != nil {
		h.svc.bus.dispatch(h.ctx, st.end)
		h.finish(st.res, nil, st.rr, true)
		return
	}
	res, resErr := h.run.Result()
	res = h.settle(res, resErr)
	rr, err := storeResult(res)
	if err != nil {
		h.logger().ErrorContext(h.ctx, "encode run output", slog.Any("error", err))
		h.svc.bus.dispatch(h.ctx, h.endEvent(res))
		h.finish(res, resErr, rr, false)
		return
	}
	end, dispatch := h.svc.RecordEnd(h.ctx, h.logger(), h.endEvent(res), rr, nil)
	if dispatch {
		h.svc.bus.dispatch(h.ctx, end)
	}
	h.finish(res, resErr, rr, end.Seq != 0)
}

// finish keeps the result, and the settled row if rr was recorded, arms
// the expiry and closes done.
func (h *RunHandle) finish(res Result, resErr error, rr store.RunResult, recorded bool) {
	h.result, h.resultErr = res, resErr
	if recorded {
		h.ended = h.row
		h.ended.State, h.ended.EndedAt, h.ended.StopReason = store.StateSettled, rr.EndedAt, rr.StopReason
		h.ended.Output, h.ended.Structured, h.ended.Diagnostic = rr.Output, rr.Structured, rr.Diagnostic
		h.ended.Usage, h.ended.UsageKnown = rr.Usage, rr.UsageKnown
		h.recorded = true
	}
	h.expiry = time.AfterFunc(h.svc.retain, h.expire)
	h.release()
	h.inv.End(res.StopReason, resErr)
	close(h.done)
}

// endEvent returns the subagent/end of res.
func (h *RunHandle) endEvent(res Result) Event {
	end := h.event(EventEnd)
	end.StopReason = res.StopReason
	if len(res.Output) > 0 {
		end.LastAssistantMessage = res.Output
	}
	return end
}

// settleWith is the Settle of a prepared child's run: it records res, its
// subagent/end and evs in one store write, once; watch dispatches that end
// when the run is done.
func (h *RunHandle) settleWith(ctx context.Context, res Result, evs []store.NewEvent) ([]store.Event, error) {
	res = h.settle(res, nil)
	end := h.endEvent(res)
	rr, err := storeResult(res)
	if err != nil {
		return nil, err
	}
	row, err := LifecycleRow(end, rr.EndedAt)
	if err != nil {
		return nil, err
	}
	stored, log, err := h.svc.store.EndRunWithEvents(ctx, store.EndRunParams{RunID: h.id, Result: rr, End: row, Events: evs})
	if err != nil {
		return nil, fmt.Errorf("record end of run %s: %w", h.id, err)
	}
	end.Seq = stored.ID
	h.settled.Store(&settlement{end: end, res: res, rr: rr})
	return log, nil
}

// expire disposes of a run its starter left settled for RetainSettled.
func (h *RunHandle) expire() {
	if err := h.Dispose(h.ctx); err != nil {
		h.logger().ErrorContext(h.ctx, "dispose an expired settled run", slog.Any("error", err))
	}
}

// settle normalizes a provider's result: Output never nil, a bounded
// diagnostic only on failures, "error" for a failed result (R16) or a
// missing stop reason.
func (h *RunHandle) settle(res Result, err error) Result {
	if err != nil {
		h.logger().ErrorContext(h.ctx, "run result failed", slog.Any("error", err))
		return Result{Output: []model.Block{}, StopReason: StopError, Diagnostic: TruncateDiagnostic(ErrorMessage(err)),
			Usage: res.Usage, UsageKnown: false}
	}
	if res.StopReason == "" {
		h.logger().ErrorContext(h.ctx, "provider settled a run without a stop reason")
		res.StopReason = StopError
	}
	if res.Output == nil {
		res.Output = []model.Block{}
	}
	if res.StopReason == StopCompleted {
		res.Diagnostic = ""
	}
	if c := h.cause.Load(); c != nil && res.StopReason == StopAborted {
		res.Diagnostic = *c
	}
	res.Diagnostic = TruncateDiagnostic(res.Diagnostic)
	return res
}

// storeResult is res as the run row stores it, ended now.
func storeResult(res Result) (store.RunResult, error) {
	output, err := model.MarshalBlocks(res.Output)
	if err != nil {
		return store.RunResult{}, fmt.Errorf("encode run output: %w", err)
	}
	return store.RunResult{StopReason: res.StopReason, Output: output, Structured: res.Structured,
		Diagnostic: res.Diagnostic, EndedAt: storedTime(time.Now()), Usage: res.Usage, UsageKnown: res.UsageKnown}, nil
}
