package a2a

import (
	"log/slog"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/providers/turnlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// A remote agent's input-required is a question for a person: the
// provider opens an approval for it (governance.Approver, the one path ACP
// permission requests and delegations take), journals approval/requested
// and approval/decided in the child's log as an ACP child does, and sends
// the decision to the agent as the next message in that task — A2A's
// continuation of an input-required task — then follows the task on. The
// approvals policy answers tool calls, and a remote agent's question is
// none: every input-required is asked. The turn waits for the decision
// until it ends (a cancel, an interrupt, its tree's deadline), which
// cancels the approval.

// needsInput is the internal stop reason of a task left input-required
// that the provider asks a person about (follower.answer).
const needsInput = "needs_input"

// The answers an input-required approval offers.
var inputOptions = []store.ApprovalOption{
	{OptionID: "allow", Name: "Allow", Kind: governance.KindAllowOnce},
	{OptionID: "reject", Name: "Reject", Kind: governance.KindRejectOnce},
}

// answer asks a person the question of the task's input-required status
// (f.question) and sends the decision into the task, following it on:
// it returns the outcome the task then reaches. A question nobody could
// be asked fails the turn; one the turn's end cancelled ends it aborted.
func (f *follower) answer() turnlog.Outcome {
	f.mu.Lock()
	id, contextID, question := f.taskID, f.contextID, f.question
	f.mu.Unlock()
	ap, err := f.p.approver.Open(f.callCtx, governance.Ask{
		SessionID: f.childID, Provider: f.p.cfg.Name, Options: inputOptions,
		ToolCall: store.ApprovalToolCall{ID: string(id), Title: governance.Clean(question, governance.MaxTitle), Kind: "other"},
	})
	if err != nil {
		if f.isStopped() {
			return aborted()
		}
		return failed("the remote A2A agent needs input (input-required), and no approval could be opened for it: %v", err)
	}
	if f.journal(turnlog.Event{Type: governance.EventApprovalRequested, Data: governance.Requested(f.turn, ap)}, "") != nil {
		f.stop() // the turn stops: the approval is cancelled
	}
	closed, err := f.p.approver.Await(f.callCtx, ap, "")
	if err != nil {
		f.log.Error("cannot close an approval", slog.String("approval_id", ap.ID), slog.Any("error", err))
		closed = ap
	}
	_ = f.journal(turnlog.Event{Type: governance.EventApprovalDecided, Data: governance.Decided(f.turn, closed)}, "")
	d := closed.Decision
	if d == nil || f.isStopped() {
		return aborted()
	}
	msg := sdk.NewMessage(sdk.MessageRoleUser, sdk.NewTextPart(decisionText(d)),
		sdk.NewDataPart(map[string]any{"approvalId": ap.ID, "optionId": d.OptionID, "kind": d.Kind, "reason": d.Reason}))
	msg.TaskID, msg.ContextID = id, contextID
	req := &sdk.SendMessageRequest{Message: msg}
	if f.c.streaming {
		return f.stream(req)
	}
	return f.poll(req)
}

// decisionText is what the agent is told of d: the person's reason, their
// answer to its question, else the option's name.
func decisionText(d *store.ApprovalDecision) string {
	if d.Reason != "" {
		return d.Reason
	}
	for _, o := range inputOptions {
		if o.OptionID == d.OptionID {
			return o.Name
		}
	}
	return d.OptionID
}

// inputStatus is the outcome of an input-required or auth-required status
// whose message is text: input-required is asked (needsInput) when the
// provider has an approver; otherwise an error saying what the agent waits
// for.
func (f *follower) inputStatus(s sdk.TaskState, text string) *turnlog.Outcome {
	if s == sdk.TaskStateInputRequired && f.p.approver != nil {
		f.mu.Lock()
		f.question = text
		f.mu.Unlock()
		return &turnlog.Outcome{Reason: needsInput}
	}
	return &turnlog.Outcome{Reason: subagent.StopError, Diagnostic: withText(
		"the remote A2A agent needs input ("+stateName(s)+"), which subagentd does not relay to it", text)}
}
