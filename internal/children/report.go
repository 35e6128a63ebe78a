package children

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/resident"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// ReportFrom sends content from continuable child childID to its durable
// direct parent (docs/seam.md §17) and returns the id of the message the
// parent logs: [text "Background subagent <childID> reported:", content…]
// with source {kind: subagent-report, form: relay, senderSessionId:
// childID} (R107). delivery DeliveryNextStep (or "") wakes the parent: the
// report joins its running turn at the next step, or starts a turn;
// DeliveryQuiet stores it for the parent's next turn without waking it
// (R108). A root parent gets it through the NoticeSink, a continuable
// parent through its durable inbox — the path of settlement notices, so a
// report accepted before the child settles reaches the parent before that
// child's notice (R110). It never ends the child's turn or settles it
// (R109), and goes exactly one edge up (R112). Once accepted, the child's
// settlement does not retract it (R111).
//
// The checks, in one command of the child's loop (R106): EInvalidRequest
// for an unknown delivery (the obsolete "wakeup" included) or content that
// is empty or not JSON; EAborted when ctx is done; EDraining; EForbidden
// unless childID is a resident continuable activation of this process (a
// root, a one-shot or a settled child is not); EActivationClosing once its
// settlement began. Then EParentUnavailable when the parent session is
// gone or the delivery to it failed, the cause wrapped.
func (m *Manager) ReportFrom(ctx context.Context, childID string, content []model.Block, delivery string) (string, error) {
	return m.report(ctx, resident.Key{Tenant: store.Tenant(ctx), ID: childID}, nil, content, delivery)
}

// reporter is MaterializeRequest.Report for the materialization inc
// identifies: ReportFrom with the manager's delivery, honoured only while
// that very activation is resident.
func (m *Manager) reporter(key resident.Key, inc *materialized) func(context.Context, []model.Block) (string, error) {
	return func(ctx context.Context, content []model.Block) (string, error) {
		return m.report(ctx, key, inc, content, m.delivery)
	}
}

// report is ReportFrom; a non-nil inc also requires the resident activation
// to be the one inc became.
func (m *Manager) report(ctx context.Context, key resident.Key, inc *materialized, content []model.Block, delivery string) (string, error) {
	quiet, err := quietDelivery(delivery)
	if err != nil {
		return "", err
	}
	if len(content) == 0 {
		return "", &subagent.Error{Code: subagent.EInvalidRequest, Message: "a report needs content",
			Fields: map[string]string{"content": "required"}}
	}
	if _, err := json.Marshal(content); err != nil {
		return "", &subagent.Error{Code: subagent.EInvalidRequest, Message: "report content is not valid JSON",
			Fields: map[string]string{"content": "not valid JSON"}, Err: err}
	}
	msg := append([]model.Block{model.TextBlock(fmt.Sprintf("Background subagent %s reported:", key.ID))}, content...)
	src := sessionlog.Source{Kind: subagent.SourceSubagentReport, Form: "relay", SenderSessionID: key.ID}

	act, err := m.admitReport(ctx, key, inc)
	if err != nil {
		return "", err
	}
	// Accepted: the delivery runs to its end, and the activation cannot
	// settle (and send its notice) before it has (R110).
	defer m.do(key, func(c *child) { m.release(c, act) })
	id, err := m.send(context.WithoutCancel(ctx), act.parentID, msg, src, quiet)
	if err != nil {
		return "", &subagent.Error{Code: subagent.EParentUnavailable, Message: "direct parent is not live; report was not delivered",
			Err: fmt.Errorf("report from %s to %s: %w", key.ID, act.parentID, err)}
	}
	return id, nil
}

// admitReport checks, in the child's loop, that a report of key may be
// accepted, and counts it as inflight work of the resident activation,
// which the caller releases. Returns EAborted, EDraining, EForbidden or
// EActivationClosing.
func (m *Manager) admitReport(ctx context.Context, key resident.Key, inc *materialized) (*activation, error) {
	if ctx.Err() != nil {
		return nil, &subagent.Error{Code: subagent.EAborted, Message: "the report was aborted before it was accepted", Err: context.Cause(ctx)}
	}
	if err := m.admitting(); err != nil {
		return nil, err
	}
	var act *activation
	err := notResident(key.ID)
	m.children.Peek(key, func(c *child) {
		switch a := c.act; {
		case a == nil || (inc != nil && inc.act != a):
		case a.state == actSettling:
			err = subagent.Errorf(subagent.EActivationClosing, "subagent %q is settling; its report was not accepted", key.ID)
		default:
			a.inflight++
			act, err = a, nil
		}
	})
	return act, err
}

func notResident(id string) error {
	return subagent.Errorf(subagent.EForbidden, "%q is not a live continuable subagent of this service; only one can report to its parent", id)
}

// quietDelivery reports whether delivery is DeliveryQuiet. Returns
// EInvalidRequest for anything but the two deliveries or "".
func quietDelivery(delivery string) (bool, error) {
	switch delivery {
	case "", subagent.DeliveryNextStep:
		return false, nil
	case subagent.DeliveryQuiet:
		return true, nil
	}
	return false, &subagent.Error{Code: subagent.EInvalidRequest, Fields: map[string]string{"delivery": "must be next-step or quiet"},
		Message: fmt.Sprintf("report delivery %q is not supported: use %q or %q", delivery, subagent.DeliveryNextStep, subagent.DeliveryQuiet)}
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
func (m *Manager) send(ctx context.Context, parentID string, content []model.Block, src sessionlog.Source, quiet bool) (string, error) {
	// The parent's writes are fenced by the parent's own lease, not by
	// the sender's.
	ctx = store.WithOwner(ctx, "")
	parent, err := m.store.GetSession(ctx, parentID)
	if err != nil {
		return "", fmt.Errorf("read parent %s: %w", parentID, err)
	}
	if parent.ParentID != "" && parent.Mode == subagent.ModeContinuable {
		return m.deliverInbox(ctx, parentID, content, src, !quiet)
	}
	if m.notices == nil {
		return "", errNoSink
	}
	msg := sessionlog.UserMessage{ID: uuid.NewString(), Role: "user", Content: content, Source: src}
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
func (m *Manager) deliverInbox(ctx context.Context, parentID string, content []model.Block, src sessionlog.Source, waking bool) (string, error) {
	row, err := newRow(parentID, content, src)
	if err != nil {
		return "", err
	}
	row.Quiet = !waking
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
	m.do(resident.Key{Tenant: store.Tenant(ctx), ID: parentID}, func(c *child) {
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
