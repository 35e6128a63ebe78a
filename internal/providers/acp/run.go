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
	p *Provider
	// OneShot's ChildID is minted by the service: ACP session ids are only
	// unique within one agent process.
	*turnlog.OneShot
	live      *live
	sessionID sdk.SessionId // set by the handshake, before publication

	cancelled  chan struct{} // closed by the first cancel
	cancelOnce sync.Once
	cancelSent chan struct{} // closed once session/cancel was written or failed
	driveDone  chan struct{}
	answered   chan struct{} // closed once the agent answered the prompt

	disposeOnce sync.Once
	disposed    chan struct{}
	disposeErr  error
}

var _ subagent.Run = (*run)(nil)

// newRun returns the run of child childID, which keeps ctx's values, not
// its cancellation.
func newRun(ctx context.Context, p *Provider, childID string) *run {
	r := &run{
		p: p, cancelled: make(chan struct{}), cancelSent: make(chan struct{}),
		driveDone: make(chan struct{}), answered: make(chan struct{}), disposed: make(chan struct{}),
	}
	r.OneShot = turnlog.NewOneShot(ctx, turnlog.OneShotParams{Store: p.store, ID: childID, Name: "ACP", Log: p.log, Stop: r.stop})
	return r
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
		r.Settle(o)
	})
}

// Dispose cancels (sending session/cancel), then tears the agent down: stdin
// EOF, SIGTERM and SIGKILL to its process group, each after its grace —
// short ones once the agent answered its prompt. It returns once the whole
// group is gone and the connection closed (R28, R29). Every call returns
// the same outcome; ctx only bounds how long this call waits. Returns an
// error only when the process group survived SIGKILL (R30).
func (r *run) Dispose(ctx context.Context) error {
	r.disposeOnce.Do(func() {
		r.Abort(sessionlog.CauseDisposed)
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
		return fmt.Errorf("dispose ACP child %s: %w", r.ChildID(), ctx.Err())
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
	resp, err := r.live.prompt(r.sessionID, sdkBlocks(prompt), r.cancelled, 0, telemetry.Traceparent(r.LogCtx))
	if errors.Is(err, errStopped) {
		return
	}
	if err == nil || !errors.Is(err, errExited) && !disconnected(err) {
		close(r.answered)
		go func() {
			if err := r.release(); err != nil {
				r.Log.Error("settled ACP agent not reaped", slog.Any("error", err))
			}
		}()
	}
	if err != nil {
		diagnostic := r.live.failure(err)
		r.Log.Warn("ACP child failed", slog.String("diagnostic", diagnostic), slog.Any("error", err))
		r.Settle(turnlog.Outcome{Reason: subagent.StopError, Diagnostic: diagnostic})
		return
	}
	o := stopOutcome(resp.StopReason)
	if u := resp.Usage; u != nil {
		o.Usage = &sessionlog.UsageData{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens}
	}
	r.Settle(o)
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

// sessionUpdate streams the agent's progress into the child log. Nothing
// is recorded before the child log exists (during the handshake), after
// the turn ended, or after a write failed, which stops the turn.
func (r *run) sessionUpdate(n sdk.SessionNotification) {
	// sessionID is set before the log exists.
	if !r.Logging() || n.SessionId != r.sessionID {
		return
	}
	if typ, payload, text, ok := logUpdate(n.Update, turn, step); ok {
		_ = r.Record(text, turnlog.Event{Type: typ, Data: payload})
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
	v := r.p.verdict(r.LogCtx, r.ChildID(), req)
	if !cancelled && v.Decision == config.PermissionAsk {
		return r.p.ask(r.LogCtx, r.ChildID(), turn, req, v, r.record, r.cancelled, r.Done())
	}
	resp, d := decide(req, v.Decision, cancelled, turn)
	if err := r.record(turnlog.Event{Type: sessionlog.EventACPPermission, Data: d}); err != nil {
		return permissionCancelled()
	}
	return resp
}

// record appends evs to the child log unless the turn is over; a failed
// write stops the turn and is returned.
func (r *run) record(evs ...turnlog.Event) error { return r.Record("", evs...) }
