package children

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
	"github.com/subagentd/subagentd/internal/telemetry"
)

// activation is one residency of a continuable child (R64, R71): a
// live agent, a run row of kind activation with its task id, and one
// subagent/start … subagent/end pair.
type activation struct {
	c        *child
	base     context.Context // the child's tenant, without cancellation
	agent    subagent.ChildAgent
	runID    string
	taskID   string
	provider string // the descriptor's, registered or not (R7, R71)
	local    bool   // the provider's Local; true for an unregistered one (in-process resume)
	parentID string
	rootID   string
	label    string // the child's, named in its settlement notice (R77)
	// wakeParent: the settlement notice opens the parent's turn (R78,
	// store.Session.WakeParent).
	wakeParent bool

	// Owned by c's loop.
	state    actState // see state.go
	inflight int      // submitted steers and reports not yet settled
	// diagnostic, when set, is the diagnostic of an aborted end (a tree
	// cancel's); set before the turn is cancelled.
	diagnostic string
	// detached: this replica lost the child's lease and detached the
	// running turn (subagent.Detacher), whose work goes on for the child's
	// next driver: the activation ends error, not as the turn would have.
	detached bool
	// discard: the child was disposed; settle discards the agent
	// (Discarder) instead of closing it.
	discard bool
	// release gives back the activation's live-run slot
	// (Service.reserveLive) when it settles, unless settle hands the slot
	// on to the cold resume it owes (then nil).
	release func()

	// inv is the activation's invoke_agent span, ended with its end.
	inv *telemetry.Invocation

	done chan struct{} // closed once the activation settled and was removed
	// started is closed once subagent/start was dispatched, which its end
	// must follow.
	started chan struct{}
}

// event returns the lifecycle event of type typ for act.
func (a *activation) event(typ string) subagent.Event {
	return subagent.Event{Type: typ, RunID: a.runID, Provider: a.provider, ID: a.c.key.ID, Local: a.local,
		ParentID: a.parentID, RootID: a.rootID, TaskID: a.taskID}
}

// materialized identifies the activation a materialization became, so that
// the report tool of an agent is honoured only while that activation is
// resident (R106: never for a stale same-id object). act is set in the
// child's loop once the activation is published.
type materialized struct{ act *activation }

// begin publishes an activation over ag, the agent materialized with inc:
// it records the run row of kind activation with a fresh run id and task
// id, and puts the dispatch of subagent/start (R71) in c's outbox. The
// activation holds the live-run slot release gives back; on error the
// caller still holds it. It runs in c's loop.
func (m *Manager) begin(ctx context.Context, c *child, ag subagent.ChildAgent, sess store.Session, desc subagent.Descriptor, inc *materialized,
	release func(), tr subagent.RunTrace) (*activation, error) {
	act, run, start, err := m.activation(ctx, c, ag, sess, desc, release, tr)
	if err == nil {
		start, err = m.store.StartRun(ctx, run, start)
	}
	if err != nil {
		return nil, fmt.Errorf("record start of activation of %s: %w", c.key.ID, err)
	}
	m.published(act, inc, start)
	return act, nil
}

// activation returns a new activation over ag with a fresh run id and
// task id, and the run row and subagent/start that record it; nothing is
// written. The agent folds the activation's facts from here (Track).
func (m *Manager) activation(ctx context.Context, c *child, ag subagent.ChildAgent, sess store.Session, desc subagent.Descriptor,
	release func(), tr subagent.RunTrace) (*activation, store.Run, store.LifecycleEvent, error) {
	act := &activation{
		c: c, base: ctx, agent: ag, runID: uuid.NewString(), taskID: uuid.NewString(), release: release,
		provider: desc.Provider, local: true, parentID: sess.ParentID, rootID: store.RootOf(sess), inv: tr.Inv,
		label: sess.Label, wakeParent: sess.WakeParent, done: make(chan struct{}), started: make(chan struct{}),
	}
	tr.Inv.SetRun(act.runID, c.key.ID)
	// The activation's facts come only from the events after the start edge
	// (R69, docs/seam.md §12): the agent folds them as it appends them.
	ag.Track()
	if p, ok := m.svc.Provider(desc.Provider); ok {
		act.local = p.Capabilities().Local
	}
	now := time.Now()
	row, err := subagent.LifecycleRow(act.event(subagent.EventStart), now)
	run := store.Run{
		ID: act.runID, Kind: store.KindActivation, Provider: act.provider, ChildID: c.key.ID,
		ParentID: act.parentID, RootID: act.rootID, TaskID: act.taskID, Local: act.local, State: store.StateRunning,
		StartedAt: now, Owner: m.svc.Owner(), LeaseUntil: now.Add(m.svc.LeaseDuration()), Traceparent: tr.Parent,
	}
	return act, run, row, err
}

// published makes act, whose start was stored as row, the activation of
// inc and puts the dispatch of its subagent/start in the child's outbox.
func (m *Manager) published(act *activation, inc *materialized, row store.LifecycleEvent) {
	start := act.event(subagent.EventStart)
	start.Seq = row.ID
	inc.act = act
	act.c.outbox = append(act.c.outbox, func() {
		m.svc.Dispatch(act.base, start)
		close(act.started)
	})
}

// open delivers row as the message that opens act's turn: on the idle
// agent it is logged as user/message at once, so the row is acknowledged.
func (m *Manager) open(act *activation, row store.InboxMessage) error {
	msg, err := RowMessage(row)
	if err == nil {
		_, err = act.agent.FollowupMessage(act.base, msg)
	}
	if err != nil {
		return fmt.Errorf("deliver message %s to %s: %w", row.ID, act.c.key.ID, err)
	}
	m.ack(act.base, act.c.key.ID, row.ID)
	return nil
}

// rollback undoes an activation whose first message was not accepted: its
// agent is closed and its start edge ended aborted, without a notice (R59,
// R60, R75). It runs in c's loop and act is starting.
func (m *Manager) rollback(act *activation) {
	act.mustTo(actSettled)
	m.closeAgent(act.base, act.c.key.ID, act.agent)
	act.c.outbox = append(act.c.outbox, m.end(act, subagent.StopAborted, []model.Block{}, sessionlog.Outcome{})) // no model call ran
	act.release()
	close(act.done)
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

// resume cold-resumes c and delivers its pending rows. On failure every
// waiting caller gets the error and its message is withdrawn, so that an
// error means not delivered; rows nobody waits for stay pending. It runs in
// c's loop and c has no live activation.
func (m *Manager) resume(ctx context.Context, c *child) error {
	if m.isDraining() {
		return nil // the rows stay pending for Recover after the restart
	}
	err := m.coldResume(ctx, c)
	if err != nil {
		for id, w := range c.waiters {
			w <- answer{err: err}
			delete(c.waiters, id)
			m.ack(ctx, c.key.ID, id)
		}
	}
	return err
}

// delivery is a pending row ready to deliver; quiet as the row.
type delivery struct {
	id    string
	msg   sessionlog.UserMessage
	quiet bool
}

// wakes reports whether some of ds is not quiet: only such a delivery
// starts an activation (R108, R118).
func wakes(ds []delivery) bool {
	return slices.ContainsFunc(ds, func(d delivery) bool { return !d.quiet })
}

// coldResume starts a new activation of c over its persisted log (R86–R89)
// and delivers its pending rows in acceptance order, each as its own turn
// (R83, R103), answering their callers RouteStarted. Rows the log already
// holds as user/messages (a crash between delivery and acknowledgement) are
// acknowledged instead. An agent whose log ends in a turn its last owner
// left open starts the activation with that turn, rejoined (reattach.go).
// Otherwise, with nothing to deliver that wakes no activation starts:
// quiet rows (a quiet report, a notice during shutdown — R108, R118), also
// those a crash left, wait for an activation something else starts, and
// run in it in their place. It runs in c's loop; c.act is nil
// and c.sess, c.desc are verified.
func (m *Manager) coldResume(ctx context.Context, c *child) (err error) {
	id := c.key.ID
	pending, err := m.store.Pending(ctx, id)
	if err != nil {
		return fmt.Errorf("resume %s: read inbox: %w", id, err)
	}
	todo := m.decode(ctx, c, pending)
	if !wakes(todo) && !m.svc.Reattaches(c.desc.Provider) {
		return nil
	}
	sess, desc := *c.sess, *c.desc
	// This replica drives the child from here: its lease first, and its
	// writes fenced by it.
	if err := m.children.Hold(ctx, c.key); err != nil {
		return err
	}
	ctx = m.ctl.Fenced(ctx)
	tr := m.activationTrace(ctx, id)
	ctx, tr.Inv = telemetry.StartInvoke(telemetry.WithTraceparent(ctx, tr.Parent), m.svc.InvokeParams(desc.Provider, id))
	begun := false
	defer func() {
		if !begun {
			tr.Inv.End(subagent.StopAborted, err)
		}
	}()
	// Only the descriptor's route: never the original budget, never the
	// parent's current route (docs/seam.md §10, R88).
	inc := &materialized{}
	ag, err := m.materializer(desc.Provider).Materialize(ctx, subagent.MaterializeRequest{Session: sess, Descriptor: desc,
		Options: subagent.AgentOptions{Provider: desc.AgentProvider, Model: desc.AgentModel}, Report: m.reporter(c.key, inc)})
	if err != nil {
		var e *subagent.Error
		if errors.As(err, &e) {
			return err // R89
		}
		return &subagent.Error{Code: subagent.ENotResumable, Message: fmt.Sprintf("subagent %q could not be resumed", id), Err: err}
	}
	// The durable inbox is the authority for undelivered messages: what a
	// crash left queued in the agent's own log-sourced inbox is dropped, so
	// that nothing runs twice.
	ag.Cancel(sessionlog.CauseDisposed, false)
	logged := sessionlog.LoggedMessages(ag.Events())
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
	// A turn the child's last owner left open is the activation's first
	// (reattach.go); the deliveries queue behind it.
	rejoin := detached(ag)
	if !wakes(todo) && rejoin == nil {
		m.closeAgent(ctx, id, ag)
		return nil
	}
	// The slot a followup reserved for this resume, else one that counts
	// but is never refused: the messages are accepted already.
	release := c.slot
	c.slot = nil
	if release == nil {
		release, _ = m.svc.ReserveLive(c.key.Tenant, true)
	}
	act, err := m.begin(ctx, c, ag, sess, desc, inc, release, tr)
	if err != nil {
		release()
		m.closeAgent(ctx, id, ag)
		return err
	}
	begun = true
	if rejoin != nil {
		rejoin.Reattach()
	}
	owed := false
	for i, d := range todo {
		if _, err := ag.FollowupMessage(ctx, d.msg); err != nil {
			if i == 0 && rejoin == nil {
				m.rollback(act)
				return fmt.Errorf("resume %s: deliver message %s: %w", id, d.id, err)
			}
			// The rest waits, in order, for the next activation.
			m.log.ErrorContext(ctx, "deliver inbox message", slog.String("child_id", id), slog.Any("error", err))
			owed = true
			break
		}
		if i == 0 && rejoin == nil {
			m.ack(ctx, id, d.id) // logged at once: it opened the turn
		}
		m.answer(c, d.id, answer{res: FollowupResult{Route: subagent.RouteStarted, TaskID: act.taskID, MessageID: d.id}})
	}
	// Queued turns run first: a later delivery waits for the next
	// activation rather than overtaking them as a steer.
	live := actSteering
	if len(todo) > 1 {
		live = actQueued
	}
	c.activate(act, live)
	if owed {
		c.owe()
	}
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
			m.log.ErrorContext(ctx, "dropping an undecodable inbox message", slog.String("child_id", c.key.ID), slog.Any("error", err))
			m.ack(ctx, c.key.ID, r.ID)
			m.answer(c, r.ID, answer{err: fmt.Errorf("deliver message %s: %w", r.ID, err)})
			continue
		}
		out = append(out, delivery{id: r.ID, msg: msg, quiet: r.Quiet})
	}
	return out
}

// activationTrace is the trace of a new activation of child id: a child
// of ctx's span (the followup's request or tool call), else — resumed with
// no caller in reach, after a restart or on another replica — of the span
// its first run row kept, read only when traces are recorded.
func (m *Manager) activationTrace(ctx context.Context, id string) subagent.RunTrace {
	if tp := telemetry.Traceparent(ctx); tp != "" || !telemetry.Recording() {
		return subagent.RunTrace{Parent: tp}
	}
	runs, err := m.store.ListRuns(ctx, store.RunFilter{ChildID: id, Limit: 1})
	if err != nil || len(runs) == 0 {
		return subagent.RunTrace{}
	}
	return subagent.RunTrace{Parent: runs[0].Traceparent}
}

// detached returns ag as a DetachedAgent when its log ends in a detached
// turn, else nil.
func detached(ag subagent.ChildAgent) subagent.DetachedAgent {
	if d, ok := ag.(subagent.DetachedAgent); ok && d.Detached() {
		return d
	}
	return nil
}
