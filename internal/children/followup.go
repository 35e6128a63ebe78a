package children

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/resident"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Followup delivers content to continuable child childID on behalf of its
// durable direct parent (docs/seam.md §14, §22). The message is stored
// in the durable inbox before anything else happens, then: a running child
// gets it steered into its open turn and the call answers RouteSteered once
// a model step admitted it; otherwise — the child is not live, its turn is
// ending, or it was interrupted — the call answers RouteStarted once a new
// activation that cold-resumed the child took it, behind every message
// accepted before it (R90, R103). Cold resume rebuilds the agent from the
// descriptor alone and never re-appends descriptor or policy (R86–R88).
//
// Returns, before anything is stored or appended: EDraining;
// EInvalidRequest for an empty parent id, or content that is empty or not
// JSON;
// ESessionNotFound for an unknown child; EForbidden when parentSessionID
// is not the child's durable parent (src grants nothing, R84); ENotResumable
// for a one-shot child or one without a supported continuable descriptor in
// its own suffix (R87); EAborted when ctx is already done (R91);
// ERateLimited when the child has no live activation and the tenant no
// free live-run slot (Config.MaxLiveRuns) for the one it would start. After
// acceptance: a cold resume that fails returns
// its error (a *Error unchanged, anything else as ENotResumable, R89) and
// the message is withdrawn, so an error always means not delivered — except
// EAborted: when ctx ends, or the manager shuts down, while the message
// waits for its route (a message parked by an interrupt waits for the next
// followup), the message stays accepted and will still be delivered (R91).
// A followup to a child that is not live while its tree is paused (its
// budget spent, Config.Governor) is accepted and answered RouteParked; it
// runs once the budget is raised (DeliverWaiting).
//
// A child another replica drives gets the followup there (see Control),
// and this call answers what that replica answered.
func (m *Manager) Followup(ctx context.Context, parentSessionID, childID string, content []model.Block, src sessionlog.Source) (FollowupResult, error) {
	row, err := m.followupMessage(ctx, parentSessionID, childID, content, src)
	if err != nil {
		return FollowupResult{}, err
	}
	return m.followupRow(ctx, parentSessionID, row, false)
}

// FollowupAsync is Followup answered at acceptance (Prefer: respond-async):
// it returns the message id once the message is a durable inbox row of the
// child, on the replica that drives it, without waiting for its route. The
// route follows as lifecycle event EventMessageRouted (see
// messageRouted), appended once by the replica that routed it: the
// outcome Followup would have answered, or OutcomeFailed with the error's
// code when a cold resume failed and the message was withdrawn. A message
// whose route is still open when the manager shuts down stays accepted
// and is delivered at the next start, without an event.
//
// Returns Followup's errors before acceptance.
func (m *Manager) FollowupAsync(ctx context.Context, parentSessionID, childID string, content []model.Block, src sessionlog.Source) (string, error) {
	row, err := m.followupMessage(ctx, parentSessionID, childID, content, src)
	if err != nil {
		return "", err
	}
	res, err := m.followupRow(ctx, parentSessionID, row, true)
	return res.MessageID, err
}

// followupMessage checks a followup's request and returns its inbox row.
// Returns EDraining, EInvalidRequest or EAborted.
func (m *Manager) followupMessage(ctx context.Context, parentSessionID, childID string, content []model.Block, src sessionlog.Source) (store.InboxMessage, error) {
	if err := m.admitting(); err != nil {
		return store.InboxMessage{}, err
	}
	if parentSessionID == "" {
		return store.InboxMessage{}, &subagent.Error{Code: subagent.EInvalidRequest, Message: "parentSessionId is required",
			Fields: map[string]string{"parentSessionId": "required"}}
	}
	if src.Kind == "" {
		src.Kind = subagent.SourceUser
	}
	if len(content) == 0 {
		return store.InboxMessage{}, &subagent.Error{Code: subagent.EInvalidRequest, Message: "content is required",
			Fields: map[string]string{"content": "required"}}
	}
	row, err := newRow(childID, content, src)
	if err != nil {
		return store.InboxMessage{}, &subagent.Error{Code: subagent.EInvalidRequest, Message: "content is not valid JSON",
			Fields: map[string]string{"content": "not valid JSON"}, Err: err}
	}
	if ctx.Err() != nil {
		return store.InboxMessage{}, followupAborted(ctx)
	}
	return row, nil
}

// followup is Followup of row on this replica, which drives the child or
// is about to. A row stored already (a request retried after the replica
// it was sent to was lost) is taken as accepted. With async set it returns
// at acceptance, a result carrying only the message id, and announces the
// route when it comes (announce).
func (m *Manager) followup(ctx context.Context, parentSessionID string, row store.InboxMessage, async bool) (FollowupResult, error) {
	childID := row.ChildID
	key := resident.Key{Tenant: store.Tenant(ctx), ID: childID}
	w := make(chan answer, 1)
	var err error
	var rootID string
	derr := m.children.DoContext(ctx, key, func(c *child) {
		// Admission again in the child's loop: a Shutdown that began since
		// must not find a new activation it never cancels (R113, R117).
		if err = m.admitting(); err != nil {
			return
		}
		if err = m.resumable(ctx, c, parentSessionID); err != nil {
			return
		}
		if ctx.Err() != nil {
			err = followupAborted(ctx)
			return
		}
		// A followup that will start an activation needs a live-run slot,
		// before anything is written; one for a live activation does not.
		if c.act == nil {
			if c.slot, err = m.svc.ReserveLive(key.Tenant, false); err != nil {
				return
			}
		}
		defer m.releaseSlot(c)
		if err = m.store.Enqueue(ctx, row); err != nil && !errors.Is(err, store.ErrConflict) {
			err = fmt.Errorf("accept followup for %s: %w", childID, err)
			return
		}
		err = nil
		c.waiters[row.ID] = w
		rootID = store.RootOf(*c.sess)
		// A child that is not live waits while its tree is paused: the
		// row stays in its inbox until the budget is raised.
		if c.act == nil {
			paused, perr := m.svc.TreePaused(ctx, childID)
			if perr != nil {
				m.log.WarnContext(ctx, "read whether the tree is paused; the followup is delivered", slog.String("child_id", childID), slog.Any("error", perr))
			}
			if paused {
				m.answer(c, row.ID, answer{res: FollowupResult{Route: subagent.RouteParked, MessageID: row.ID}})
				return
			}
		}
		// A cold resume that finds the child held by another replica
		// withdraws the row and answers resident.ErrHeldElsewhere: Forward sends the
		// followup there.
		m.route(context.WithoutCancel(ctx), c, row, true)
	})
	if derr != nil {
		return FollowupResult{}, followupAborted(ctx)
	}
	if err != nil {
		return FollowupResult{}, err
	}
	if async {
		m.announce(ctx, routedMessage{parentID: parentSessionID, rootID: rootID, row: row}, w)
		return FollowupResult{MessageID: row.ID}, nil
	}

	select {
	case a := <-w:
		return m.routed(a)
	case <-ctx.Done():
	}
	m.do(key, func(c *child) { delete(c.waiters, row.ID) })
	select {
	case a := <-w: // answered before we unregistered
		return m.routed(a)
	default:
		return FollowupResult{}, &subagent.Error{Code: subagent.EAborted, Err: context.Cause(ctx),
			Message: "stopped waiting for the followup's delivery; the message was accepted and will still be delivered"}
	}
}

// routed returns a followup's answer, counting its route.
func (m *Manager) routed(a answer) (FollowupResult, error) {
	if a.err == nil {
		m.svc.Metrics().Followup(string(a.res.Route))
	}
	return a.res, a.err
}

// resumable checks, for a followup, that c exists, belongs to parentID and
// can be resumed, caching what it read. It runs in c's loop. Returns
// ESessionNotFound, EForbidden or ENotResumable.
func (m *Manager) resumable(ctx context.Context, c *child, parentID string) error {
	sess, err := m.header(ctx, c)
	if err != nil {
		return err
	}
	if sess.ParentID != parentID {
		return subagent.Errorf(subagent.EForbidden, "subagent %q belongs to another parent session", c.key.ID)
	}
	if err := m.notDisposed(ctx, c); err != nil {
		return err
	}
	if c.desc != nil {
		return nil
	}
	notResumable := func(err error) error {
		return &subagent.Error{Code: subagent.ENotResumable, Err: err, Message: fmt.Sprintf(
			"subagent %q has no supported continuation state; do not retry sending it messages", c.key.ID)}
	}
	if sess.Mode == subagent.ModeOneShot {
		return notResumable(nil)
	}
	d, found, err := sessionlog.ResumeDescriptor(ctx, m.store, sess)
	if err != nil {
		return notResumable(err)
	}
	if !found || d.Mode != subagent.ModeContinuable {
		return notResumable(nil)
	}
	c.desc = &d
	return nil
}

// header returns c's durable header, cached. It runs in c's loop. Returns
// ESessionNotFound.
func (m *Manager) header(ctx context.Context, c *child) (store.Session, error) {
	if c.sess != nil {
		return *c.sess, nil
	}
	sess, err := m.store.GetSession(ctx, c.key.ID)
	if errors.Is(err, store.ErrNotFound) {
		return store.Session{}, subagent.Errorf(subagent.ESessionNotFound, "subagent %q not found", c.key.ID)
	}
	if err != nil {
		return store.Session{}, fmt.Errorf("read subagent %s: %w", c.key.ID, err)
	}
	c.sess = &sess
	return sess, nil
}

func followupAborted(ctx context.Context) error {
	return &subagent.Error{Code: subagent.EAborted, Message: "the followup was aborted before it was accepted", Err: context.Cause(ctx)}
}

// route hands the accepted row to child c, in its loop. A running Queuer
// (an ACP agent) that takes turns gets it as its next turn, answered
// RouteQueued at once; any other running activation that is steering gets
// it as a steer, answered once admitted.
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
	if _, ok := act.agent.(subagent.Queuer); ok && act.takesTurns() && act.agent.Running() {
		if msg, err := RowMessage(row); err == nil {
			if _, err := act.agent.FollowupMessage(ctx, msg); err == nil {
				m.answer(c, row.ID, answer{res: FollowupResult{Route: subagent.RouteQueued, TaskID: act.taskID, MessageID: row.ID}})
				return nil
			}
		}
	}
	if act.state == actSteering && act.agent.Running() {
		if msg, err := RowMessage(row); err == nil {
			if settled, err := act.agent.SubmitSteer(ctx, msg); err == nil {
				m.track(act, row.ID, settled, waking)
				return nil
			}
		}
		// Rejected at once: the turn is ending, and so is the activation.
	}
	if waking {
		c.owe()
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
				m.ack(act.base, c.key.ID, id)
				m.answer(c, id, answer{res: FollowupResult{Route: subagent.RouteSteered, TaskID: act.taskID, MessageID: id}})
				return
			}
			// act cannot be settling: this receipt is in flight.
			switch {
			case act.state == actInterrupted:
				m.answer(c, id, answer{res: FollowupResult{Route: subagent.RouteParked, MessageID: id}})
			case waking && !m.isDraining():
				c.owe()
			}
		})
	}()
}

// answer hands a to the caller waiting for message id, if any. It runs in
// c's loop.
func (m *Manager) answer(c *child, id string, a answer) {
	if w, ok := c.waiters[id]; ok {
		w <- a
		delete(c.waiters, id)
	}
}

// SteerActivation is confirmed steering of a live activation
// (R96, POST /v1/runs/{runId}/steer): content joins the running turn of
// the activation whose run id is runID and the call returns the message id
// once a model step admitted it. It is strict — never queued for a later
// turn, never a cold resume — and separate from Followup.
//
// An activation another replica drives is steered there (Control).
// Returns ERunNotFound when runID is no live activation of any replica
// (in ctx's tenant; its run row names the child whose loop is asked) or
// the store's error reading that row; EInvalidRequest for empty content; ESteerRejected when
// the activation runs no turn, was interrupted, is settling, or its turn
// ended before admitting content; ctx's error when ctx ended first (the
// content withdrawn).
func (m *Manager) SteerActivation(ctx context.Context, runID string, content []model.Block) (string, error) {
	act, err := m.liveRun(ctx, runID)
	if subagent.ErrorCode(err) == subagent.ERunNotFound {
		return m.routeSteer(ctx, runID, content)
	}
	if err != nil {
		return "", err
	}
	if len(content) == 0 {
		return "", &subagent.Error{Code: subagent.EInvalidRequest, Message: "content is required", Fields: map[string]string{"content": "required"}}
	}
	// The agent's own checks suffice: a settling activation's agent is idle
	// or closed, an interrupted one's turn is cancelled.
	id, err := act.agent.Steer(ctx, content, sessionlog.Source{Kind: subagent.SourceUser})
	if errors.Is(err, subagent.ErrSteerRejected) {
		return "", &subagent.Error{Code: subagent.ESteerRejected, Err: err, Message: "the subagent did not admit the message: it is not running a turn, " +
			"was interrupted, is settling, or its turn ended first; send it a followup instead"}
	}
	if err != nil {
		return "", fmt.Errorf("steer activation %s of %s: %w", runID, act.c.key.ID, err)
	}
	return id, nil
}

// liveRun returns the live activation of this process whose run id is
// runID, found through its run row, in ctx's tenant. Returns ERunNotFound,
// or the store's error.
func (m *Manager) liveRun(ctx context.Context, runID string) (*activation, error) {
	notFound := subagent.Errorf(subagent.ERunNotFound, "run %s is no live activation of this server", runID)
	run, err := m.store.GetRun(ctx, runID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, notFound
	case err != nil:
		return nil, fmt.Errorf("look up run %s: %w", runID, err)
	case run.Kind != store.KindActivation:
		return nil, notFound
	}
	var act *activation
	m.children.Peek(resident.Key{Tenant: store.Tenant(ctx), ID: run.ChildID}, func(c *child) {
		if c.act != nil && c.act.runID == runID {
			act = c.act
		}
	})
	if act == nil {
		return nil, notFound
	}
	return act, nil
}
