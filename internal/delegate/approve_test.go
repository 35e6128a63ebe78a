package delegate

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/providers/inprocess"
	"github.com/subagentd/subagentd/internal/providers/inprocess/inprocesstest"
	"github.com/subagentd/subagentd/internal/roots"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// approvalWorld is a world whose delegation tools ask through approvals,
// the root's tree asking about every delegation, and a provider "remote"
// whose children complete with "done".
type approvalWorld struct {
	*world
	approvals *governance.Approvals
	remote    *fakeProvider
}

func newApprovalWorld(t *testing.T, rules ...store.PolicyRule) *approvalWorld {
	t.Helper()
	w := &approvalWorld{}
	w.world = newWorld(t, scripted.New(), func(c *ToolsConfig, _ *roots.Manager, _ inprocess.Deps) {
		w.approvals = governance.NewApprovals(governance.ApprovalsConfig{Store: c.Store, Owner: "test", Poll: time.Hour})
		c.Approvals = w.approvals
	})
	ctx := inprocesstest.Ctx(t)
	if rules == nil {
		rules = []store.PolicyRule{{Kind: governance.KindDelegate, Decision: "ask"}}
	}
	if err := w.approvals.CreatePolicy(ctx, w.Parent.Session.ID, governance.PolicyParams{Mode: "allow", Rules: rules}); err != nil {
		t.Fatal(err)
	}
	w.remote = &fakeProvider{name: "remote", result: subagent.Result{StopReason: subagent.StopCompleted, Output: []model.Block{model.TextBlock("done")}}}
	if err := w.Service.Register(ctx, w.remote); err != nil {
		t.Fatal(err)
	}
	return w
}

type toolAnswer struct {
	out []model.Block
	err error
}

// delegate calls the remote's delegation tool in the background.
func (w *approvalWorld) delegate(t *testing.T, ctx context.Context, prompt string) <-chan toolAnswer {
	t.Helper()
	answered := make(chan toolAnswer, 1)
	go func() {
		out, err := w.callTool(t, ctx, w.remote, map[string]any{"description": "d", "prompt": prompt})
		answered <- toolAnswer{out, err}
	}()
	return answered
}

// pending waits for the tree's next pending approval.
func (w *approvalWorld) pending(t *testing.T) store.Approval {
	t.Helper()
	ctx := inprocesstest.Ctx(t)
	wake, stop := w.Store.Subscribe(store.LifecycleTopic)
	defer stop()
	deadline := time.After(inprocesstest.Timeout)
	for {
		list, err := w.Store.ListApprovals(ctx, store.ApprovalFilter{State: store.ApprovalPending})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) > 0 {
			return list[0]
		}
		select {
		case <-wake:
		case <-deadline:
			t.Fatalf("no pending approval after %s", inprocesstest.Timeout)
		}
	}
}

func (w *approvalWorld) answer(t *testing.T, answered <-chan toolAnswer) toolAnswer {
	t.Helper()
	select {
	case a := <-answered:
		return a
	case <-time.After(inprocesstest.Timeout):
		t.Fatalf("the delegation did not answer after %s", inprocesstest.Timeout)
		return toolAnswer{}
	}
}

func TestApprove_AllowStartsTheChild(t *testing.T) {
	t.Parallel()
	w := newApprovalWorld(t)
	ctx := inprocesstest.Ctx(t)
	answered := w.delegate(t, ctx, "Summarise the README\nand list its sections")
	ap := w.pending(t)
	if ap.ToolCall.Kind != governance.KindDelegate || ap.ToolCall.Title != "remote: Summarise the README" || ap.Provider != "remote" ||
		ap.SessionID != w.Parent.Session.ID || ap.RootSessionID != w.Parent.Session.ID || ap.RunID != "" ||
		!strings.Contains(string(ap.ToolCall.RawInput), "list its sections") || len(ap.Options) != 3 {
		t.Fatalf("approval %+v", ap)
	}
	if n := len(w.remote.requests()); n != 0 {
		t.Fatalf("%d children exist before the decision", n)
	}
	if _, err := w.approvals.Decide(ctx, ap.ID, governance.Decision{Outcome: "allow"}); err != nil {
		t.Fatal(err)
	}
	if a := w.answer(t, answered); a.err != nil || model.Text(a.out) != "done" {
		t.Fatalf("tool answered %+v, %v", a.out, a.err)
	}
	if n := len(w.remote.requests()); n != 1 {
		t.Fatalf("%d children, want 1", n)
	}
}

func TestApprove_RejectTellsTheModelAndStartsNothing(t *testing.T) {
	t.Parallel()
	w := newApprovalWorld(t)
	ctx := inprocesstest.Ctx(t)
	answered := w.delegate(t, ctx, "delete everything")
	ap := w.pending(t)
	if _, err := w.approvals.Decide(ctx, ap.ID, governance.Decision{Outcome: "reject", Reason: "not today"}); err != nil {
		t.Fatal(err)
	}
	a := w.answer(t, answered)
	if a.err == nil || a.err.Error() != "a person declined delegating to remote: not today" {
		t.Fatalf("tool answered %+v, %v", a.out, a.err)
	}
	if n := len(w.remote.requests()); n != 0 {
		t.Fatalf("%d children after a rejection", n)
	}
}

// The calling turn ends (interrupt, cancel) while the approval is pending:
// the approval is cancelled and no child starts.
func TestApprove_TurnEndCancelsTheApproval(t *testing.T) {
	t.Parallel()
	w := newApprovalWorld(t)
	ctx, cancel := context.WithCancel(inprocesstest.Ctx(t))
	answered := w.delegate(t, ctx, "wait for me")
	ap := w.pending(t)
	cancel()
	if a := w.answer(t, answered); a.err == nil {
		t.Fatalf("tool answered %+v after its turn ended", a.out)
	}
	got, err := w.approvals.Get(inprocesstest.Ctx(t), ap.ID)
	if err != nil || got.State != store.ApprovalCancelled {
		t.Fatalf("approval %+v, %v; want cancelled", got, err)
	}
	if n := len(w.remote.requests()); n != 0 {
		t.Fatalf("%d children after a cancelled approval", n)
	}
}

// Always allows the same delegation in the tree from then on; a tree
// whose policy has no delegate rule delegates without asking.
func TestApprove_AlwaysAndNoRule(t *testing.T) {
	t.Parallel()
	w := newApprovalWorld(t)
	ctx := inprocesstest.Ctx(t)
	answered := w.delegate(t, ctx, "same task")
	ap := w.pending(t)
	if _, err := w.approvals.Decide(ctx, ap.ID, governance.Decision{Outcome: "allow", Scope: "always"}); err != nil {
		t.Fatal(err)
	}
	if a := w.answer(t, answered); a.err != nil {
		t.Fatal(a.err)
	}
	if a := w.answer(t, w.delegate(t, ctx, "same task")); a.err != nil || model.Text(a.out) != "done" {
		t.Fatalf("the second delegation answered %+v, %v", a.out, a.err)
	}
	if list, err := w.Store.ListApprovals(ctx, store.ApprovalFilter{}); err != nil || len(list) != 1 {
		t.Fatalf("approvals %+v, %v; want only the first", list, err)
	}

	free := newApprovalWorld(t, store.PolicyRule{Kind: "edit", Decision: "ask"})
	if a := free.answer(t, free.delegate(t, ctx, "anything")); a.err != nil || model.Text(a.out) != "done" {
		t.Fatalf("without a delegate rule: %+v, %v", a.out, a.err)
	}
	rejecting := newApprovalWorld(t, store.PolicyRule{Kind: governance.KindDelegate, TitlePattern: "^remote: ", Decision: "reject"})
	if a := rejecting.answer(t, rejecting.delegate(t, ctx, "anything")); a.err == nil || !strings.Contains(a.err.Error(), "the approvals policy declines it") {
		t.Fatalf("under a rejecting rule: %+v, %v", a.out, a.err)
	}
}

// A root agent's own delegation through the agent loop: the approval is
// pending while the turn waits, and stopping the turn (a tree cancel)
// cancels it; the tool's error result is in the root's log and no child
// exists.
func TestApprove_RootTurnStoppedWhilePending(t *testing.T) {
	t.Parallel()
	m := scripted.New(
		scripted.Step{ToolCalls: []model.ToolCall{call("c1", SpawnTool, map[string]any{"description": "d", "prompt": "look around"})}},
	)
	var approvals *governance.Approvals
	w := newWorld(t, m, func(c *ToolsConfig, _ *roots.Manager, _ inprocess.Deps) {
		approvals = governance.NewApprovals(governance.ApprovalsConfig{Store: c.Store, Owner: "test", Poll: time.Hour})
		c.Approvals = approvals
	})
	aw := &approvalWorld{world: w, approvals: approvals}
	ctx := inprocesstest.Ctx(t)
	root := w.Parent.Session.ID
	if err := approvals.CreatePolicy(ctx, root, governance.PolicyParams{Mode: "allow",
		Rules: []store.PolicyRule{{Kind: governance.KindDelegate, Decision: "ask"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.roots.Prompt(ctx, root, inprocesstest.Text("go")); err != nil {
		t.Fatal(err)
	}
	ap := aw.pending(t)
	if ap.ToolCall.Title != "spawn: look around" || ap.ToolCall.ID != "c1" {
		t.Fatalf("approval %+v", ap)
	}
	if stopped, err := w.roots.StopTurn(ctx, root); err != nil || !stopped {
		t.Fatalf("StopTurn = %v, %v", stopped, err)
	}
	w.waitTurnEnd(t, root, 1)
	got, err := approvals.Get(ctx, ap.ID)
	if err != nil || got.State != store.ApprovalCancelled {
		t.Fatalf("approval %+v, %v; want cancelled", got, err)
	}
	if runs := w.RunEvents(t); len(runs) != 0 {
		t.Fatalf("lifecycle %+v, want no child", runs)
	}
	// The root's log shows the question and its close, numbered as the
	// turn that asked, before the tool's result.
	evs, err := w.Store.Events(ctx, root, -1, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, e := range evs {
		switch e.Type {
		case governance.EventApprovalRequested, governance.EventApprovalDecided:
			var d struct {
				Turn       int
				ApprovalID string
				State      string
			}
			if err := json.Unmarshal(e.Data, &d); err != nil || d.Turn != 1 || d.ApprovalID != ap.ID {
				t.Fatalf("%s %s, want turn 1 of approval %s (%v)", e.Type, e.Data, ap.ID, err)
			}
			seen = append(seen, e.Type+" "+d.State)
		case sessionlog.EventToolResult:
			seen = append(seen, e.Type)
		}
	}
	if want := []string{"approval/requested ", "approval/decided cancelled", "tool/result"}; !slices.Equal(seen, want) {
		t.Fatalf("the root's log holds %q, want %q", seen, want)
	}
}
