package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

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
	id := req.Session.ID
	r := &liveChild{p: p, c: c, id: id, log: p.log.With(slog.String("child_id", id)), logCtx: context.WithoutCancel(ctx), idle: closedChan()}
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
// child.
type liveChild struct {
	p      *Provider
	c      *conn
	id     string
	log    *slog.Logger
	logCtx context.Context // the child's tenant, without cancellation

	// mu guards the fields below and serialises log writes.
	mu sync.Mutex
	// contextID is the child's A2A context, "" until its first turn's
	// task named one.
	contextID string
	// Kept (which locks itself) holds the user/messages and the fold since
	// Track; its Events, Track and Outcome are the agent's.
	turnlog.Kept
	turn    int // the last turn number in the log
	queue   []sessionlog.UserMessage
	running bool          // a turn runs or is about to
	idle    chan struct{} // closed while no turn runs
	cur     *a2aTurn      // the running turn
	closed  bool
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

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// load reads the child log for its context, its turn count and its
// user/messages. A turn a crash left open whose task the log names is
// detached: the task may still run on the remote agent, and Reattach
// follows it (reattach.go). One whose task is unknown is closed as cut
// off.
func (r *liveChild) load(ctx context.Context) error {
	read := func(ctx context.Context, after int64, limit int) ([]store.Event, error) {
		return r.p.store.Events(ctx, r.id, after, limit)
	}
	var d *detachedTurn
	last, open, err := turnlog.Scan(ctx, read, &r.Kept, func(e store.Event) {
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
		return fmt.Errorf("read log of A2A child %s: %w", r.id, err)
	}
	r.turn = last
	switch {
	case open == 0:
		return nil
	case d != nil && d.n == open && d.task != "":
		r.detached = d
		return nil
	}
	return r.appendLocked(turnlog.Close(open, step, nil, turnlog.CutOff)...)
}

// appendLocked writes evs to the child log in one append, keeping what
// the liveChild needs of them; call it with mu held, or before r is shared.
func (r *liveChild) appendLocked(evs ...turnlog.Event) error {
	batch, entries, err := turnlog.Encode(evs...)
	if err != nil {
		return err
	}
	stored, err := r.p.store.AppendEvents(r.logCtx, r.id, batch...)
	if err != nil {
		return fmt.Errorf("write log of A2A child %s: %w", r.id, err)
	}
	r.Kept.Written(stored, entries)
	return nil
}

// FollowupMessage runs msg as the next turn: on an idle agent its turn
// opens (msg logged as user/message) before this returns; during a turn,
// or behind the detached turn it rejoins first (reattach.go), it is
// queued. Returns an error when the agent was closed or the
// log cannot be written.
func (r *liveChild) FollowupMessage(_ context.Context, msg sessionlog.UserMessage) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return "", fmt.Errorf("A2A child %s: agent closed", r.id)
	}
	if r.running || r.reattachLocked() {
		r.queue = append(r.queue, msg)
		return msg.ID, nil
	}
	if err := r.openLocked(msg); err != nil {
		return "", err
	}
	r.running, r.idle = true, make(chan struct{})
	go r.drive()
	return msg.ID, nil
}

// QueuesFollowups marks the liveChild as an agent whose running turn takes
// no content: a followup then runs as the next turn (subagent.Queuer).
func (r *liveChild) QueuesFollowups() {}

// openLocked opens the turn of msg. mu is held.
func (r *liveChild) openLocked(msg sessionlog.UserMessage) error {
	n := r.turn + 1
	if err := r.appendLocked(
		turnlog.Event{Type: sessionlog.EventTurnStart, Data: sessionlog.TurnData{Turn: n}},
		turnlog.Event{Type: sessionlog.EventUserMessage, Data: msg},
		turnlog.Event{Type: sessionlog.EventStepStart, Data: sessionlog.StepData{Turn: n, Step: step}},
	); err != nil {
		return err
	}
	r.turn = n
	t := &a2aTurn{n: n, content: turnlog.TextOnly(msg.Content)}
	t.f = newFollower(r.logCtx, r.p, r.c, r.log, r.id, n, r.recorder(t))
	r.cur = t
	r.queue = slices.DeleteFunc(r.queue, func(m sessionlog.UserMessage) bool { return m.ID == msg.ID })
	return nil
}

// drive runs turns until the queue is empty: one remote task each.
func (r *liveChild) drive() {
	for r.runTurn() {
	}
}

// runTurn runs the open turn, closes it and opens the next queued one; it
// reports whether it did. When the turn's end cannot be written (the
// store fails, or this replica lost the child's lease) nothing more runs:
// the queued messages stay in the durable inbox for a later activation.
func (r *liveChild) runTurn() bool {
	r.mu.Lock()
	t, contextID := r.cur, r.contextID
	r.mu.Unlock()
	held := turnlog.HoldTo(r.logCtx, r.p.deadlines, r.id, r.log, func(o turnlog.Outcome) { r.stopLate(t, o) })
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

	r.mu.Lock()
	defer r.mu.Unlock()
	if cid := t.f.context(); cid != "" {
		r.contextID = cid
	}
	if t.detached {
		// Left open for the child's next driver, which rejoins its task
		// (reattach.go); nothing more runs here.
		r.cur, r.queue, r.running = nil, nil, false
		close(r.idle)
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
	o.Diagnostic = subagent.TruncateDiagnostic(o.Diagnostic)
	_, ended := turnlog.CloseTurn(r.appendLocked, r.log, t.n, t.text.Blocks(), o)
	r.cur = nil
	if !ended {
		r.queue = nil
	}
	if len(r.queue) > 0 && !r.closed {
		err := r.openLocked(r.queue[0])
		if err == nil {
			return true
		}
		// The queued messages stay in the durable inbox for a later
		// activation.
		r.log.Warn("cannot open the next turn of the A2A child", slog.Any("error", err))
		r.queue = nil
	}
	r.running = false
	close(r.idle)
	return false
}

// errTurnOver: an event came for a turn that has ended or failed.
var errTurnOver = errors.New("the turn is over")

// recorder is the journal of turn t: it writes t's events while t runs,
// adding text to its output; a failed write stops t, which then fails.
func (r *liveChild) recorder(t *a2aTurn) journal {
	return func(e turnlog.Event, text string) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.cur != t || t.failed || t.detached {
			return errTurnOver
		}
		if err := r.appendLocked(e); err != nil {
			r.log.Error("cannot write the A2A child log; stopping its turn", slog.String("event", e.Type), slog.Any("error", err))
			t.failed = true
			t.f.stop()
			return err
		}
		t.text.Add(text)
		return nil
	}
}

// SubmitSteer is always rejected: A2A has no confirmed mid-turn admission.
func (r *liveChild) SubmitSteer(context.Context, sessionlog.UserMessage) (<-chan error, error) {
	return nil, fmt.Errorf("A2A child %s: %w: A2A agents take no content mid-turn", r.id, subagent.ErrSteerRejected)
}

// Steer is always rejected: A2A has no confirmed mid-turn admission.
func (r *liveChild) Steer(context.Context, []model.Block, sessionlog.Source) (string, error) {
	return "", fmt.Errorf("A2A child %s: %w: A2A agents take no content mid-turn", r.id, subagent.ErrSteerRejected)
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
// turn, if one runs that is not stopped yet, under r.mu.
func (r *liveChild) stopRunning(stop func(t *a2aTurn)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.queue = nil
	if t := r.cur; t != nil && !t.f.isStopped() {
		stop(t)
	}
}

// stopLate stops turn t, if it still runs, to end as o: its tree's
// deadline passed (turnlog.HoldTo).
func (r *liveChild) stopLate(t *a2aTurn, o turnlog.Outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur != t || t.f.isStopped() {
		return
	}
	t.late = o.Diagnostic
	t.f.stop()
}

// Running reports whether a turn runs or is about to.
func (r *liveChild) Running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.running
}

// Idle returns a channel closed once no turn runs; the next turn gets a
// new one.
func (r *liveChild) Idle() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.idle
}

// Close cancels the running turn and waits for it to end. Returns ctx's
// error when the turn outlasts it.
func (r *liveChild) Close(ctx context.Context) error {
	r.Cancel(sessionlog.CauseDisposed, false)
	select {
	case <-r.Idle():
	case <-ctx.Done():
		return fmt.Errorf("close A2A child %s: %w", r.id, ctx.Err())
	}
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	return nil
}
