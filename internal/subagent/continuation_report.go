package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
)

// ReportFrom sends content from continuable child childID to its durable
// direct parent (seam-spec §2.14) and returns the id of the message the
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
// is empty or not JSON; EAborted when ctx is done; EDraining; EUnauthorized
// unless childID is a resident continuable activation of this process (a
// root, a one-shot or a settled child is not); EActivationClosing once its
// settlement began. Then EParentUnavailable when the parent session is
// gone or the delivery to it failed, the cause wrapped.
func (m *Manager) ReportFrom(ctx context.Context, childID string, content []model.Block, delivery string) (string, error) {
	return m.report(ctx, childKey{store.Tenant(ctx), childID}, nil, content, delivery)
}

// reporter is MaterializeRequest.Report for the materialization inc
// identifies: ReportFrom with the manager's delivery, honoured only while
// that very activation is resident.
func (m *Manager) reporter(key childKey, inc *incarnation) func(context.Context, []model.Block) (string, error) {
	return func(ctx context.Context, content []model.Block) (string, error) {
		return m.report(ctx, key, inc, content, m.delivery)
	}
}

// report is ReportFrom; a non-nil inc also requires the resident activation
// to be the one inc became.
func (m *Manager) report(ctx context.Context, key childKey, inc *incarnation, content []model.Block, delivery string) (string, error) {
	quiet, err := quietDelivery(delivery)
	if err != nil {
		return "", err
	}
	if len(content) == 0 {
		return "", &Error{Code: EInvalidRequest, Message: "a report needs content",
			Fields: map[string]string{"content": "required"}}
	}
	if _, err := json.Marshal(content); err != nil {
		return "", &Error{Code: EInvalidRequest, Message: "report content is not valid JSON",
			Fields: map[string]string{"content": "not valid JSON"}, Err: err}
	}
	msg := append([]model.Block{model.TextBlock(fmt.Sprintf("Background subagent %s reported:", key.id))}, content...)
	src := agent.Source{Kind: SourceSubagentReport, Form: "relay", SenderSessionID: key.id}

	act, err := m.admitReport(ctx, key, inc)
	if err != nil {
		return "", err
	}
	// Accepted: the delivery runs to its end, and the activation cannot
	// settle (and send its notice) before it has (R110).
	defer m.do(key, func(c *child) { m.release(c, act) })
	id, err := m.send(context.WithoutCancel(ctx), act.parentID, msg, src, quiet)
	if err != nil {
		return "", &Error{Code: EParentUnavailable, Message: "direct parent is not live; report was not delivered",
			Err: fmt.Errorf("report from %s to %s: %w", key.id, act.parentID, err)}
	}
	return id, nil
}

// admitReport checks, in the child's loop, that a report of key may be
// accepted, and counts it as inflight work of the resident activation,
// which the caller releases. Returns EAborted, EDraining, EUnauthorized or
// EActivationClosing.
func (m *Manager) admitReport(ctx context.Context, key childKey, inc *incarnation) (*activation, error) {
	if ctx.Err() != nil {
		return nil, &Error{Code: EAborted, Message: "the report was aborted before it was accepted", Err: context.Cause(ctx)}
	}
	if err := m.admitting(); err != nil {
		return nil, err
	}
	var act *activation
	err := notResident(key.id)
	m.children.Peek(key, func(c *child) {
		switch a := c.act; {
		case a == nil || (inc != nil && inc.act != a):
		case a.closing:
			err = Errorf(EActivationClosing, "subagent %q is settling; its report was not accepted", key.id)
		default:
			a.inflight++
			act, err = a, nil
		}
	})
	return act, err
}

func notResident(id string) error {
	return Errorf(EUnauthorized, "%q is not a live continuable subagent of this service; only one can report to its parent", id)
}

// quietDelivery reports whether delivery is DeliveryQuiet. Returns
// EInvalidRequest for anything but the two deliveries or "".
func quietDelivery(delivery string) (bool, error) {
	switch delivery {
	case "", DeliveryNextStep:
		return false, nil
	case DeliveryQuiet:
		return true, nil
	}
	return false, &Error{Code: EInvalidRequest, Fields: map[string]string{"delivery": "must be next-step or quiet"},
		Message: fmt.Sprintf("report delivery %q is not supported: use %q or %q", delivery, DeliveryNextStep, DeliveryQuiet)}
}

// SteerActivation is confirmed steering of a live activation (seam-spec
// R96, POST /v1/runs/{runId}/steer): content joins the running turn of
// the activation whose run id is runID and the call returns the message id
// once a model step admitted it. It is strict — never queued for a later
// turn, never a cold resume — and separate from Followup.
//
// An activation another replica drives is steered there (Control).
// Returns ERunNotFound when runID is no live activation of any replica
// (in ctx's tenant); EInvalidRequest for empty content; ESteerRejected when
// the activation runs no turn, was interrupted, is settling, or its turn
// ended before admitting content; ctx's error when ctx ended first (the
// content withdrawn).
func (m *Manager) SteerActivation(ctx context.Context, runID string, content []model.Block) (string, error) {
	m.mu.Lock()
	act := m.runs[runID]
	m.mu.Unlock()
	if act == nil || act.c.key.tenant != store.Tenant(ctx) {
		return m.routeSteer(ctx, runID, content)
	}
	if len(content) == 0 {
		return "", &Error{Code: EInvalidRequest, Message: "content is required", Fields: map[string]string{"content": "required"}}
	}
	// The agent's own checks suffice: a settling activation's agent is idle
	// or closed, an interrupted one's turn is cancelled.
	id, err := act.agent.Steer(ctx, content, agent.Source{Kind: SourceUser})
	if errors.Is(err, agent.ErrSteerRejected) {
		return "", &Error{Code: ESteerRejected, Err: err, Message: "the subagent did not admit the message: it is not running a turn, " +
			"was interrupted, is settling, or its turn ended first; send it a followup instead"}
	}
	if err != nil {
		return "", fmt.Errorf("steer activation %s of %s: %w", runID, act.c.key.id, err)
	}
	return id, nil
}
