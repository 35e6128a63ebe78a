package acp

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/logtest"
	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// askSetup returns a provider running the TypeScript SDK's example agent
// with permission: ask, and the approvals it asks through.
func askSetup(t *testing.T, edit ...func(*config.ProviderConfig)) (*Provider, *bundle, *governance.Approvals) {
	t.Helper()
	node, script := tsExampleAgent(t)
	b := &bundle{store: memstore.New(), root: t.TempDir(), marks: t.TempDir(), logs: &logtest.Buffer{}}
	cfg := config.ProviderConfig{Name: "peer", Type: config.TypeACP, Command: node, Args: []string{script},
		Permission: config.PermissionAsk, DisposeEOFGrace: wait, DisposeGrace: wait}
	for _, e := range edit {
		e(&cfg)
	}
	if err := b.store.CreateSession(context.Background(), store.Session{ID: parentID, Cwd: b.root}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	approvals := governance.NewApprovals(governance.ApprovalsConfig{Store: b.store, Owner: "me", Logger: log, Poll: time.Hour})
	p, err := New(cfg, Deps{Store: b.store, Logger: log, WorkspaceRoots: []string{b.root}, Approver: approvals})
	if err != nil {
		t.Fatal(err)
	}
	return p, b, approvals
}

// publish records the run of r as the service does after Start.
func publish(t *testing.T, b *bundle, r subagent.Run) string {
	t.Helper()
	id := "run-" + r.ChildID()
	_, err := b.store.StartRun(context.Background(), store.Run{ID: id, Kind: store.KindOneShot, Provider: "peer", ChildID: r.ChildID(),
		ParentID: parentID, Owner: "me", LeaseUntil: time.Now().Add(time.Hour)},
		store.LifecycleEvent{Type: subagent.EventStart, ParentID: parentID, RunID: id, Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// awaitApproval waits, on lifecycle wake-ups, for the approval of child in
// state.
func awaitApproval(t *testing.T, st store.Store, child, state string) store.Approval {
	t.Helper()
	woken, stop := st.Subscribe(store.LifecycleTopic)
	defer stop()
	timeout := time.After(wait)
	for {
		list, err := st.ListApprovals(context.Background(), store.ApprovalFilter{SessionID: child})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) > 0 && list[0].State == state {
			return list[0]
		}
		select {
		case <-woken:
		case <-timeout:
			t.Fatalf("no %s approval for %s; have %+v", state, child, list)
		}
	}
}

func TestPeer_TypeScriptExampleAgent_Ask(t *testing.T) {
	t.Parallel()
	tests := []struct {
		outcome, option, says string
	}{
		{"allow", "allow", "I've successfully updated the configuration."},
		{"reject", "reject", "I'll skip the configuration update."},
	}
	for _, tt := range tests {
		t.Run(tt.outcome, func(t *testing.T) {
			t.Parallel()
			p, b, approvals := askSetup(t)
			r := start(t, p, b)
			runID := publish(t, b, r)
			ap := awaitApproval(t, b.store, r.ChildID(), store.ApprovalPending)
			if ap.RunID != runID || ap.RootSessionID != parentID || ap.ToolCall.ID != "call_2" || ap.ToolCall.Kind != "edit" ||
				ap.ToolCall.Title != "Modifying critical configuration file" || len(ap.Options) != 2 ||
				!strings.Contains(string(ap.ToolCall.Locations), "config.json") || !strings.Contains(string(ap.ToolCall.RawInput), "new-host") {
				t.Fatalf("approval %+v", ap)
			}
			select {
			case <-r.Done():
				t.Fatal("the run settled while its approval was pending")
			default:
			}
			decided, err := approvals.Decide(context.Background(), ap.ID, governance.Decision{Outcome: tt.outcome})
			if err != nil || decided.Decision.OptionID != tt.option {
				t.Fatalf("Decide: %+v, %v", decided, err)
			}
			res := result(t, r)
			if text := model.Text(res.Output); res.StopReason != subagent.StopCompleted || !strings.Contains(text, tt.says) {
				t.Fatalf("result %+v, want completed with %q", res, tt.says)
			}
			// The transcript shows the approval, its decision and the answer.
			var types []string
			var perm sessionlog.ACPPermissionData
			for _, e := range events(t, b.store, r.ChildID()) {
				switch e.Type {
				case governance.EventApprovalRequested, governance.EventApprovalDecided:
					types = append(types, e.Type)
					if !strings.Contains(string(e.Data), ap.ID) {
						t.Fatalf("%s without the approval id: %s", e.Type, e.Data)
					}
				case sessionlog.EventACPPermission:
					types = append(types, e.Type)
					if err := json.Unmarshal(e.Data, &perm); err != nil {
						t.Fatal(err)
					}
				}
			}
			if strings.Join(types, ",") != "approval/requested,approval/decided,acp/permission" || perm.OptionID != tt.option {
				t.Fatalf("log has %v, permission %+v", types, perm)
			}
			life, err := b.store.Lifecycle(context.Background(), store.LifecycleFilter{Types: []string{governance.EventApprovalRequested, governance.EventApprovalDecided}})
			if err != nil || len(life) != 2 || life[1].RunID != runID {
				t.Fatalf("lifecycle %+v, %v", life, err)
			}
			dispose(t, r)
		})
	}
}

// TestPeer_TypeScriptExampleAgent_AskCancelled: a run cancelled while its
// approval is pending answers the agent "cancelled" and closes the approval
// cancelled; a later decision is refused.
func TestPeer_TypeScriptExampleAgent_AskCancelled(t *testing.T) {
	t.Parallel()
	p, b, approvals := askSetup(t)
	r := start(t, p, b)
	publish(t, b, r)
	ap := awaitApproval(t, b.store, r.ChildID(), store.ApprovalPending)
	r.Cancel()
	if res := result(t, r); res.StopReason != subagent.StopAborted {
		t.Fatalf("result %+v, want aborted", res)
	}
	got := awaitApproval(t, b.store, r.ChildID(), store.ApprovalCancelled)
	if got.ID != ap.ID || got.Decision != nil {
		t.Fatalf("cancelled approval %+v", got)
	}
	if _, err := approvals.Decide(context.Background(), ap.ID, governance.Decision{Outcome: "allow"}); subagent.ErrorCode(err) != subagent.EAlreadyDecided {
		t.Fatalf("decision after cancel: %v", err)
	}
	dispose(t, r)
}

// TestPeer_TypeScriptExampleAgent_RulesDecideWithoutApprovals: a rule that
// allows the tool call answers at once, and no approval exists.
func TestPeer_TypeScriptExampleAgent_RulesDecideWithoutApprovals(t *testing.T) {
	t.Parallel()
	p, b, _ := askSetup(t, func(c *config.ProviderConfig) {
		c.Rules = []config.PermissionRule{{Kind: "edit", Decision: config.PermissionAllow}}
	})
	r := start(t, p, b)
	publish(t, b, r)
	res := result(t, r)
	if !strings.Contains(model.Text(res.Output), "successfully updated") {
		t.Fatalf("result %+v, want the allowed change", res)
	}
	if l, err := b.store.ListApprovals(context.Background(), store.ApprovalFilter{}); err != nil || len(l) != 0 {
		t.Fatalf("approvals %+v, %v; want none", l, err)
	}
	dispose(t, r)
}

func TestNew_AskNeedsAnApprover(t *testing.T) {
	t.Parallel()
	_, err := New(config.ProviderConfig{Name: "x", Command: fakeAgent, Permission: config.PermissionAsk},
		Deps{Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "takes no approvals") {
		t.Fatalf("New: %v", err)
	}
}

// TestContinuable_AskWaitsForTheDecision: a continuable child's turn asks
// like a one-shot run; its approval names the task, and the activation
// counts it as pending until the decision, which its turn then acts on.
func TestContinuable_AskWaitsForTheDecision(t *testing.T) {
	t.Parallel()
	p, b := continuable(t, "resume", func(c *config.ProviderConfig) {
		c.Env["FAKE_MODE"], c.Permission = "permission", config.PermissionAsk
	})
	w, _ := world(t, p, b)
	res := w.start(t, b, "go")
	ap := awaitApproval(t, b.store, res.ChildID, store.ApprovalPending)
	if ap.TaskID != res.TaskID || ap.ToolCall.Title != "Delete build/" || ap.ToolCall.Kind != "other" {
		t.Fatalf("approval %+v, want task %s", ap, res.TaskID)
	}
	run, err := b.store.GetRun(context.Background(), ap.RunID)
	if err != nil || run.TaskID != res.TaskID || run.PendingApprovals != 1 {
		t.Fatalf("activation %+v, %v; want 1 pending approval", run, err)
	}
	if _, err := b.approvals.Decide(context.Background(), ap.ID, governance.Decision{OptionID: "yes"}); err != nil {
		t.Fatal(err)
	}
	e := w.end(t, res.TaskID)
	if e.StopReason != subagent.StopCompleted || !strings.Contains(model.Text(e.LastAssistantMessage), "selected yes") {
		t.Fatalf("end %+v", e)
	}
}
