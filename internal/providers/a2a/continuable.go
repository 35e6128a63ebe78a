package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/providers/turnlog"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Continuable A2A children. A child's conversation is one A2A context:
// its first turn's message starts a new one, whose contextId the child log
// records (a2a/task), and every later turn — the next followup, after a
// restart or on another replica too — is a message in that context. Each
// turn is one remote task; a followup during a turn is queued as the next
// message, since A2A has no confirmed mid-turn admission. Interrupt is
// tasks/cancel.

var (
	_ subagent.ContinuableProvider = (*Provider)(nil)
	_ subagent.Materializer        = (*Provider)(nil)
	_ subagent.ChildAgent          = (*liveChild)(nil)
	_ subagent.Queuer              = (*liveChild)(nil)
)

// PrepareContinuable accepts a continuable child once the agent's card
// could be fetched. Returns the card's EAgentUnavailable error.
func (p *Provider) PrepareContinuable(ctx context.Context, _ subagent.ContinuableCreateRequest) (subagent.ContinuableSpec, error) {
	if _, err := p.connect(ctx); err != nil {
		return subagent.ContinuableSpec{}, err
	}
	return subagent.ContinuableSpec{}, nil
}

// Materialize builds the live agent of a continuable child: on
// creation it writes the child through req.Create once the agent's card
// was fetched; on resume it reads the child's context from its log. The
// child's model route, persona and tool filter do not apply: the remote
// agent runs its own.
//
// Returns the card's EAgentUnavailable error, Create's error unchanged,
// and other (internal) errors when the log cannot be read or written.
func (p *Provider) Materialize(ctx context.Context, req subagent.MaterializeRequest) (subagent.ChildAgent, error) {
	c, err := p.connect(ctx)
	if err != nil {
		return nil, err
	}
	r := &liveChild{p: p, c: c}
	r.Child = turnlog.NewChild(ctx, turnlog.ChildParams{Store: p.store, ID: req.Session.ID, Name: "A2A", Log: p.log, Turns: r})
	if req.Create != nil {
		if err := req.Create(ctx); err != nil {
			return nil, err
		}
	}
	if err := r.load(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// liveChild is the live agent of one activation of a continuable A2A
// child: a turnlog.Child whose turns are remote tasks.
type liveChild struct {
	p *Provider
	c *conn
	*turnlog.Child

	// The Child's lock guards the fields below.
	//
	// contextID is the child's A2A context, "" until its first turn's
	// task named one.
	contextID string
	cur       *a2aTurn // the running turn
	// detached is the open turn the log ended with, until Reattach
	// follows it.
	detached *detachedTurn
}

// a2aTurn is one turn: one remote task.
type a2aTurn struct {
	n       int
	content []model.Block
	text    turnlog.Output
	f       *follower
	cause   string
	// failed: a write to the child log failed, so the turn was stopped and
	// fails.
	failed bool
	// late says why the turn was stopped at its tree's deadline ("" when
	// it was not).
	late string
	// rejoin: the turn was detached; its follower rejoins its task.
	rejoin bool
	// detached: Detach stopped following it; it stays open in the log.
	detached bool
}

// load reads the child log for its context, its turn count and its
// user/messages. A turn a crash left open whose task the log names is
// detached: the task may still run on the remote agent, and Reattach
// follows it (reattach.go). One whose task is unknown is closed as cut
// off.
func (r *liveChild) load(ctx context.Context) error {
	var d *detachedTurn
	open, err := r.Load(ctx, func(e store.Event) {
		if e.Type == sessionlog.EventTurnStart {
			d = nil
		}
		var task sessionlog.A2ATaskData
		if e.Type == sessionlog.EventA2ATask && json.Unmarshal(e.Data, &task) == nil {
			if task.ContextID != "" {
				r.contextID = task.ContextID
			}
			d = &detachedTurn{n: task.Turn, task: sdk.TaskID(task.TaskID), contextID: task.ContextID}
		}
		d.logged(e)
	})
	if err != nil {
		return err
	}
	switch {
	case open == 0:
		return nil
	case d != nil && d.n == open && d.task != "":
		r.detached = d
		return nil
	}
	return r.AppendLocked(turnlog.Close(open, step, nil, turnlog.CutOff)...)
}

// FollowupMessage runs msg as the next turn: on an idle agent its turn
// opens (msg logged as user/message) before this returns; during a turn,
// or behind the detached turn it rejoins first (reattach.go), it is
// queued. Returns an error when the agent was closed or the
// log cannot be written.
func (r *liveChild) FollowupMessage(_ context.Context, msg sessionlog.UserMessage) (string, error) {
	r.Lock()
	defer r.Unlock()
	r.reattachLocked()
	return r.FollowupLocked(msg)
}

// OpenTurn makes turn n of msg, one remote task, the running turn
// (turnlog.Turns). The lock is held.
func (r *liveChild) OpenTurn(n int, msg sessionlog.UserMessage) {
	t := &a2aTurn{n: n, content: turnlog.TextOnly(msg.Content)}
	t.f = newFollower(r.LogCtx, r.p, r.c, r.Log, r.ID, n, r.recorder(t))
	r.cur = t
}

// RunTurn follows the running turn's task, closes the turn and opens the
// next queued one; it reports whether it did (turnlog.Turns).
func (r *liveChild) RunTurn() bool {
	r.Lock()
	t, contextID := r.cur, r.contextID
	r.Unlock()
	held := turnlog.HoldTo(r.LogCtx, r.p.deadlines, r.ID, r.Log, func(o turnlog.Outcome) { r.stopLate(t, o) })
	var o turnlog.Outcome
	if t.rejoin {
		o = t.f.rejoin()
	} else {
		o = t.f.follow(t.content, contextID)
	}
	held()
	// A stopped turn ends once its tasks/cancel was answered (bounded by
	// cancelGrace): the next turn's message must not race it.
	t.f.wait()

	r.Lock()
	defer r.Unlock()
	if cid := t.f.context(); cid != "" {
		r.contextID = cid
	}
	if t.detached {
		// Left open for the child's next driver, which rejoins its task
		// (reattach.go); nothing more runs here.
		r.cur = nil
		r.DropLocked()
		r.IdleLocked()
		return false
	}
	switch {
	case t.failed:
		o = turnlog.Outcome{Reason: subagent.StopError, Diagnostic: turnlog.LogFailed}
	case t.late != "":
		o = turnlog.Outcome{Reason: subagent.StopDeadlineExceeded, Diagnostic: t.late}
	case t.f.isStopped():
		o = turnlog.Outcome{Reason: subagent.StopAborted, Cause: t.cause}
	}
	ended := r.CloseTurnLocked(t.n, t.text.Blocks(), o)
	r.cur = nil
	return r.NextLocked(ended)
}

// errTurnOver: an event came for a turn that has ended or failed.
var errTurnOver = errors.New("the turn is over")

// recorder is the journal of turn t: it writes t's events while t runs,
// adding text to its output; a failed write stops t, which then fails.
func (r *liveChild) recorder(t *a2aTurn) journal {
	return func(e turnlog.Event, text string) error {
		r.Lock()
		defer r.Unlock()
		if r.cur != t || t.failed || t.detached {
			return errTurnOver
		}
		if err := r.AppendLocked(e); err != nil {
			r.Log.Error("cannot write the A2A child log; stopping its turn", slog.String("event", e.Type), slog.Any("error", err))
			t.failed = true
			t.f.stop()
			return err
		}
		t.text.Add(text)
		return nil
	}
}

// Cancel sends tasks/cancel for the running turn's task, and the turn
// ends aborted with cause; it drops the queued messages: the manager's
// durable inbox still holds them (keepInbox is therefore the same as
// not).
func (r *liveChild) Cancel(cause string, _ bool) {
	r.stopRunning(func(t *a2aTurn) {
		t.cause = cause
		t.f.stop()
	})
}

// Detach stops following the running turn's task and leaves it to run on
// the remote agent (subagent.Detacher): no tasks/cancel goes out, nothing
// more is written, and the turn stays open in the log for whichever
// replica drives the child next, which rejoins the task. The queued
// messages stay in the manager's durable inbox.
func (r *liveChild) Detach() {
	r.stopRunning(func(t *a2aTurn) {
		t.detached = true
		t.f.detach()
	})
}

// stopRunning drops the queued messages and runs stop on the running
// turn, if one runs that is not stopped yet, under the lock.
func (r *liveChild) stopRunning(stop func(t *a2aTurn)) {
	r.Lock()
	defer r.Unlock()
	r.DropLocked()
	if t := r.cur; t != nil && !t.f.isStopped() {
		stop(t)
	}
}

// stopLate stops turn t, if it still runs, to end as o: its tree's
// deadline passed (turnlog.HoldTo).
func (r *liveChild) stopLate(t *a2aTurn, o turnlog.Outcome) {
	r.Lock()
	defer r.Unlock()
	if r.cur != t || t.f.isStopped() {
		return
	}
	t.late = o.Diagnostic
	t.f.stop()
}

// Close cancels the running turn and waits for it to end. Returns ctx's
// error when the turn outlasts it.
func (r *liveChild) Close(ctx context.Context) error {
	r.Cancel(sessionlog.CauseDisposed, false)
	return r.Shut(ctx, "close", nil)
}
