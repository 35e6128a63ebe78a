package agent

import (
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// steer is a pending confirmed steer; done is closed once it was admitted
// (err nil) or rejected.
type steer struct {
	msg  sessionlog.UserMessage
	done chan struct{}
	err  error
}

// newMessage builds a user message with a fresh id. It returns an error if
// a content block does not marshal (a Raw that is not JSON).
func newMessage(content []model.Block, src sessionlog.Source) (sessionlog.UserMessage, error) {
	return checkMessage(sessionlog.UserMessage{Content: content, Source: src})
}

// checkMessage completes msg (fresh id when empty, role user, [] content)
// and checks that its content marshals.
func checkMessage(msg sessionlog.UserMessage) (sessionlog.UserMessage, error) {
	if msg.ID == "" {
		msg.ID = uuid.NewString()
	}
	msg.Role = "user"
	if msg.Content == nil {
		msg.Content = []model.Block{}
	}
	if _, err := model.MarshalBlocks(msg.Content); err != nil {
		return sessionlog.UserMessage{}, fmt.Errorf("message content: %w", err)
	}
	return msg, nil
}

// Followup durably inserts content into the inbox (agent/inbox/spliced,
// target next-turn) and returns its message id. The message becomes the
// sole user message of its own later turn, FIFO behind queued ones. When
// the agent is idle it opens that turn before returning — first for the
// oldest queued message, so messages parked by Cancel(…, true) run first.
// Returns ErrClosed after Close, or a store error (nothing was accepted).
func (a *Agent) Followup(ctx context.Context, content []model.Block, src sessionlog.Source) (string, error) {
	return a.FollowupMessage(ctx, sessionlog.UserMessage{Content: content, Source: src})
}

// FollowupMessage is Followup for a message whose id the caller already
// issued (for example an accepted store.InboxMessage), so that the
// user/message the agent logs carries that id; an empty ID gets a fresh
// one. Delivery is idempotent by id: a message that is queued in this
// agent's inbox or was claimed into a turn (in this process or in the
// loaded log) is not inserted again, and its id is returned with a nil
// error. A message discarded unrun (Cancel with keepInbox false, Close) is
// inserted again, so a caller that still holds it undelivered can redeliver
// it.
func (a *Agent) FollowupMessage(ctx context.Context, msg sessionlog.UserMessage) (string, error) {
	msg, err := checkMessage(msg)
	if err != nil {
		return "", fmt.Errorf("followup %s: %w", a.id, err)
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("followup %s: %w", a.id, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return "", fmt.Errorf("followup %s: %w", a.id, ErrClosed)
	}
	if a.received[msg.ID] {
		return msg.ID, nil
	}
	evs := a.followupEventsLocked(msg)
	if err := a.appendLocked(evs...); err != nil {
		return "", fmt.Errorf("followup: %w", err)
	}
	a.acceptLocked(msg)
	return msg.ID, nil
}

// PrepareFollowup is FollowupMessage for an agent whose session is not
// stored yet: it returns the events that insert msg, open its turn and
// enter the turn's first step (the BeforeFirstStep hook and step/start;
// not when the step cannot start, see enterFirstLocked) without appending
// them, for the creator to store with the session (see Config.Created);
// Launch then runs the turn, calling the model first. Until Launch the
// agent writes nothing. Returns ErrClosed after Close, and an error when the
// agent has queued or prepared work already.
func (a *Agent) PrepareFollowup(msg sessionlog.UserMessage) ([]store.NewEvent, error) {
	msg, err := checkMessage(msg)
	if err != nil {
		return nil, fmt.Errorf("followup %s: %w", a.id, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.closed:
		return nil, fmt.Errorf("followup %s: %w", a.id, ErrClosed)
	case a.driving || a.prepared != nil || len(a.queue) > 0:
		return nil, fmt.Errorf("followup %s: a prepared followup needs an agent without work", a.id)
	}
	evs := append(a.followupEventsLocked(msg), a.enterFirstLocked(a.turn+1)...)
	a.prepared = &prepared{msg: msg, evs: evs}
	return newEvents(evs), nil
}

// Launch takes log, the whole session log as its creator stored it (the
// log New was given plus PrepareFollowup's events), as the agent's log and
// runs the prepared turn. PrepareFollowup's events are folded as an append
// folds them (history, and the outcome once Track started it). Without a
// prepared followup, or after Close, it does nothing.
func (a *Agent) Launch(log []store.Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.prepared
	if p == nil || a.closed {
		return
	}
	a.prepared = nil
	given := min(len(a.events), len(log))
	a.events = log[:given:given]
	a.recordLocked(log[given:], p.evs)
	a.acceptLocked(p.msg)
}

// followupEventsLocked returns the events that insert msg into the inbox
// and, when the agent is idle, open the turn of the inbox head.
func (a *Agent) followupEventsLocked(msg sessionlog.UserMessage) []sessionlog.Entry {
	evs := []sessionlog.Entry{event(sessionlog.EventInboxSpliced, sessionlog.InboxSplicedData{
		Target: sessionlog.TargetNextTurn, Start: len(a.queue), Inserted: []sessionlog.UserMessage{msg}})}
	if !a.driving {
		head := msg
		if len(a.queue) > 0 {
			head = a.queue[0]
		}
		evs = append(evs, a.openTurnEvents(head)...)
	}
	return evs
}

// acceptLocked applies the logged followupEventsLocked of msg: msg joins
// the inbox and, on an idle agent, the head's turn starts.
func (a *Agent) acceptLocked(msg sessionlog.UserMessage) {
	a.received[msg.ID] = true
	a.queue = append(slices.Clip(a.queue), msg)
	a.parked = false
	if !a.driving {
		a.startDriver(a.claimTurnLocked())
	}
}

// Steer is confirmed steering (R96): it durably inserts content
// into the running turn's next-step inbox and returns its message id only
// once a model step admitted it — the message was logged as user/message
// inside the turn and that step started. A steer pending when a step would
// end the turn cleanly gets one more step of the same turn. It returns an
// error matching subagent.ErrSteerRejected when the agent is idle, its turn was
// cancelled, it is closed, a structured capture is staged or committed, or
// the turn ends before admitting the message; it never queues content for a
// later turn. If ctx ends before admission the message is withdrawn and
// ctx.Err() returned.
func (a *Agent) Steer(ctx context.Context, content []model.Block, src sessionlog.Source) (string, error) {
	msg, err := newMessage(content, src)
	if err != nil {
		return "", fmt.Errorf("steer %s: %w", a.id, err)
	}
	s := &steer{msg: msg, done: make(chan struct{})}
	if err := a.enqueueSteer(ctx, s); err != nil {
		return "", err
	}
	select {
	case <-s.done:
	case <-ctx.Done():
		a.mu.Lock()
		if i := slices.Index(a.steers, s); i >= 0 {
			a.steers = slices.Delete(a.steers, i, i+1)
			if err := a.appendLocked(cancelSplice(sessionlog.TargetNextStep, i, 1)); err != nil {
				a.log.Error("withdraw steer", "error", err)
			}
			a.mu.Unlock()
			return "", fmt.Errorf("steer %s: %w", a.id, ctx.Err())
		}
		a.mu.Unlock()
		<-s.done // resolved while we waited for the lock
	}
	if s.err != nil {
		return "", s.err
	}
	return msg.ID, nil
}

// SubmitSteer is Steer split in two, for a message whose id the caller
// already issued (an accepted store.InboxMessage; an empty ID gets a fresh
// one): it inserts msg into the running turn's next-step inbox, or rejects
// it as Steer would, and returns at once. Steers submitted one after the
// other are admitted in that order. The returned channel receives exactly
// one value once the steer is settled — nil when a model step admitted msg,
// else an error matching subagent.ErrSteerRejected — so a caller can submit under
// its own lock and wait outside it. ctx bounds only the submission: a
// submitted steer is never withdrawn.
func (a *Agent) SubmitSteer(ctx context.Context, msg sessionlog.UserMessage) (<-chan error, error) {
	msg, err := checkMessage(msg)
	if err != nil {
		return nil, fmt.Errorf("steer %s: %w", a.id, err)
	}
	s := &steer{msg: msg, done: make(chan struct{})}
	if err := a.enqueueSteer(ctx, s); err != nil {
		return nil, err
	}
	settled := make(chan error, 1)
	go func() {
		<-s.done
		settled <- s.err
	}()
	return settled, nil
}

// enqueueSteer admits s into the next-step inbox or says why it cannot be.
func (a *Agent) enqueueSteer(ctx context.Context, s *steer) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var why string
	switch {
	case a.closed:
		why = "agent is closed"
	case a.cur == nil:
		why = "agent is not running"
	case a.cur.ctx.Err() != nil:
		why = "turn was cancelled"
	case a.capture.staged || a.capture.committed:
		why = "structured output already recorded"
	case ctx.Err() != nil:
		return fmt.Errorf("steer %s: %w", a.id, ctx.Err())
	}
	if why != "" {
		return fmt.Errorf("steer %s: %w: %s", a.id, subagent.ErrSteerRejected, why)
	}
	err := a.appendLocked(event(sessionlog.EventInboxSpliced, sessionlog.InboxSplicedData{
		Target: sessionlog.TargetNextStep, Start: len(a.steers), Inserted: []sessionlog.UserMessage{s.msg}}))
	if err != nil {
		return fmt.Errorf("steer: %w", err)
	}
	a.steers = append(a.steers, s)
	return nil
}

// rejectSteersLocked durably cancels every pending steer and releases its
// caller with subagent.ErrSteerRejected.
func (a *Agent) rejectSteersLocked(why string) {
	if len(a.steers) == 0 {
		return
	}
	if err := a.appendLocked(cancelSplice(sessionlog.TargetNextStep, 0, len(a.steers))); err != nil {
		a.log.Error("cancel pending steers", "error", err)
	}
	for _, s := range a.steers {
		s.err = fmt.Errorf("steer %s: %w: %s", a.id, subagent.ErrSteerRejected, why)
		close(s.done)
	}
	a.steers = nil
}

// Cancel aborts the running turn: it ends with turn/end {kind: aborted,
// reason: {kind: cause}}, a partially streamed message is logged with
// interrupted: true, and pending steers are rejected. With keepInbox false
// the queued messages are discarded (splice outcome canceled); with
// keepInbox true they are parked (R101–R103): they do not start
// on their own, and the next Followup runs them first, in FIFO order, then
// itself. Cancel returns before the turn has unwound (see WaitIdle); on an
// idle agent it only applies the inbox rule.
func (a *Agent) Cancel(cause string, keepInbox bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t := a.cur; t != nil && t.ctx.Err() == nil {
		t.cause = cause
		t.cancel()
	}
	a.rejectSteersLocked("turn was cancelled")
	if keepInbox {
		a.parked = true
		return
	}
	a.parked = false
	if len(a.queue) == 0 {
		return
	}
	if err := a.appendLocked(cancelSplice(sessionlog.TargetNextTurn, 0, len(a.queue))); err != nil {
		a.log.Error("discard inbox", "error", err)
	}
	for _, m := range a.queue {
		delete(a.received, m.ID) // discarded: a later redelivery inserts it again
	}
	a.queue = nil
}
