package acp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/providers/turnlog"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/subagent"
	"github.com/subagentd/subagentd/internal/telemetry"
)

// An ACP child runs exactly one prompt: one turn with one step.
const (
	turn = 1
	step = 1
)

// run is a published ACP child. Its result settles exactly once, first
// come: the prompt's answer, a failure, or a local cancellation, which never
// waits for the agent (R26). Once the agent answered, its process is
// stopped at once, without waiting for disposal.
type run struct {
	p         *Provider
	log       *slog.Logger
	childID   string
	live      *live
	sessionID sdk.SessionId // set by the handshake, before publication
	// logCtx carries the start request's values (its tenant) without its
	// cancellation, for log writes: the child's log outlives the request.
	logCtx context.Context

	done       chan struct{} // closed once the result settled
	cancelled  chan struct{} // closed by the first cancel
	cancelOnce sync.Once
	cancelSent chan struct{} // closed once session/cancel was written or failed
	driveDone  chan struct{}
	answered   chan struct{} // closed once the agent answered the prompt

	disposeOnce sync.Once
	disposed    chan struct{}
	disposeErr  error

	// mu guards the fields below and serialises log writes, so that nothing
	// is appended after the turn/end that settlement writes.
	mu        sync.Mutex
	logging   bool // the child session exists
	logFailed bool // a write to the child log failed: the turn fails
	text      turnlog.Output
	settled   bool
	result    subagent.Result
}

var _ subagent.Run = (*run)(nil)

func newRun(logCtx context.Context, p *Provider, childID string, log *slog.Logger) *run {
	return &run{
		p: p, log: log, childID: childID, logCtx: logCtx,
		done: make(chan struct{}), cancelled: make(chan struct{}), cancelSent: make(chan struct{}),
		driveDone: make(chan struct{}), answered: make(chan struct{}), disposed: make(chan struct{}),
	}
}

// ChildID is the child session's id, minted by the service: ACP session ids
// are only unique within one agent process.
func (r *run) ChildID() string { return r.childID }

// Local is false: the child is an external process.
func (r *run) Local() bool { return false }

// Done is closed once the result has settled.
func (r *run) Done() <-chan struct{} { return r.done }

// Result waits for settlement and returns the result. It never fails: agent
// errors and crashes settle as stop reason "error" (R27).
func (r *run) Result() (subagent.Result, error) {
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.result, nil
}

// Cancel settles the run "aborted" at once, unless it already settled, and
// sends session/cancel without waiting for the agent (R23, R26).
func (r *run) Cancel() { r.cancel(sessionlog.CauseParent) }

func (r *run) cancel(cause string) {
	r.stop(turnlog.Outcome{Reason: subagent.StopAborted, Cause: cause})
}

// stop settles the run with o at once, unless it already settled, and
// sends session/cancel without waiting for the agent. Only the first call
// does anything.
func (r *run) stop(o turnlog.Outcome) {
	r.cancelOnce.Do(func() {
		close(r.cancelled)
		go func() {
			defer close(r.cancelSent)
			// Best effort: disposal is what actually stops the agent.
			r.live.sendCancel(r.sessionID)
		}()
		r.settle(o)
	})
}

// failLog stops the turn after a write to the child log failed.
func (r *run) failLog(typ string, err error) {
	r.log.Error("cannot write the ACP child log; stopping its turn", slog.String("event", typ), slog.Any("error", err))
	r.stop(turnlog.Outcome{Reason: subagent.StopError, Diagnostic: turnlog.LogFailed})
}

// Dispose cancels (sending session/cancel), then tears the agent down: stdin
// EOF, SIGTERM and SIGKILL to its process group, each after its grace —
// short ones once the agent answered its prompt. It returns once the whole
// group is gone and the connection closed (R28, R29). Every call returns
// the same outcome; ctx only bounds how long this call waits. Returns an
// error only when the process group survived SIGKILL (R30).
func (r *run) Dispose(ctx context.Context) error {
	r.disposeOnce.Do(func() {
		r.cancel(sessionlog.CauseDisposed)
		go func() {
			// session/cancel goes out before the EOF, unless the pipe is so
			// full that writing it would outlast the EOF grace.
			sent := time.NewTimer(r.p.cfg.DisposeEOFGrace)
			select {
			case <-r.cancelSent:
			case <-r.answered:
			case <-sent.C:
			}
			sent.Stop()
			r.disposeErr = r.release()
			<-r.driveDone
			<-r.cancelSent
			close(r.disposed)
		}()
	})
	select {
	case <-r.disposed:
		return r.disposeErr
	case <-ctx.Done():
		return fmt.Errorf("dispose ACP child %s: %w", r.childID, ctx.Err())
	}
}

// release reaps the process group, quickly when no prompt is in flight.
func (r *run) release() error {
	idle := false
	select {
	case <-r.answered:
		idle = true
	default:
	}
	return r.live.release(idle, r.sessionID)
}

// drive sends the prompt and settles with its answer; a local cancel
// settles without it. Once the agent answered, its process is stopped.
func (r *run) drive(prompt []model.Block) {
	defer close(r.driveDone)
	resp, err := r.live.prompt(r.sessionID, sdkBlocks(prompt), r.cancelled, 0, telemetry.Traceparent(r.logCtx))
	if errors.Is(err, errStopped) {
		return
	}
	if err == nil || !errors.Is(err, errExited) && !disconnected(err) {
		close(r.answered)
		go func() {
			if err := r.release(); err != nil {
				r.log.Error("settled ACP agent not reaped", slog.Any("error", err))
			}
		}()
	}
	if err != nil {
		diagnostic := r.live.failure(err)
		r.log.Warn("ACP child failed", slog.String("diagnostic", diagnostic), slog.Any("error", err))
		r.settle(turnlog.Outcome{Reason: subagent.StopError, Diagnostic: diagnostic})
		return
	}
	o := stopOutcome(resp.StopReason)
	if u := resp.Usage; u != nil {
		o.Usage = &sessionlog.UsageData{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens}
	}
	r.settle(o)
}

// sdkBlocks converts text blocks for a session/prompt.
func sdkBlocks(prompt []model.Block) []sdk.ContentBlock {
	blocks := make([]sdk.ContentBlock, len(prompt))
	for i, b := range prompt {
		blocks[i] = sdk.TextBlock(b.Text)
	}
	return blocks
}

// disconnected reports whether err is the SDK's account of a connection that
// closed before the answer came (an internal error whose data says "peer
// disconnected…"), rather than an error the agent sent.
func disconnected(err error) bool {
	var re *sdk.RequestError
	if !errors.As(err, &re) {
		return false
	}
	data, _ := re.Data.(map[string]any)
	msg, _ := data["error"].(string)
	return strings.HasPrefix(msg, "peer disconnected")
}

// stopOutcome maps an ACP stop reason (docs/seam.md §6).
func stopOutcome(reason sdk.StopReason) turnlog.Outcome {
	switch reason {
	case sdk.StopReasonEndTurn:
		return turnlog.Outcome{Reason: subagent.StopCompleted}
	case sdk.StopReasonMaxTokens:
		return turnlog.Outcome{Reason: subagent.StopMaxTokens}
	case sdk.StopReasonRefusal:
		return turnlog.Outcome{Reason: subagent.StopRefusal}
	case sdk.StopReasonCancelled:
		return turnlog.Outcome{Reason: subagent.StopAborted}
	default:
		return turnlog.Outcome{Reason: subagent.StopError, Diagnostic: fmt.Sprintf("agent stopped with reason %q", reason)}
	}
}

// settle records the result once, with the text streamed so far as output,
// closes the turn in the child log and then closes done, so a reader woken
// by Done finds the log complete. A turn whose log misses an event, or
// whose end cannot be written, settles "error" (turnlog.CloseTurn).
func (r *run) settle(o turnlog.Outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.settled {
		return
	}
	r.settled = true
	r.result = turnlog.OneShotResult(turnlog.OneShotEnd{Write: r.appendLocked, Log: r.log,
		Logging: r.logging, LogFailed: r.logFailed, Output: r.text.Blocks()}, o)
	close(r.done)
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
		return fmt.Errorf("write log of ACP child %s: %w", r.childID, err)
	}
	return nil
}

// sessionUpdate streams the agent's progress into the child log. Nothing
// is recorded before the child log exists (during the handshake), after
// the turn ended, or after a write failed, which stops the turn.
func (r *run) sessionUpdate(n sdk.SessionNotification) {
	r.mu.Lock()
	if !r.logging || r.settled || r.logFailed || n.SessionId != r.sessionID {
		r.mu.Unlock()
		return
	}
	typ, payload, text, ok := logUpdate(n.Update, turn, step)
	var err error
	if ok {
		if err = r.appendLocked(turnlog.Event{Type: typ, Data: payload}); err == nil {
			r.text.Add(text)
		}
	}
	r.mu.Unlock()
	if err != nil {
		r.failLog(typ, err)
	}
}

// requestPermission answers by the policy (verdict), "cancelled" once the
// run is cancelled. A request the policy asks about waits for a person
// (ask) until the run is cancelled or settles.
func (r *run) requestPermission(req sdk.RequestPermissionRequest) sdk.RequestPermissionResponse {
	var cancelled bool
	select {
	case <-r.cancelled:
		cancelled = true
	default:
	}
	v := r.p.verdict(r.logCtx, r.childID, req)
	if !cancelled && v.Decision == config.PermissionAsk {
		return r.p.ask(r.logCtx, r.childID, turn, req, v, r.record, r.cancelled, r.done)
	}
	resp, d := decide(req, v.Decision, cancelled, turn)
	if err := r.record(turnlog.Event{Type: sessionlog.EventACPPermission, Data: d}); err != nil {
		return permissionCancelled()
	}
	return resp
}

// record appends evs to the child log unless the turn is over; a failed
// write stops the turn and is returned.
func (r *run) record(evs ...turnlog.Event) error {
	r.mu.Lock()
	var err error
	if r.logging && !r.settled && !r.logFailed {
		err = r.appendLocked(evs...)
	}
	r.mu.Unlock()
	if err != nil {
		r.failLog(evs[0].Type, err)
	}
	return err
}
