package children

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"unicode/utf8"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// turnEnd is the child loop's watch (resident.Policy.Watch): while c's
// activation has nothing in flight and is not settling, the loop receives
// its agent's turn end and decides settlement (settleIfDone). In flight, a
// release decides instead.
func (m *Manager) turnEnd(c *child) (<-chan struct{}, func(context.Context, *child, struct{})) {
	act := c.act
	if act == nil || act.state == actSettling || act.inflight > 0 {
		return nil, nil
	}
	return act.agent.Idle(), func(_ context.Context, c *child, _ struct{}) { m.settleIfDone(c, act) }
}

// settleIfDone begins act's settlement once it has nothing left to run —
// its turn ended and no submitted steer or report is unsettled. Deciding it
// in the child's loop means a concurrent delivery either got into the turn
// first or finds the activation closing, waits for the settlement and
// cold-resumes (R65, R90). It runs in c's loop.
func (m *Manager) settleIfDone(c *child, act *activation) {
	switch {
	case c.act != act || act.state == actSettling:
		return
	case act.agent.Running(), act.inflight > 0:
		return // the next turn end, or the last release, brings act back
	}
	act.mustTo(actSettling)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.settle(act)
	}()
}

// settle ends act (R67–R71): the activation's facts are the outcome of its own
// events, read before the agent is closed; a failed close makes it error without output
// (R70); the parent gets its notice (R74), then subagent/end is recorded and
// dispatched; finally the activation is removed and, when a delivery is
// owed, the child cold-resumes.
func (m *Manager) settle(act *activation) {
	c := act.c
	ctx := act.base
	outcome := act.agent.Outcome()
	output, reason := outcome.Output, EpochStopReason(outcome)
	if act.detached {
		reason, output = subagent.StopError, []model.Block{}
	}
	closeAgent := act.agent.Close
	if d, ok := act.agent.(Discarder); ok && act.discard {
		closeAgent = d.Discard
	}
	if err := closeAgent(ctx); err != nil {
		m.log.ErrorContext(ctx, "close continuable child agent", slog.String("child_id", c.key.ID), slog.Any("error", err))
		reason, output = subagent.StopError, []model.Block{}
	}
	// Every message the activation logged is delivered; most were acknowledged
	// on admission already.
	if len(outcome.Messages) > 0 {
		m.ack(ctx, c.key.ID, outcome.Messages...)
	}
	<-act.started // dispatched by whoever began act, once its command returned
	// A detached turn's work is not over: the child's next driver notifies.
	if !act.detached {
		m.notify(act, reason, output)
	}
	m.end(act, reason, output, outcome)()

	m.do(c.key, func(c *child) {
		owed := c.settled()
		close(act.done)
		if !owed || m.isDraining() {
			act.release()
			return
		}
		if m.parkOwed(ctx, c) {
			act.release()
			return
		}
		// The owed cold resume takes over act's live-run slot.
		c.slot, act.release = act.release, nil
		if err := m.resume(ctx, c); err != nil {
			m.log.ErrorContext(ctx, "cold resume after settlement", slog.String("child_id", c.key.ID), slog.Any("error", err))
		}
		m.releaseSlot(c)
	})
}

// parkOwed reports whether c's tree is paused (its budget spent): then
// the followups owed to c's next activation wait in its inbox for the
// budget's raise (DeliverWaiting), and their callers are answered
// RouteParked. It runs in c's loop.
func (m *Manager) parkOwed(ctx context.Context, c *child) bool {
	paused, err := m.svc.TreePaused(ctx, c.key.ID)
	if err != nil {
		m.log.WarnContext(ctx, "read whether the tree is paused; the owed followups are delivered", slog.String("child_id", c.key.ID), slog.Any("error", err))
	}
	if !paused {
		return false
	}
	for id := range c.waiters {
		m.answer(c, id, answer{res: FollowupResult{Route: subagent.RouteParked, MessageID: id}})
	}
	return true
}

// end records act's subagent/end with reason, output and the usage and
// failure message of outcome, exactly once (see
// Service.recordEnd), and returns the func that dispatches it (R71).
func (m *Manager) end(act *activation, reason string, output []model.Block, outcome sessionlog.Outcome) (dispatch func()) {
	usage := outcome.Usage
	e := act.event(subagent.EventEnd)
	e.StopReason = reason
	if len(output) > 0 {
		e.LastAssistantMessage = output
	}
	log := m.log.With(slog.String("run_id", act.runID))
	out, err := json.Marshal(output)
	if err != nil {
		log.ErrorContext(act.base, "encode activation output", slog.Any("error", err))
	}
	res := store.RunResult{StopReason: reason, Output: out, Usage: usage, UsageKnown: usage.Known()}
	switch {
	case reason == subagent.StopAborted:
		res.Diagnostic = act.diagnostic
	case act.detached:
		res.Diagnostic = DetachedDiagnostic
	case !subagent.IsSuccess(reason) && outcome.End != nil:
		// A failed turn's message: a tree's deadline or idle bound, say.
		res.Diagnostic = subagent.TruncateDiagnostic(outcome.End.Reason.Message)
	}
	e, recorded := m.svc.RecordEnd(act.base, log, e, res,
		func(ctx context.Context) error { return m.children.Reclaim(ctx, act.c.key) })
	act.inv.End(reason, nil)
	return func() {
		if recorded {
			m.svc.Dispatch(act.base, e)
		}
	}
}

// notify sends act's settlement notice to its durable parent (R74–R79) on
// the path reports take too (send). This is the one rule of when a notice
// wakes its parent (R78): it opens the parent's turn when the child was
// started to wake it — its parent's own agent delegated it, or the start
// asked for that (ContinuableRequest.WakeParent) — and the manager is not
// draining (R118); otherwise it is recorded quietly, for the parent's next
// turn to read. A failure is logged and never blocks the settlement (R79).
func (m *Manager) notify(act *activation, reason string, output []model.Block) {
	ctx := act.base
	content, src := settlementNotice(act.c.key.ID, act.label, reason, output)
	_, err := m.send(ctx, act.parentID, content, src, !act.wakeParent || m.isDraining())
	switch {
	case errors.Is(err, errNoSink):
		m.log.DebugContext(ctx, "no notice sink: settlement notice dropped", slog.String("parent_id", act.parentID))
	case err != nil:
		m.log.WarnContext(ctx, "settlement notice was not delivered", slog.String("child_id", act.c.key.ID),
			slog.String("parent_id", act.parentID), slog.Any("error", err))
	}
}

// DetachedDiagnostic is the diagnostic of an activation whose running
// turn this replica detached when it could not renew the child's lease
// (subagent.Detacher): the turn's remote work goes on, and the child's next
// driver rejoins it.
const DetachedDiagnostic = "detached: this replica could not renew the child's lease; the turn's remote work goes on, and the child's next driver rejoins it"

// EpochStopReason is the stop reason of a continuable activation, from the
// outcome of the events it appended (R69, docs/seam.md §6, §12): the
// consumed-work fold's accounting turn maps max-tokens to max-tokens, aborted and
// interrupted to aborted, error to error, blocked to refusal and any
// unknown kind to error; a completed turn, or none, is aborted when
// accepted work was dropped unrun after it, else completed. A recorded
// failure outranks a later cancellation.
func EpochStopReason(o sessionlog.Outcome) string {
	kind := sessionlog.ReasonCompleted
	if o.End != nil {
		kind = o.End.Reason.Kind
	}
	switch kind {
	case sessionlog.ReasonCompleted:
		if o.DroppedUnrun {
			return subagent.StopAborted
		}
		return subagent.StopCompleted
	case sessionlog.ReasonMaxTokens:
		return subagent.StopMaxTokens
	case sessionlog.ReasonAborted, sessionlog.ReasonInterrupted:
		return subagent.StopAborted
	case sessionlog.ReasonBlocked:
		return subagent.StopRefusal
	case sessionlog.ReasonBudgetExhausted:
		return subagent.StopBudgetExhausted
	case sessionlog.ReasonDeadlineExceeded:
		return subagent.StopDeadlineExceeded
	}
	return subagent.StopError
}

// maxSummary bounds a notice's summary (R77, docs/seam.md §13).
const maxSummary = 120

// settlementNotice is the message a parent gets when child, labelled
// label, settles with reason and output (R77): the summary sentence, then
// the closing message or the statement that there is none. Its source
// names the child by id and label.
func settlementNotice(child, label, reason string, output []model.Block) ([]model.Block, sessionlog.Source) {
	var summary string
	switch reason {
	case subagent.StopCompleted:
		summary = fmt.Sprintf("Background subagent %s finished and will do no further work unless you send it more.", child)
	case subagent.StopAborted:
		summary = fmt.Sprintf("Background subagent %s was stopped before it finished.", child)
	case subagent.StopMaxTokens:
		summary = fmt.Sprintf("Background subagent %s ran out of room before it finished.", child)
	case subagent.StopRefusal:
		summary = fmt.Sprintf("Background subagent %s declined the task.", child)
	case subagent.StopError:
		summary = fmt.Sprintf("Background subagent %s failed before it finished.", child)
	default:
		summary = fmt.Sprintf("Background subagent %s ended abnormally (%s) before it finished.", child, reason)
	}
	content := []model.Block{model.TextBlock(summary)}
	if len(output) == 0 {
		content = append(content, model.TextBlock("It left no closing message."))
	} else {
		content = append(append(content, model.TextBlock("Its closing message:")), output...)
	}
	return content, sessionlog.Source{Kind: subagent.SourceSubagentSettled, Form: "notice", Summary: boundSummary(summary), SenderSessionID: child, Label: label}
}

// boundSummary cuts s to maxSummary characters, ending a cut one with "…".
func boundSummary(s string) string {
	if utf8.RuneCountInString(s) <= maxSummary {
		return s
	}
	r := []rune(s)
	return string(r[:maxSummary-1]) + "…"
}
