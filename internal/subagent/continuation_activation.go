package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
)

// activation is one residency epoch of a continuable child (R64, R71): a
// live agent, a run row of kind activation with its task id, and one
// subagent/start … subagent/end pair.
type activation struct {
	c        *child
	base     context.Context // the child's tenant, without cancellation
	agent    ChildAgent
	runID    string
	taskID   string
	provider string // the descriptor's, registered or not (R7, R71)
	local    bool   // the provider's Local; true for an unregistered one (in-process resume)
	parentID string
	// boundary is the log length at the start edge: the epoch's facts
	// come only from the events after it (R69, §8.7).
	boundary int

	// Owned by c's loop.
	inflight    int  // submitted steers and reports not yet settled
	interrupted bool // Interrupt cancelled the turn: rejected steers park
	closing     bool // the settlement began: nothing more is delivered
	queued      bool // started with several turns: nothing is steered into it
	// release gives back the activation's live-run slot
	// (Service.reserveLive) when it settles, unless settle hands the slot
	// on to the cold resume it owes (then nil).
	release func()

	done chan struct{} // closed once the activation settled and was removed
	// started is closed once subagent/start was dispatched, which its end
	// must follow.
	started chan struct{}
}

// event returns the lifecycle event of type typ for act.
func (a *activation) event(typ string) Event {
	return Event{Type: typ, RunID: a.runID, Provider: a.provider, ID: a.c.key.id, Local: a.local,
		ParentID: a.parentID, TaskID: a.taskID}
}

// incarnation identifies the activation a materialization became, so that
// the report tool of an agent is honoured only while that activation is
// resident (R106: never for a stale same-id object). act is set in the
// child's loop once the activation is published.
type incarnation struct{ act *activation }

// begin publishes an activation over ag, the agent materialized with inc:
// it records the run row of kind activation with a fresh run id and task
// id, and puts the dispatch of subagent/start (R71) in c's outbox. The
// activation holds the live-run slot release gives back; on error the
// caller still holds it. It runs in c's loop.
func (m *Manager) begin(ctx context.Context, c *child, ag ChildAgent, sess store.Session, desc Descriptor, inc *incarnation,
	release func()) (*activation, error) {
	act := &activation{
		c: c, base: ctx, agent: ag, runID: uuid.NewString(), taskID: uuid.NewString(), release: release,
		provider: desc.Provider, local: true, parentID: sess.ParentID, boundary: len(ag.Events()),
		done: make(chan struct{}), started: make(chan struct{}),
	}
	if p, ok := m.svc.Provider(desc.Provider); ok {
		act.local = p.Capabilities().Local
	}
	now := time.Now()
	start := act.event(EventStart)
	row, err := lifecycleRow(start, now)
	if err == nil {
		row, err = m.store.StartRun(ctx, store.Run{
			ID: act.runID, Kind: store.KindActivation, Provider: act.provider, ChildID: c.key.id,
			ParentID: act.parentID, TaskID: act.taskID, Local: act.local, State: store.StateRunning,
			StartedAt: now, Owner: m.svc.owner, LeaseUntil: now.Add(m.svc.lease),
		}, row)
	}
	if err != nil {
		return nil, fmt.Errorf("record start of activation of %s: %w", c.key.id, err)
	}
	start.Seq = row.ID
	inc.act = act
	c.outbox = append(c.outbox, func() {
		m.svc.bus.dispatch(ctx, start)
		close(act.started)
	})
	return act, nil
}

// activate makes act the live activation of c, whose loop then watches
// its turn's end (turnEnd). It runs in c's loop.
func (m *Manager) activate(c *child, act *activation) {
	c.act = act
	m.mu.Lock()
	m.runs[act.runID] = act
	m.mu.Unlock()
}

// open delivers row as the message that opens act's turn: on the idle
// agent it is logged as user/message at once, so the row is acknowledged.
func (m *Manager) open(act *activation, row store.InboxMessage) error {
	msg, err := RowMessage(row)
	if err == nil {
		_, err = act.agent.FollowupMessage(act.base, msg)
	}
	if err != nil {
		return fmt.Errorf("deliver message %s to %s: %w", row.ID, act.c.key.id, err)
	}
	m.ack(act.base, act.c.key.id, row.ID)
	return nil
}

// rollback undoes an activation whose first message was not accepted: its
// agent is closed and its start edge ended aborted, without a notice (R59,
// R60, R75). It runs in c's loop and act was never activated.
func (m *Manager) rollback(act *activation) {
	m.closeAgent(act.base, act.c.key.id, act.agent)
	act.c.outbox = append(act.c.outbox, m.end(act, StopAborted, []model.Block{}))
	act.release()
	close(act.done)
}

// route hands the accepted row to child c, in its loop. A running,
// uninterrupted Queuer (an ACP agent) gets it as its next turn, answered
// RouteQueued at once; any other running, uninterrupted activation with a
// single turn gets it as a steer, answered once admitted.
// Otherwise the row is owed to the next activation, in acceptance order
// behind every pending row: when c has none and waking is set, a cold
// resume starts it now; when one is live, its settlement cold-resumes c
// (R90). A non-waking row — a notice while draining, a steer an interrupt
// rejected — stays parked until a waking one arrives (R102–R103). The error
// is that of a cold resume started here; it was also given to every waiter.
func (m *Manager) route(ctx context.Context, c *child, row store.InboxMessage, waking bool) error {
	act := c.act
	if act == nil {
		if waking {
			return m.resume(ctx, c)
		}
		return nil
	}
	if _, ok := act.agent.(Queuer); ok && !act.closing && !act.interrupted && act.agent.Running() {
		if msg, err := RowMessage(row); err == nil {
			if _, err := act.agent.FollowupMessage(ctx, msg); err == nil {
				m.answer(c, row.ID, answer{res: FollowupResult{Route: RouteQueued, TaskID: act.taskID, MessageID: row.ID}})
				return nil
			}
		}
	}
	if !act.closing && !act.interrupted && !act.queued && act.agent.Running() {
		if msg, err := RowMessage(row); err == nil {
			if settled, err := act.agent.SubmitSteer(ctx, msg); err == nil {
				m.track(act, row.ID, settled, waking)
				return nil
			}
		}
		// Rejected at once: the turn is ending, and so is the activation.
	}
	if waking {
		c.wake = true
	}
	return nil
}

// track waits, off the loop, for a submitted steer of act to settle and
// hands the outcome to the loop: an admitted message is acknowledged and
// its caller answered RouteSteered; a rejected one is owed to the next
// activation — waking it unless it is not a waking message or an interrupt
// or a drain parked it. A caller whose message an interrupt parked is
// answered RouteParked at once: nothing may wake the child for a while,
// and the caller (a parent's tool call among them) must not wait for that.
// It runs in act's loop.
func (m *Manager) track(act *activation, id string, settled <-chan error, waking bool) {
	act.inflight++
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		err := <-settled
		m.do(act.c.key, func(c *child) {
			defer m.release(c, act)
			if err == nil {
				m.ack(act.base, c.key.id, id)
				m.answer(c, id, answer{res: FollowupResult{Route: RouteSteered, TaskID: act.taskID, MessageID: id}})
				return
			}
			switch {
			case act.interrupted:
				m.answer(c, id, answer{res: FollowupResult{Route: RouteParked, MessageID: id}})
			case waking && !m.isDraining():
				c.wake = true
			}
		})
	}()
}

// releaseSlot gives back the live-run slot c holds for a cold resume that
// did not take it. It runs in c's loop.
func (m *Manager) releaseSlot(c *child) {
	if c.slot != nil {
		c.slot()
		c.slot = nil
	}
}

// release ends one unit of act's inflight work; the last one lets act
// settle once its turn has ended. It runs in c's loop.
func (m *Manager) release(c *child, act *activation) {
	act.inflight--
	m.settleIfDone(c, act)
}

// answer hands a to the caller waiting for message id, if any. It runs in
// c's loop.
func (m *Manager) answer(c *child, id string, a answer) {
	if w, ok := c.waiters[id]; ok {
		w <- a
		delete(c.waiters, id)
	}
}

// resume cold-resumes c and delivers its pending rows. On failure every
// waiting caller gets the error and its message is withdrawn, so that an
// error means not delivered; rows nobody waits for stay pending. It runs in
// c's loop and c has no live activation.
func (m *Manager) resume(ctx context.Context, c *child) error {
	c.wake = false
	if m.isDraining() {
		return nil // the rows stay pending for Recover after the restart
	}
	err := m.coldResume(ctx, c)
	if err != nil {
		for id, w := range c.waiters {
			w <- answer{err: err}
			delete(c.waiters, id)
			m.ack(ctx, c.key.id, id)
		}
	}
	return err
}

// delivery is a pending row ready to deliver.
type delivery struct {
	id  string
	msg agent.UserMessage
}

// coldResume starts a new activation of c over its persisted log (R86–R89)
// and delivers its pending rows in acceptance order, each as its own turn
// (R83, R103), answering their callers RouteStarted. Rows the log already
// holds as user/messages (a crash between delivery and acknowledgement) are
// acknowledged instead. With nothing to deliver no activation starts. It
// runs in c's loop; c.act is nil and c.sess, c.desc are verified.
func (m *Manager) coldResume(ctx context.Context, c *child) error {
	id := c.key.id
	pending, err := m.store.Pending(ctx, id)
	if err != nil {
		return fmt.Errorf("resume %s: read inbox: %w", id, err)
	}
	todo := m.decode(ctx, c, pending)
	if len(todo) == 0 {
		return nil
	}
	sess, desc := *c.sess, *c.desc
	// This replica drives the child from here: its lease first, and its
	// writes fenced by it.
	if err := m.hold(ctx, c); err != nil {
		return err
	}
	ctx = m.svc.ctl.Fenced(ctx)
	// Only the descriptor's route: never the original budget, never the
	// parent's current route (§1.8, R88).
	inc := &incarnation{}
	ag, err := m.materializer(desc.Provider).Materialize(ctx, MaterializeRequest{Session: sess, Descriptor: desc,
		Options: AgentOptions{Provider: desc.AgentProvider, Model: desc.AgentModel}, Report: m.reporter(c.key, inc)})
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return err // R89
		}
		return &Error{Code: ENotResumable, Message: fmt.Sprintf("subagent %q could not be resumed", id), Err: err}
	}
	// The durable inbox is the authority for undelivered messages: what a
	// crash left queued in the agent's own log-sourced inbox is dropped, so
	// that nothing runs twice.
	ag.Cancel(agent.CauseDisposed, false)
	logged := LoggedMessages(ag.Events())
	var seen []string
	todo = slices.DeleteFunc(todo, func(d delivery) bool {
		if logged[d.id] {
			seen = append(seen, d.id)
			return true
		}
		return false
	})
	if len(seen) > 0 {
		m.ack(ctx, id, seen...)
	}
	if len(todo) == 0 {
		m.closeAgent(ctx, id, ag)
		return nil
	}
	// The slot a followup reserved for this resume, else one that counts
	// but is never refused: the messages are accepted already.
	release := c.slot
	c.slot = nil
	if release == nil {
		release, _ = m.svc.reserveLive(c.key.tenant, true)
	}
	act, err := m.begin(ctx, c, ag, sess, desc, inc, release)
	if err != nil {
		release()
		m.closeAgent(ctx, id, ag)
		return err
	}
	for i, d := range todo {
		if _, err := ag.FollowupMessage(ctx, d.msg); err != nil {
			if i == 0 {
				m.rollback(act)
				return fmt.Errorf("resume %s: deliver message %s: %w", id, d.id, err)
			}
			// The rest waits, in order, for the next activation.
			m.log.ErrorContext(ctx, "deliver inbox message", slog.String("child_id", id), slog.Any("error", err))
			c.wake = true
			break
		}
		if i == 0 {
			m.ack(ctx, id, d.id) // logged at once: it opened the turn
		}
		m.answer(c, d.id, answer{res: FollowupResult{Route: RouteStarted, TaskID: act.taskID, MessageID: d.id}})
	}
	// Queued turns run first: a later delivery waits for the next
	// activation rather than overtaking them as a steer.
	act.queued = len(todo) > 1
	m.activate(c, act)
	return nil
}

// decode turns pending rows into deliveries. A row that does not decode is
// dropped: it is logged, withdrawn and its caller told. It runs in c's
// loop.
func (m *Manager) decode(ctx context.Context, c *child, rows []store.InboxMessage) []delivery {
	out := make([]delivery, 0, len(rows))
	for _, r := range rows {
		msg, err := RowMessage(r)
		if err != nil {
			m.log.ErrorContext(ctx, "dropping an undecodable inbox message", slog.String("child_id", c.key.id), slog.Any("error", err))
			m.ack(ctx, c.key.id, r.ID)
			m.answer(c, r.ID, answer{err: fmt.Errorf("deliver message %s: %w", r.ID, err)})
			continue
		}
		out = append(out, delivery{id: r.ID, msg: msg})
	}
	return out
}

// turnEnd is the child loop's watch (resident.Policy.Watch): while c's
// activation has nothing in flight and is not settling, the loop receives
// its agent's turn end and decides settlement (settleIfDone). In flight, a
// release decides instead.
func (m *Manager) turnEnd(c *child) (<-chan struct{}, func(context.Context, *child, struct{})) {
	act := c.act
	if act == nil || act.closing || act.inflight > 0 {
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
	case c.act != act || act.closing:
		return
	case act.agent.Running(), act.inflight > 0:
		return // the next turn end, or the last release, brings act back
	}
	act.closing = true
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.settle(act)
	}()
}

// settle ends act (R67–R71): the epoch's facts are read from its own events
// before the agent is closed; a failed close makes it error without output
// (R70); the parent gets its notice (R74), then subagent/end is recorded and
// dispatched; finally the activation is removed and, when a delivery is
// owed, the child cold-resumes.
func (m *Manager) settle(act *activation) {
	c := act.c
	ctx := act.base
	events := act.agent.Events()
	events = events[min(act.boundary, len(events)):]
	output := SelectOutput(events)
	reason := EpochStopReason(events)
	if err := act.agent.Close(ctx); err != nil {
		m.log.ErrorContext(ctx, "close continuable child agent", slog.String("child_id", c.key.id), slog.Any("error", err))
		reason, output = StopError, []model.Block{}
	}
	// Every message the epoch logged is delivered; most were acknowledged
	// on admission already.
	if claimed := LoggedMessages(events); len(claimed) > 0 {
		ids := make([]string, 0, len(claimed))
		for id := range claimed {
			ids = append(ids, id)
		}
		m.ack(ctx, c.key.id, ids...)
	}
	<-act.started // dispatched by whoever began act, once its command returned
	m.notify(act, reason, output)
	m.end(act, reason, output)()

	m.do(c.key, func(c *child) {
		c.act = nil
		m.mu.Lock()
		delete(m.runs, act.runID)
		m.mu.Unlock()
		close(act.done)
		if !c.wake || m.isDraining() {
			act.release()
			return
		}
		// The owed cold resume takes over act's live-run slot.
		c.slot, act.release = act.release, nil
		if err := m.resume(ctx, c); err != nil {
			m.log.ErrorContext(ctx, "cold resume after settlement", slog.String("child_id", c.key.id), slog.Any("error", err))
		}
		m.releaseSlot(c)
	})
}

// end records act's subagent/end with reason and output, exactly once (see
// Service.recordEnd), and returns the func that dispatches it (R71).
func (m *Manager) end(act *activation, reason string, output []model.Block) (dispatch func()) {
	e := act.event(EventEnd)
	e.StopReason = reason
	if len(output) > 0 {
		e.LastAssistantMessage = output
	}
	log := m.log.With(slog.String("run_id", act.runID))
	out, err := json.Marshal(output)
	if err != nil {
		log.ErrorContext(act.base, "encode activation output", slog.Any("error", err))
	}
	e, recorded := m.svc.recordEnd(act.base, log, e, store.RunResult{StopReason: reason, Output: out})
	return func() {
		if recorded {
			m.svc.bus.dispatch(act.base, e)
		}
	}
}

// notify sends act's settlement notice to its durable parent (R74–R79) on
// the path reports take too (send), waking the parent unless the manager
// is draining (R118). A failure is logged and never blocks the settlement
// (R79).
func (m *Manager) notify(act *activation, reason string, output []model.Block) {
	ctx := act.base
	content, src := settlementNotice(act.c.key.id, reason, output)
	_, err := m.send(ctx, act.parentID, content, src, m.isDraining())
	switch {
	case errors.Is(err, errNoSink):
		m.log.DebugContext(ctx, "no notice sink: settlement notice dropped", slog.String("parent_id", act.parentID))
	case err != nil:
		m.log.WarnContext(ctx, "settlement notice was not delivered", slog.String("child_id", act.c.key.id),
			slog.String("parent_id", act.parentID), slog.Any("error", err))
	}
}

// errNoSink: a message for a root parent, and no NoticeSink.
var errNoSink = errors.New("no notice sink for root parents is configured")

// send delivers a runtime message — a settlement notice or a report — to
// durable parent parentID and returns its message id. Every notice and
// report to one parent takes this one path, in the order the calls are
// made (R110): a continuable parent through its durable inbox like a
// followup (deliverInbox), any other parent through the NoticeSink. quiet
// stores the message for the parent's next turn without waking it (R108).
// Returns the store's error for a parent that cannot be read (wrapping
// store.ErrNotFound when it is gone), errNoSink, or the delivery's error.
func (m *Manager) send(ctx context.Context, parentID string, content []model.Block, src agent.Source, quiet bool) (string, error) {
	// The parent's writes are fenced by the parent's own lease, not by
	// the sender's.
	ctx = store.WithOwner(ctx, "")
	parent, err := m.store.GetSession(ctx, parentID)
	if err != nil {
		return "", fmt.Errorf("read parent %s: %w", parentID, err)
	}
	if parent.ParentID != "" && parent.Mode == ModeContinuable {
		return m.deliverInbox(ctx, parentID, content, src, !quiet)
	}
	if m.notices == nil {
		return "", errNoSink
	}
	msg := agent.UserMessage{ID: uuid.NewString(), Role: "user", Content: content, Source: src}
	if err := m.notices.Notify(ctx, parentID, msg, quiet); err != nil {
		return "", err
	}
	return msg.ID, nil
}

// deliverInbox accepts a message into continuable parent parentID's
// durable inbox and routes it like a followup, without waiting for its
// route: steered into a running turn, else — when waking — owed to the
// next activation, which starts now if none is live; a message that does
// not wake stays parked until something else wakes the parent. It returns
// the message id.
func (m *Manager) deliverInbox(ctx context.Context, parentID string, content []model.Block, src agent.Source, waking bool) (string, error) {
	row, err := newRow(parentID, content, src)
	if err != nil {
		return "", err
	}
	if err := m.deliverRow(ctx, row, waking); err != nil {
		return "", err
	}
	return row.ID, nil
}

// deliver is deliverInbox of row on this replica. A row stored already (a
// request retried after the replica it was sent to was lost) is taken as
// accepted.
func (m *Manager) deliver(ctx context.Context, row store.InboxMessage, waking bool) error {
	parentID := row.ChildID
	var err error
	m.do(childKey{store.Tenant(ctx), parentID}, func(c *child) {
		var sess store.Session
		if sess, err = m.header(ctx, c); err != nil {
			return
		}
		if err = m.resumable(ctx, c, sess.ParentID); err != nil {
			return
		}
		if err = m.store.Enqueue(ctx, row); err != nil && !errors.Is(err, store.ErrConflict) {
			err = fmt.Errorf("accept message for %s: %w", parentID, err)
			return
		}
		err = nil
		// Accepted: a failed cold resume leaves the row pending for the
		// next wake (nobody waits for its route) — also when another
		// replica took the parent since: its next activation delivers it.
		if err := m.route(ctx, c, row, waking); err != nil {
			m.log.ErrorContext(ctx, "wake parent", slog.String("parent_id", parentID), slog.Any("error", err))
		}
	})
	return err
}

// ack removes delivered (or withdrawn) rows from the durable inbox. A
// failure is logged: a delivered row left behind is recognised from the log
// at the next cold resume.
func (m *Manager) ack(ctx context.Context, childID string, ids ...string) {
	if err := m.store.Ack(ctx, childID, ids...); err != nil {
		m.log.ErrorContext(ctx, "remove delivered or withdrawn inbox messages", slog.String("child_id", childID), slog.Any("error", err))
	}
}

// EpochStopReason is the stop reason of a continuable activation, read from
// the events it appended (seam-spec R69, §3.5, §8.6): the consumed-work
// fold's accounting turn maps max-tokens to max-tokens, aborted and
// interrupted to aborted, error to error, blocked to refusal and any
// unknown kind to error; a completed turn, or none, is aborted when
// accepted work was dropped unrun after it, else completed. A recorded
// failure outranks a later cancellation.
func EpochStopReason(events []store.Event) string {
	end, dropped := FoldConsumedWork(events)
	kind := agent.ReasonCompleted
	if end != nil {
		kind = end.Reason.Kind
	}
	switch kind {
	case agent.ReasonCompleted:
		if dropped {
			return StopAborted
		}
		return StopCompleted
	case agent.ReasonMaxTokens:
		return StopMaxTokens
	case agent.ReasonAborted, agent.ReasonInterrupted:
		return StopAborted
	case agent.ReasonBlocked:
		return StopRefusal
	}
	return StopError
}

// maxSummary bounds a notice's summary (seam-spec R77, §8.15).
const maxSummary = 120

// settlementNotice is the message a parent gets when child settles with
// reason and output (seam-spec R77): the summary sentence, then the closing
// message or the statement that there is none.
func settlementNotice(child, reason string, output []model.Block) ([]model.Block, agent.Source) {
	var summary string
	switch reason {
	case StopCompleted:
		summary = fmt.Sprintf("Background subagent %s finished and will do no further work unless you send it more.", child)
	case StopAborted:
		summary = fmt.Sprintf("Background subagent %s was stopped before it finished.", child)
	case StopMaxTokens:
		summary = fmt.Sprintf("Background subagent %s ran out of room before it finished.", child)
	case StopRefusal:
		summary = fmt.Sprintf("Background subagent %s declined the task.", child)
	case StopError:
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
	return content, agent.Source{Kind: SourceSubagentSettled, Form: "notice", Summary: boundSummary(summary), SenderSessionID: child}
}

// boundSummary cuts s to maxSummary characters, ending a cut one with "…".
func boundSummary(s string) string {
	if utf8.RuneCountInString(s) <= maxSummary {
		return s
	}
	r := []rune(s)
	return string(r[:maxSummary-1]) + "…"
}
