package a2a

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// approver is a governance.Approver whose approvals the test decides.
type approver struct {
	opened chan governance.Ask
	// decide closes the approval awaited with the decision sent; the
	// turn's end cancels it.
	decide chan store.ApprovalDecision
	// closed receives the state of each approval closed.
	closed chan string
}

func newApprover() *approver {
	return &approver{opened: make(chan governance.Ask, 4), decide: make(chan store.ApprovalDecision, 4), closed: make(chan string, 4)}
}

func (a *approver) Policy(context.Context, governance.Query) (governance.Verdict, error) {
	return governance.Verdict{Decision: config.PermissionAsk}, nil
}

func (a *approver) Open(_ context.Context, ask governance.Ask) (store.Approval, error) {
	a.opened <- ask
	return store.Approval{ID: uuid.NewString(), State: store.ApprovalPending, SessionID: ask.SessionID, ToolCall: ask.ToolCall, Options: ask.Options}, nil
}

func (a *approver) Await(ctx context.Context, ap store.Approval, _ string) (store.Approval, error) {
	select {
	case d := <-a.decide:
		ap.State, ap.Decision = store.ApprovalDecided, &d
	case <-ctx.Done():
		ap.State = store.ApprovalCancelled
	}
	a.closed <- ap.State
	return ap, nil
}

// asked waits for the approval the provider opens.
func (a *approver) asked(t *testing.T) governance.Ask {
	t.Helper()
	select {
	case ask := <-a.opened:
		return ask
	case <-time.After(wait):
		t.Fatal("no approval was opened")
		return governance.Ask{}
	}
}

// asking starts a run whose remote task asks "which file, then?", its
// approvals decided by the approver it returns.
func asking(t *testing.T, streaming bool) (*remote, *bundle, *approver, subagent.Run) {
	t.Helper()
	rm := newRemote(t, streaming)
	p, b := setup(t, rm)
	ap := newApprover()
	p.approver = ap
	return rm, b, ap, start(t, p, "input which file, then?")
}

// A remote task's input-required is an approval of the asking child, with
// the agent's question as its title; the decision goes to the agent as the
// next message in that task, whose completion ends the turn. The child's
// log shows the approval's request and decision.
func TestRun_InputRequiredIsAnApproval(t *testing.T) {
	t.Parallel()
	for _, streaming := range []bool{true, false} {
		t.Run(map[bool]string{true: "streaming", false: "polled"}[streaming], func(t *testing.T) {
			t.Parallel()
			rm, b, ap, r := asking(t, streaming)
			ask := ap.asked(t)
			if ask.SessionID != r.ChildID() || ask.ToolCall.Title != "which file, then?" || len(ask.Options) != 2 {
				t.Fatalf("approval asked %+v", ask)
			}
			ap.decide <- store.ApprovalDecision{OptionID: "allow", Kind: governance.KindAllowOnce, By: "t", Reason: "main.go", At: time.Now()}
			res := result(t, r)
			if res.StopReason != subagent.StopCompleted || model.Text(res.Output) != "answered: main.go" {
				t.Fatalf("result %+v, want completed with the agent's answer to the decision", res)
			}
			_, types := logText(t, b.store, r.ChildID())
			if !slices.Contains(types, governance.EventApprovalRequested) || !slices.Contains(types, governance.EventApprovalDecided) {
				t.Fatalf("child log %v, want the approval's request and decision", types)
			}
			contexts, _ := rm.Seen()
			if len(contexts) != 2 || contexts[1][0] != contexts[0][1] {
				t.Fatalf("remote contexts %v, want the decision in the task's context", contexts)
			}
		})
	}
}

// A run cancelled while its question waits for a person ends aborted and
// cancels the approval.
func TestRun_CancelWhileInputRequiredCancelsTheApproval(t *testing.T) {
	t.Parallel()
	_, _, ap, r := asking(t, true)
	ap.asked(t)
	r.Cancel()
	if res := result(t, r); res.StopReason != subagent.StopAborted {
		t.Fatalf("result %+v, want aborted", res)
	}
	dispose(t, r)
	select {
	case state := <-ap.closed:
		if state != store.ApprovalCancelled {
			t.Fatalf("the approval was closed %s, want cancelled", state)
		}
	case <-time.After(wait):
		t.Fatal("the approval was not closed")
	}
}
